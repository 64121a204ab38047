package node_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/kuiknode"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// providerName is the fake credential provider in the chart's CredentialProviderConfig, and the
// name of its plugin binary in the plugin image.
const providerName = "fake-ecr"

// providerRegistry is a registry on the node's address that accepts only the credentials the
// fake provider mints with its key, unexpired (fakeprovider.Verify): no static credential
// exists for it, so a pull succeeds only with what the plugin minted. It records who asked what.
type providerRegistry struct {
	// Host is host:port, the registry part of image references.
	Host string
	key  []byte
	// ca signed the registry's certificate when it serves HTTPS; nil for plain HTTP.
	ca *testenv.CA

	mu   sync.Mutex
	seen []registryRequest
}

// registryRequest is one request the provider registry received.
type registryRequest struct {
	Method, Path, UserAgent string
	// Authenticated: it carried an unexpired credential the fake provider minted.
	Authenticated bool
}

// newProviderRegistry starts the provider registry on addr with a fresh key; it lives as long
// as the test binary, as the other shared registries do. With ca, it serves HTTPS with a
// certificate ca signed for the node's address.
func newProviderRegistry(addr string, ca *testenv.CA) (*providerRegistry, error) {
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("provider key: %w", err)
	}
	p := &providerRegistry{key: []byte(hex.EncodeToString(key)), ca: ca}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("provider registry: listening on %s: %w", addr, err)
	}
	p.Host = l.Addr().String()
	if ca != nil {
		pair, err := ca.ServingPairFor([]net.IP{net.ParseIP(testnode.NodeIP)})
		if err != nil {
			return nil, err
		}
		cert, err := pair.TLSCertificate()
		if err != nil {
			return nil, err
		}
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	check := fakeprovider.Check(p.key, nil)
	// Not testutil.NewRegistryFunc: the test tells the webhook's probes from containerd's pulls
	// by their User-Agent, and counts blob fetches, which that registry does not record.
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, password, ok := req.BasicAuth()
		authenticated := ok && check(user, password)
		p.mu.Lock()
		p.seen = append(p.seen, registryRequest{Method: req.Method, Path: req.URL.Path, UserAgent: req.UserAgent(), Authenticated: authenticated})
		p.mu.Unlock()
		if !authenticated {
			w.Header().Set("WWW-Authenticate", `Basic realm="kuik-provider-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"a credential of the fake provider is required"}]}`))
			return
		}
		inner.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(l) }()
	return p, nil
}

// tally counts who fetched what since mark: the fake plugin's calls (FAKE_PROVIDER_CHECK_URL,
// with or without a credential), and, with a credential of the fake provider, the webhook's
// manifest probes and containerd's manifest and blob fetches (the kubelet's pull).
type tally struct{ checks, probed, manifests, blobs int }

func (p *providerRegistry) tally(mark int) tally {
	var c tally
	for _, r := range p.requests(mark) {
		containerd := strings.HasPrefix(r.UserAgent, "containerd/")
		switch {
		case r.UserAgent == fakeprovider.CheckUserAgent:
			c.checks++
		case !r.Authenticated:
		case strings.Contains(r.UserAgent, "kuik-webhook") && strings.Contains(r.Path, "/manifests/"):
			c.probed++
		case containerd && strings.Contains(r.Path, "/manifests/"):
			c.manifests++
		case containerd && strings.Contains(r.Path, "/blobs/") && r.Method == http.MethodGet:
			c.blobs++
		}
	}
	return c
}

// requests returns the requests received since mark (a length of seen).
func (p *providerRegistry) requests(mark int) []registryRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]registryRequest(nil), p.seen[mark:]...)
}

func (p *providerRegistry) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

