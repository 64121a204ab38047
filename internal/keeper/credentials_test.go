package keeper

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func dockerConfigSecret(t *testing.T, ns, name string, auths map[string]credentials.AuthEntry) *corev1.Secret {
	t.Helper()
	data, err := credentials.Encode(auths)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
}

func keepMirrorPushing(secret string) *v1alpha1.ImageMirror {
	return &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Spec: v1alpha1.ImageMirrorSpec{
			Destination: v1alpha1.MirrorDestination{Path: "mirror.example/kept/"},
			Keep:        &v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: secret}}}},
		},
	}
}

// authUsername is the authenticator's username; "" for anonymous.
func authUsername(t *testing.T, a authn.Authenticator) string {
	t.Helper()
	cfg, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Username
}

func TestCredentialsFromTheReleaseNamespacesSecrets(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	other := k.namespace(t, nil)
	c, _ := k.startCache(t, release)
	secrets := []*corev1.Secret{
		// The credential for the destination path (with its slash) and one for another path.
		dockerConfigSecret(t, release, "push", map[string]credentials.AuthEntry{
			"mirror.example/kept/":      {Username: "pusher", Password: "p"},
			"quay.io/acme/private":      {Username: "reader", Password: "r"},
			"mirror.example/elsewhere/": {Username: "wrong", Password: "w"},
		}),
		dockerConfigSecret(t, release, "unrelated", map[string]credentials.AuthEntry{"other.example": {Username: "u", Password: "p"}}),
		dockerConfigSecret(t, release, "sibling", map[string]credentials.AuthEntry{"mirror.example/kept-not/": {Username: "u", Password: "p"}}),
		{ObjectMeta: metav1.ObjectMeta{Name: "opaque", Namespace: release}, StringData: map[string]string{"k": "v"}},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: release}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths": "none"}`)},
		},
		// Of another namespace: never read.
		dockerConfigSecret(t, other, "elsewhere", map[string]credentials.AuthEntry{"mirror.example/kept/": {Username: "foreign", Password: "f"}}),
	}
	for _, s := range secrets {
		if err := k.cl.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	eventuallyOK(t, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: release, Name: "broken"}, &corev1.Secret{})
	})
	creds := &secretCredentials{reader: c, namespace: release, now: time.Now}

	a, err := creds.Push(ctx, keepMirrorPushing("push"))
	if err != nil {
		t.Fatal(err)
	}
	if got := authUsername(t, a); got != "pusher" {
		t.Errorf("push credential of user %q, want pusher", got)
	}
	anonymous := keepMirrorPushing("")
	anonymous.Spec.Keep.Push = nil
	if a, err := creds.Push(ctx, anonymous); err != nil || a != authn.Anonymous {
		t.Errorf("a mirror without push.auth: %v, %v; want anonymous", a, err)
	}

	failures := map[string]struct {
		secret string
		reason string
	}{
		"a missing Secret":                              {"missing", v1alpha1.ReasonSecretNotFound},
		"a Secret of another namespace is not found":    {"elsewhere", v1alpha1.ReasonSecretNotFound},
		"a Secret that is no docker config":             {"opaque", v1alpha1.ReasonNotDockerConfig},
		"a docker config that does not parse":           {"broken", v1alpha1.ReasonInvalidDockerConfig},
		"a docker config with no key for the mirror":    {"unrelated", v1alpha1.ReasonNoCredentialForPath},
		"a key for a sibling path of the same registry": {"sibling", v1alpha1.ReasonNoCredentialForPath},
	}
	for name, tc := range failures {
		t.Run("push: "+name, func(t *testing.T) {
			_, err := creds.Push(ctx, keepMirrorPushing(tc.secret))
			var ce *CredentialError
			if !errors.As(err, &ce) || ce.Reason() != tc.reason {
				t.Errorf("error %v, want one with reason %s", err, tc.reason)
			}
		})
	}

	ref := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "push"}}
	if a, err := creds.Source(ctx, nil, "nginx:1.27"); err != nil || a != authn.Anonymous {
		t.Errorf("no auth: %v, %v; want anonymous", a, err)
	}
	a, err = creds.Source(ctx, ref, "quay.io/acme/private:v1@sha256:0000000000000000000000000000000000000000000000000000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	if got := authUsername(t, a); got != "reader" {
		t.Errorf("source credential of user %q, want reader", got)
	}
	for name, tc := range map[string]struct {
		auth   *v1alpha1.Auth
		image  string
		reason string
	}{
		"no key for the image":          {ref, "quay.io/acme/public:v1", v1alpha1.ReasonNoCredentialForPath},
		"a missing Secret":              {&v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "missing"}}, "nginx", v1alpha1.ReasonSecretNotFound},
		"a provider without its Secret": {&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}}, "nginx", string(v1alpha1.KeepAuthRequired)},
	} {
		t.Run("source: "+name, func(t *testing.T) {
			_, err := creds.Source(ctx, tc.auth, tc.image)
			var ce *CredentialError
			if !errors.As(err, &ce) || ce.Reason() != tc.reason {
				t.Errorf("error %v, want one with reason %s", err, tc.reason)
			}
		})
	}
}

