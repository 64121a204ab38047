package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	ggcrname "github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// providerEnv is one fake credential provider, built and configured as the kubelet would be
// given it, and a registry that accepts only the unexpired credentials it mints.
type providerEnv struct {
	name     string
	key      []byte
	binDir   string
	stateDir string
	config   string
	registry *testutil.Registry
}

// newProviderEnv builds the fake plugin as binDir/<provider>, writes a CredentialProviderConfig
// matching the registry's host (plus extra providers, as YAML list items), and starts the
// registry.
func newProviderEnv(t *testing.T, provider, ttl string, extra string) *providerEnv {
	t.Helper()
	p := &providerEnv{name: provider, key: []byte("kuik-test-key-" + provider), binDir: t.TempDir(), stateDir: t.TempDir()}
	fakeprovider.Build(t, p.binDir, provider)
	p.registry = testutil.NewRegistryFunc(t, "127.0.0.1:0", func(user, pass string) bool {
		return user == fakeprovider.Username && fakeprovider.Verify(p.key, pass, time.Now())
	})
	// The test pushes with a credential of its own minting.
	p.registry.Username, p.registry.Password = fakeprovider.Username, fakeprovider.Mint(p.key, time.Now().Add(time.Hour))
	p.config = filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: %s
  matchImages: [%q]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:
  - {name: FAKE_PROVIDER_KEY, value: %q}
  - {name: FAKE_PROVIDER_TTL, value: %q}
  - {name: FAKE_PROVIDER_STATE_DIR, value: %q}
%s`, provider, p.registry.Host, string(p.key), ttl, p.stateDir, extra)
	if err := os.WriteFile(p.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// plugins loads the configuration exactly as the syncer's flags do.
func (p *providerEnv) plugins(t *testing.T, timeout time.Duration) *credentialprovider.Plugins {
	t.Helper()
	cfg, err := credentialprovider.LoadConfig(p.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckBinDir(p.binDir); err != nil {
		t.Fatal(err)
	}
	return credentialprovider.NewPlugins(cfg, p.binDir, credentialprovider.Options{Timeout: timeout, Observe: metrics.ObservePluginRun})
}

func (p *providerEnv) requests(t *testing.T) int {
	t.Helper()
	reqs, err := fakeprovider.Requests(p.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return len(reqs)
}

// providerOptions is the syncer's configuration with the provider's plugins and short
// lifetimes: renewals no sooner than 1s apart, retries every 300ms.
func providerOptions(t *testing.T, p *providerEnv, timeout time.Duration) *syncer.Options {
	opts := syncerConfig()
	opts.Plugins = p.plugins(t, timeout)
	opts.ProviderRenewFloor = time.Second
	opts.ProviderRetry = 300 * time.Millisecond
	return opts
}

// providerAlternative is an Always ImageAlternative injecting the provider's credential for
// <registry>/acme/<n> into the namespaces labelled scope=n.
func providerAlternative(p *providerEnv, n string) v1alpha1.ImageAlternative {
	return testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository(p.registry.Host + "/acme/" + n).Provider(p.name).Inject(true).Build()
}

// pulls reports whether a pull Secret, read with the kubelet's rules for the image, lets a
// client pull its manifest from the registry.
func pulls(t *testing.T, s *corev1.Secret, image string) error {
	t.Helper()
	cfg, err := credentials.ParseSecret(s)
	if err != nil {
		return err
	}
	ref, err := ggcrname.ParseReference(image, ggcrname.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := cfg.Lookup(ref.Context().Name())
	if err != nil {
		return err
	}
	_, err = remote.Head(ref, remote.WithAuth(&authn.Basic{Username: a.Username, Password: a.Password}))
	return err
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A provider entry's credential reaches the pull Secret, a client using the Secret by the
// kubelet's rules pulls with it, and it is renewed before it expires: sampled all along, the
// Secret never holds an expired credential, and each renewal writes the provider Secret once.
func TestProviderCredentialIsInjectedAndRenewedWithoutAGap(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-renew", "6s", "")
	image := p.registry.Push(t, "acme/"+n+":v1")
	writesBefore := counter(t, metrics.ProviderSecretWrites.WithLabelValues(metrics.ResultSuccess))
	renewalsBefore := counter(t, metrics.ProviderRenewals.WithLabelValues(p.name, metrics.ResultSuccess))
	startSyncer(t, providerOptions(t, p, 10*time.Second))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	create(t, e, &ia)

	secret := "kuik-inject-imagealternative-" + n
	var first string
	eventually(t, "the pull secret holds a credential the registry accepts", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := pulls(t, s, image); err != nil {
			return err
		}
		first = authsOf(t, s)[p.registry.Host+"/acme/"+n]
		return nil
	})

	// The provider Secret holds it under the registry (the plugin answers cacheKeyType
	// Registry), where the webhook's probe finds it for the entry's path by the keyring rules.
	ps, err := e.cs.CoreV1().Secrets(crns).Get(t.Context(), credentialprovider.SecretName(p.name, nil), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("provider secret: %v", err)
	}
	if got := authsOf(t, ps)[p.registry.Host]; got != first {
		t.Errorf("the provider secret holds %q for the registry, the pull secret %q", got, first)
	}

	// Three lifetimes: every sample of the pull Secret pulls.
	seen := map[string]bool{first: true}
	deadline := time.Now().Add(18 * time.Second)
	for time.Now().Before(deadline) {
		s, err := e.cs.CoreV1().Secrets(ns).Get(t.Context(), secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := pulls(t, s, image); err != nil {
			t.Fatalf("at %s the pull secret no longer pulls: %v", time.Now().Format(time.RFC3339Nano), err)
		}
		seen[authsOf(t, s)[p.registry.Host+"/acme/"+n]] = true
		time.Sleep(200 * time.Millisecond)
	}
	renewals := counter(t, metrics.ProviderRenewals.WithLabelValues(p.name, metrics.ResultSuccess)) - renewalsBefore
	writes := counter(t, metrics.ProviderSecretWrites.WithLabelValues(metrics.ResultSuccess)) - writesBefore
	if len(seen) < 3 || renewals < 2 {
		t.Fatalf("over three lifetimes the pull secret held %d credentials after %v renewals, want at least 3 and 2", len(seen), renewals)
	}
	// One write for the first credential, one per renewal (other tests' writes may add to the
	// process-wide counter, never remove).
	if writes < renewals+1 {
		t.Errorf("%v provider secret writes for %v renewals", writes, renewals)
	}
	t.Logf("renewals %v, provider secret writes %v, plugin runs %d, credentials seen in the pull secret %d", renewals, writes, p.requests(t), len(seen))
}

// When the plugin fails, the last good credential stays in the pull Secret until it expires,
// with a Warning event and the condition reason ProviderRenewalFailed; after it expires the
// entry is left out (never an empty or expired credential) while the resource's other entry is
// still written; when the plugin recovers, the credential comes back.
func TestProviderFailureKeepsTheLastGoodCredentialUntilItExpires(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-fail", "8s", "")
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "u:p"}))
	startSyncer(t, providerOptions(t, p, 10*time.Second))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository(p.registry.Host + "/acme/" + n).Provider(p.name).Inject(true).
		Repository("quay.io/acme/" + n).SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	key := p.registry.Host + "/acme/" + n
	secret := "kuik-inject-imagealternative-" + n

	var good string
	eventually(t, "both entries are written", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := authsOf(t, s)
		if a[key] == "" || a["quay.io/acme/"+n] != "u:p" {
			return fmt.Errorf("holds %v", a)
		}
		good = a[key]
		return nil
	})
	fakeprovider.SetMode(t, p.stateDir, "fail")

	eventually(t, "a renewal failure is reported while the credential stays", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		c := readyCondition(got.Status.Conditions)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonProviderRenewalFailed {
			return fmt.Errorf("condition %+v", c)
		}
		evs := injectionEvents(ctx, t, e.cs, got.UID)
		if !hasEvent(evs, v1alpha1.ReasonProviderRenewalFailed) {
			return fmt.Errorf("no ProviderRenewalFailed event among %d", len(evs))
		}
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); a[key] != good {
			return fmt.Errorf("the pull secret holds %q, want the last good credential", a[key])
		}
		return nil
	})

	eventually(t, "the expired credential is left out, the other entry stays", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := authsOf(t, s)
		if _, still := a[key]; still {
			return fmt.Errorf("holds %v", a)
		}
		if a["quay.io/acme/"+n] != "u:p" {
			return fmt.Errorf("the secretRef entry is gone: %v", a)
		}
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		if c := readyCondition(got.Status.Conditions); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProviderFailed {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})

	fakeprovider.SetMode(t, p.stateDir, "ok")
	eventually(t, "the credential comes back when the plugin recovers", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); a[key] == "" || a[key] == good {
			return fmt.Errorf("holds %v", a)
		}
		return nil
	})
}

// A plugin that hangs is killed at the timeout; its entry is left out with a reason naming
// the timeout, and nothing else waits for it.
func TestProviderTimeoutLeavesOnlyItsEntryOut(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-hang", "1h", "")
	fakeprovider.SetMode(t, p.stateDir, "hang")
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "u:p"}))
	startSyncer(t, providerOptions(t, p, time.Second))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository(p.registry.Host + "/acme/" + n).Provider(p.name).Inject(true).
		Repository("quay.io/acme/" + n).SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{"quay.io/acme/" + n: "u:p"})
	eventually(t, "the hanging provider's entry is left out for its timeout", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		c := readyCondition(got.Status.Conditions)
		if c == nil || c.Reason != v1alpha1.ReasonProviderFailed || !strings.Contains(c.Message, "deadline") && !strings.Contains(c.Message, "timed out") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// A provider whose matchImages do not match the entry is never run; the entry is left out with
// ProviderNotMatched, and one naming a provider the configuration lacks with
// ProviderNotConfigured.
func TestProviderThatDoesNotMatchIsNeverRun(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-nomatch", "1h", "")
	startSyncer(t, providerOptions(t, p, 10*time.Second))
	createNamespace(t, e, map[string]string{"scope": n})
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/" + n).Provider(p.name).Inject(true).
		Repository(p.registry.Host + "/acme/" + n).Provider("not-configured").Inject(true).Build()
	create(t, e, &ia)
	eventually(t, "both entries are left out with their reasons", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		c := readyCondition(got.Status.Conditions)
		if c == nil || c.Reason != v1alpha1.ReasonProviderNotMatched || !strings.Contains(c.Message, v1alpha1.ReasonProviderNotConfigured) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	if got := p.requests(t); got != 0 {
		t.Errorf("the provider ran %d times for an image its matchImages do not match", got)
	}
}

// A restart reuses the unexpired credential of the kuik-provider-* Secret instead of running
// the plugin again; a record that was tampered with... cannot be: the admission policy keeps
// everyone but the syncer from changing its data (policies/).
func TestRestartReusesUnexpiredProviderSecrets(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-restart", "1h", "")
	stop := startSyncer(t, providerOptions(t, p, 10*time.Second))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	create(t, e, &ia)
	secret := "kuik-inject-imagealternative-" + n
	var first string
	eventually(t, "the pull secret holds the credential", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		first = authsOf(t, s)[p.registry.Host+"/acme/"+n]
		if first == "" {
			return fmt.Errorf("holds %v", authsOf(t, s))
		}
		return nil
	})
	runs := p.requests(t)
	// A provider Secret deleted while the syncer runs is written again at once, from memory.
	ps := credentialprovider.SecretName(p.name, nil)
	if err := e.cs.CoreV1().Secrets(crns).Delete(t.Context(), ps, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, crns, ps, map[string]string{p.registry.Host: first})
	stop()

	startSyncer(t, providerOptions(t, p, 10*time.Second))
	// A Secret deleted while no syncer ran is written again, from the reused credential.
	if err := e.cs.CoreV1().Secrets(ns).Delete(t.Context(), secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	secretHolds(t, e, ns, secret, map[string]string{p.registry.Host + "/acme/" + n: first})
	if got := p.requests(t); got != runs {
		t.Errorf("the plugin ran %d more times after the restart, want the unexpired credential reused", got-runs)
	}
}

// A provider that takes a service-account token gets one for the entry's serviceAccountRef,
// with the configured audience, and the ServiceAccount's annotations it asks for; the syncer
// needs the opt-in rights the chart grants with credentialProviders.serviceAccountTokens.
func TestServiceAccountTokenIsPassedWithItsAudience(t *testing.T) {
	e := harness(t)
	n := name(t)
	grantTokenRights(t, e)
	p := newProviderEnv(t, "fake-token", "1h", `  tokenAttributes:
    serviceAccountTokenAudience: kuik-test-audience
    cacheType: ServiceAccount
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: [example.com/role]
`)
	saNS := createNamespace(t, e, nil)
	if _, err := e.cs.CoreV1().ServiceAccounts(saNS).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: "puller", Annotations: map[string]string{"example.com/role": "arn:aws:iam::1:role/puller", "other": "x"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startSyncer(t, providerOptions(t, p, 10*time.Second))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	ia.Spec.Alternatives[0].Auth.Provider.ServiceAccountRef = &v1alpha1.ServiceAccountReference{Namespace: saNS, Name: "puller"}
	// An entry of the same provider without serviceAccountRef is left out with a reason.
	ia.Spec.Alternatives = append(ia.Spec.Alternatives, v1alpha1.Alternative{Repository: p.registry.Host + "/other/" + n,
		Auth: &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: p.name}, InjectPullSecret: ptr.To(true)}})
	create(t, e, &ia)
	image := p.registry.Push(t, "acme/"+n+":v1")
	eventually(t, "the token-based credential is injected, the entry without an account left out", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, "kuik-inject-imagealternative-"+n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := pulls(t, s, image); err != nil {
			return err
		}
		if a := authsOf(t, s); len(a) != 1 {
			return fmt.Errorf("holds %v", a)
		}
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		if c := readyCondition(got.Status.Conditions); c == nil || c.Reason != v1alpha1.ReasonServiceAccountRequired || !strings.Contains(c.Message, "spec.alternatives[1]") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	reqs, err := fakeprovider.Requests(p.stateDir)
	if err != nil || len(reqs) == 0 {
		t.Fatalf("requests %v, %v", reqs, err)
	}
	for _, r := range reqs {
		if r.Token == "" {
			t.Fatalf("the plugin got no token: %+v", r)
		}
		if aud := r.Audiences; len(aud) != 1 || aud[0] != "kuik-test-audience" {
			t.Errorf("token audience %v, want [kuik-test-audience]", aud)
		}
		if want := map[string]string{"example.com/role": "arn:aws:iam::1:role/puller"}; !equalMaps(r.Annotations, want) {
			t.Errorf("annotations %v, want only the required one %v", r.Annotations, want)
		}
	}
}

// grantTokenRights applies the syncer's RBAC as the chart renders it with
// credentialProviders.serviceAccountTokens.enabled, for the duration of the test.
func grantTokenRights(t *testing.T, e env) {
	t.Helper()
	c, err := kuikenv.RenderValues(crns, map[string]any{
		"credentialProviders": map[string]any{"serviceAccountTokens": map[string]any{"enabled": true}},
		"syncer":              chartValues["syncer"],
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := c.Identity("secret-syncer")
	if err := testenv.Apply(t.Context(), cp.Config(), objs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		base, err := kuikenv.RenderValues(crns, chartValues)
		if err != nil {
			t.Error(err)
			return
		}
		if err := testenv.Apply(context.Background(), cp.Config(), base.Identity("secret-syncer")); err != nil {
			t.Error(err)
		}
		_ = e
	})
}

func readyCondition(cs []metav1.Condition) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == v1alpha1.ConditionReady {
			return &cs[i]
		}
	}
	return nil
}

func hasEvent(evs []corev1.Event, reason string) bool {
	for _, ev := range evs {
		if strings.Contains(ev.Message, reason) {
			return true
		}
	}
	return false
}