// pushGuest pushes a guest image labelled with its reference, with a credential minted for the
// push, and returns the reference.
func (p *providerRegistry) pushGuest(t *testing.T, n *testnode.Node, repoAndTag string) string {
	t.Helper()
	var opts []name.Option
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if p.ca == nil {
		opts = append(opts, name.Insecure)
	} else {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(p.ca.PEM)
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	ref, err := name.ParseReference(p.Host+"/"+repoAndTag, opts...)
	if err != nil {
		t.Fatal(err)
	}
	img, err := n.GuestImage(ref.Name())
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.FromConfig(authn.AuthConfig{Username: fakeprovider.Username, Password: fakeprovider.Mint(p.key, time.Now().Add(time.Minute))})
	if err := remote.Write(ref, img, remote.WithAuth(auth), remote.WithContext(t.Context()), remote.WithTransport(transport)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref.Name()
}

// chartValues builds the fake provider's plugin (a static binary, once per provider name),
// pushes it as an image to the images registry and returns the chart values that give it to the
// secret-syncer: an inline CredentialProviderConfig with providerName matching this registry and
// the providers of extra, and the plugin image mounted as an image volume (the release
// namespace enforces the restricted Pod Security level, which forbids a hostPath bin dir).
func (p *providerRegistry) chartValues(ctx context.Context, images string, extra ...map[string]any) (map[string]any, error) {
	providers := append([]map[string]any{p.providerConfig(providerName)}, extra...)
	binaries := map[string]string{}
	list := make([]any, 0, len(providers))
	for _, c := range providers {
		binaries[c["name"].(string)] = "github.com/enix/kuik/internal/testutil/fakeprovider/plugin"
		list = append(list, c)
	}
	ref, err := kuiknode.PushBinaries(ctx, images+"/e2e/credential-providers", "v1", binaries)
	if err != nil {
		return nil, fmt.Errorf("the fake provider's image: %w", err)
	}
	return map[string]any{"credentialProviders": map[string]any{
		"config": map[string]any{"providers": list},
		"binDir": map[string]any{"image": map[string]any{
			"repository": ref.Context().String(), "digest": ref.DigestStr(), "mode": "imageVolume",
		}},
	}}, nil
}

// providerConfig is a CredentialProviderConfig provider named name, matching this registry,
// whose plugin mints credentials with its key; env is added to the plugin's environment.
func (p *providerRegistry) providerConfig(name string, env ...map[string]any) map[string]any {
	vars := []any{
		map[string]any{"name": fakeprovider.EnvKey, "value": string(p.key)},
		map[string]any{"name": fakeprovider.EnvTTL, "value": "10m"},
	}
	for _, e := range env {
		vars = append(vars, e)
	}
	return map[string]any{
		"name":                 name,
		"matchImages":          []any{p.Host},
		"defaultCacheDuration": "10m",
		"apiVersion":           "credentialprovider.kubelet.k8s.io/v1",
		"env":                  vars,
	}
}

// verifies checks a "user:password" of a pull Secret: the fake provider's username and an
// unexpired token it minted with the registry's key.
func (p *providerRegistry) verifies(credential string) error {
	user, password, _ := strings.Cut(credential, ":")
	if user != fakeprovider.Username {
		return fmt.Errorf("username %q, want %q", user, fakeprovider.Username)
	}
	if !fakeprovider.Verify(p.key, password, time.Now()) {
		return errors.New("the password is not an unexpired token of the fake provider")
	}
	return nil
}

// The flagship of provider credentials, on the real node: the chart gives the secret-syncer a
// kubelet credential-provider plugin (the fake provider, from an image volume) and its
// CredentialProviderConfig; the syncer runs it and keeps the credential in a kuik-provider-*
// Secret; the webhook probes the provider entry with that credential and routes the pod past a
// down upstream; the syncer injects the credential into the pod's pull Secret; the kubelet
// pulls the image with it from a registry that accepts nothing but the fake provider's
// unexpired credentials, and the pod runs. The same image pulled without kuik is refused.
func TestProviderCredentialInjectedPodPullsOnTheNode(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	p := w.provider
	image := p.pushGuest(t, w.n, "acme/app:v1")
	private := p.Host + "/acme/app"
	upstream := w.down + "/acme/app"
	selected := w.namespace(t, map[string]string{"e2e": "provider"})
	outside := w.namespace(t, nil)
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "provider"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": "provider"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: private, Insecure: true, Auth: &v1alpha1.Auth{
					Provider:         &v1alpha1.ProviderAuth{Name: providerName},
					InjectPullSecret: ptr.To(true),
				}},
			},
		},
	}
	// As admin, who may use every provider (the webhook's SubjectAccessReview on
	// credentialproviders.kuik.enix.io admits it).
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-provider"

	t.Run("the syncer keeps the provider's credential and the resource is Ready", func(t *testing.T) {
		// The plugin answers cacheKeyType Registry: the Secret holds it once, under the
		// registry, where the webhook's probe of the entry finds it by the keyring rules.
		providerSecret := credentialprovider.SecretName(providerName, nil)
		eventually(t, fmt.Sprintf("secret %s/%s holds a credential of the fake provider for %s", w.kuik.Namespace, providerSecret, p.Host), func(ctx context.Context) error {
			s, err := w.cs.CoreV1().Secrets(w.kuik.Namespace).Get(ctx, providerSecret, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if s.Type != corev1.SecretTypeDockerConfigJson || s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer {
				return fmt.Errorf("type %s, labels %v", s.Type, s.Labels)
			}
			a, err := authsOf(s)
			if err != nil {
				return err
			}
			if len(a) != 1 {
				return fmt.Errorf("auths keys %v, want only %s", keys(a), p.Host)
			}
			c, ok := a[p.Host]
			if !ok {
				return fmt.Errorf("auths keys %v, want %s", keys(a), p.Host)
			}
			return p.verifies(c)
		})
		eventually(t, "ImageAlternative/provider Ready", func(ctx context.Context) error {
			var got v1alpha1.ImageAlternative
			if err := w.c.Get(ctx, client.ObjectKeyFromObject(ia), &got); err != nil {
				return err
			}
			c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("conditions %+v", got.Status.Conditions)
			}
			return nil
		})
	})

	t.Run("the routed pod runs, pulled with the injected provider credential", func(t *testing.T) {
		mark := p.mark()
		original := upstream + ":v1"
		pd := pod("app", original)
		pd.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		got, created := w.createPodUntil(t, selected, pd, rewritten)
		checkRouted(t, got, original, image, "ImageAlternative/provider", "OnFailure", secretName)
		took := w.waitRunning(t, selected, "app", created)

		s, err := w.cs.CoreV1().Secrets(selected).Get(t.Context(), secretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the pull Secret: %v", err)
		}
		a, err := authsOf(s)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{private}, keys(a)); diff != "" {
			t.Errorf("pull Secret auths keys (-want +got):\n%s", diff)
		}
		if err := p.verifies(a[private]); err != nil {
			t.Errorf("pull Secret %s/%s: %v", selected, secretName, err)
		}
		if s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer {
			t.Errorf("pull Secret labels %v", s.Labels)
		}

		// Who fetched what: the webhook probed the manifest with the credential, containerd
		// (the kubelet's pull) fetched the manifest and the blobs with it.
		c := p.tally(mark)
		probed, manifests, blobs := c.probed, c.manifests, c.blobs
		if probed == 0 {
			t.Error("the webhook made no authenticated manifest request: it did not probe the entry with the provider's credential")
		}
		if manifests == 0 || blobs == 0 {
			t.Errorf("containerd fetched %d manifests and %d blobs with the provider's credential, want some of each", manifests, blobs)
		}
		t.Logf("routed pod Running %.2fs after its creation; with the provider's credential: %d webhook probes, %d manifest and %d blob requests by containerd", took.Seconds(), probed, manifests, blobs)
	})

	t.Run("without kuik's pull Secret the registry refuses the pull", func(t *testing.T) {
		mark := p.mark()
		pd := pod("anonymous", image)
		pd.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		got, err := w.cs.CoreV1().Pods(outside).Create(t.Context(), pd, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rewritten(got) || len(got.Spec.ImagePullSecrets) != 0 {
			t.Fatalf("pod outside the selector was changed: %s", podSummary(got))
		}
		msg := w.waitPullRefused(t, outside, "anonymous")
		if !strings.Contains(msg, "401 Unauthorized") && !strings.Contains(msg, "no basic auth credentials") {
			t.Errorf("the pull failed without the registry's 401:\n%s", msg)
		}
		var refused int
		for _, r := range p.requests(mark) {
			if strings.HasPrefix(r.UserAgent, "containerd/") {
				if r.Authenticated {
					t.Errorf("containerd sent a credential for the pod without pull Secrets: %s %s", r.Method, r.Path)
				}
				refused++
			}
		}
		if refused == 0 {
			t.Error("the registry received nothing from containerd: the pull failed before reaching it")
		}
		t.Logf("image pulled without kuik's Secret: %s", firstLine(msg))
	})
}

// keys are the auths keys of a pull Secret, sorted.
func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