// providerSecret is the kuik-provider-* Secret of provider (and sa) in ns, as the secret-syncer
// writes it: creds by auths key.
func providerSecret(t *testing.T, ns, provider string, sa *v1alpha1.ServiceAccountReference, creds map[string]*credentialprovider.Obtained) *corev1.Secret {
	t.Helper()
	s, err := credentialprovider.Secret(ns, credentialprovider.SecretName(provider, sa), creds)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A provider entry's source credential is the one the secret-syncer obtained and keeps in the
// kuik-provider-* Secret of the release namespace; without one, AuthRequired, never anonymous.
func TestSourceCredentialOfAProviderIsWhatTheSyncerObtained(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	other := k.namespace(t, nil)
	c, _ := k.startCache(t, release)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	obtained := func(provider, sa, user string, life time.Duration) *credentialprovider.Obtained {
		return &credentialprovider.Obtained{
			Auth:     credentials.AuthEntry{Username: user, Password: "p"},
			Provider: provider, ServiceAccount: sa, Image: "src.example/team",
			CacheKeyType: "Registry", Scope: "src.example",
			ObtainedAt: t0, RenewAt: t0.Add(life * 2 / 3), ExpiresAt: t0.Add(life),
		}
	}
	puller := &v1alpha1.ServiceAccountReference{Namespace: "apps", Name: "puller"}
	secrets := []*corev1.Secret{
		providerSecret(t, release, "ecr", nil, map[string]*credentialprovider.Obtained{
			"src.example":              obtained("ecr", "", "registry", time.Hour),
			"src.example/team/expired": obtained("ecr", "", "expired", time.Minute),
		}),
		providerSecret(t, release, "ecr", puller, map[string]*credentialprovider.Obtained{
			"src.example": obtained("ecr", "apps/puller", "for-puller", time.Hour),
		}),
		// Of another namespace: never read.
		providerSecret(t, other, "acr", nil, map[string]*credentialprovider.Obtained{
			"src.example": obtained("acr", "", "foreign", time.Hour),
		}),
	}
	for _, s := range secrets {
		if err := k.cl.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	eventuallyOK(t, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: release, Name: secrets[1].Name}, &corev1.Secret{})
	})
	creds := &secretCredentials{reader: c, namespace: release, now: func() time.Time { return t0.Add(30 * time.Minute) }}
	ecr := &v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr"}}

	for name, tc := range map[string]struct {
		auth  *v1alpha1.Auth
		image string
		user  string
	}{
		"the registry's answer for one of its images": {ecr, "src.example/team/app:1", "registry"},
		"an injecting entry reads the same Secret":    {&v1alpha1.Auth{Provider: ecr.Provider, InjectPullSecret: ptr.To(true)}, "src.example/app@sha256:0000000000000000000000000000000000000000000000000000000000000001", "registry"},
		"the ServiceAccount's own Secret":             {&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: puller}}, "src.example/team/app:1", "for-puller"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := creds.Source(ctx, tc.auth, tc.image)
			if err != nil {
				t.Fatal(err)
			}
			if got := authUsername(t, a); got != tc.user {
				t.Errorf("source credential of user %q, want %s", got, tc.user)
			}
		})
	}
	// The expired one was the answer while it lasted.
	before := &secretCredentials{reader: c, namespace: release, now: func() time.Time { return t0 }}
	if a, err := before.Source(ctx, ecr, "src.example/team/expired/app:1"); err != nil || authUsername(t, a) != "expired" {
		t.Errorf("before its expiry: %v, %v; want the expired credential", a, err)
	}
	for name, tc := range map[string]struct {
		auth  *v1alpha1.Auth
		image string
	}{
		"an expired credential":                     {ecr, "src.example/team/expired/app:1"},
		"no entry for the image":                    {ecr, "quay.io/acme/app:1"},
		"no Secret for the provider":                {&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "gcr"}}, "src.example/team/app:1"},
		"no Secret for the ServiceAccount":          {&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "ecr", ServiceAccountRef: &v1alpha1.ServiceAccountReference{Namespace: "apps", Name: "other"}}}, "src.example/team/app:1"},
		"a Secret of another namespace is not read": {&v1alpha1.Auth{Provider: &v1alpha1.ProviderAuth{Name: "acr"}}, "src.example/team/app:1"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := creds.Source(ctx, tc.auth, tc.image)
			var ce *CredentialError
			if !errors.As(err, &ce) || ce.Reason() != string(v1alpha1.KeepAuthRequired) {
				t.Fatalf("credential %v, error %v; want one with reason AuthRequired", a, err)
			}
			if msg := err.Error(); !strings.Contains(msg, `"`+tc.auth.Provider.Name+`"`) || !strings.Contains(msg, "has not (yet) obtained a credential") {
				t.Errorf("message %q does not name the provider or say the syncer has no credential", msg)
			}
		})
	}
}
