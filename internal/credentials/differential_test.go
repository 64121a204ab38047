package credentials

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	k8schain "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
)

// The differential tests compare Lookup with go-containerregistry's pkg/authn/kubernetes
// keychain, a port of the kubelet's keyring. Two known differences keep some inputs out:
//
//   - the keychain names Docker Hub index.docker.io and has no fallback, where the kubelet
//     names it docker.io and falls back to an index.docker.io key: Docker Hub images are
//     compared in TestLookup only;
//   - the keychain returns the first matching entry even when it is empty, and fails on an
//     undecodable one, where Lookup skips both: only decodable, non-empty entries are used.
//
// Keys that read the same (quay.io, https://quay.io) are also kept out: both implementations
// then depend on Go map order.

// keychainChoice is the credential the keychain resolves for image from secret; the zero
// AuthEntry means anonymous.
func keychainChoice(t *testing.T, s *corev1.Secret, image string) AuthEntry {
	t.Helper()
	kc, err := k8schain.NewFromPullSecrets(t.Context(), []corev1.Secret{*s})
	if err != nil {
		t.Fatalf("NewFromPullSecrets: %v", err)
	}
	repo, err := name.NewRepository(image)
	if err != nil {
		t.Fatalf("NewRepository(%q): %v", image, err)
	}
	a, err := kc.Resolve(repo)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", image, err)
	}
	if a == authn.Anonymous {
		return AuthEntry{}
	}
	cfg, err := a.Authorization()
	if err != nil {
		t.Fatalf("Authorization: %v", err)
	}
	return AuthEntry{Username: cfg.Username, Password: cfg.Password}
}

// lookupChoice is the credential Lookup picks for image from secret; the zero AuthEntry means
// none.
func lookupChoice(t *testing.T, s *corev1.Secret, image string) AuthEntry {
	t.Helper()
	c, err := ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	e, _, err := c.Lookup(image)
	if errors.Is(err, ErrNoCredentialForPath) {
		return AuthEntry{}
	}
	if err != nil {
		t.Fatalf("Lookup(%q): %v", image, err)
	}
	return e
}

func TestLookupAgainstKeychain(t *testing.T) {
	jsonSecret := func(auths map[string]string) *corev1.Secret {
		return &corev1.Secret{
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(t, auths)},
		}
	}
	tests := map[string]struct {
		secret *corev1.Secret
		image  string
	}{
		"host key": {
			secret: jsonSecret(map[string]string{"quay.io": cred("a")}),
			image:  "quay.io/acme/foo",
		},
		"most specific of three": {
			secret: jsonSecret(map[string]string{"quay.io": cred("a"), "quay.io/acme": cred("b"), "quay.io/acme/foo": cred("c")}),
			image:  "quay.io/acme/foo",
		},
		"string prefix across segments": {
			secret: jsonSecret(map[string]string{"quay.io/acme": cred("a"), "quay.io": cred("b")}),
			image:  "quay.io/acme-tools/x",
		},
		"slash-ended key does not cover a sibling": {
			secret: jsonSecret(map[string]string{"quay.io/acme/": cred("a"), "quay.io": cred("b")}),
			image:  "quay.io/acme-tools/x",
		},
		"label glob": {
			secret: jsonSecret(map[string]string{"*.example.com": cred("a")}),
			image:  "eu.example.com/x",
		},
		"label glob against the apex": {
			secret: jsonSecret(map[string]string{"*.example.com": cred("a")}),
			image:  "example.com/x",
		},
		"exact host before glob host": {
			secret: jsonSecret(map[string]string{"*.example.com": cred("a"), "eu.example.com": cred("b")}),
			image:  "eu.example.com/x",
		},
		"ports": {
			secret: jsonSecret(map[string]string{"registry.local": cred("a"), "registry.local:5000": cred("b")}),
			image:  "registry.local:5000/x",
		},
		"missing port": {
			secret: jsonSecret(map[string]string{"registry.local:5000": cred("a")}),
			image:  "registry.local/x",
		},
		"schemes and /v2/": {
			secret: jsonSecret(map[string]string{"https://quay.io/v2/acme": cred("a"), "http://quay.io/v1/": cred("b")}),
			image:  "quay.io/acme/foo",
		},
		"trailing /v2/ kept": {
			secret: jsonSecret(map[string]string{"quay.io/acme/v2/": cred("a"), "quay.io/v1/": cred("b")}),
			image:  "quay.io/acme/foo",
		},
		"auth over username": {
			secret: jsonSecret(map[string]string{"quay.io": `{"username":"u","password":"p","auth":"` + b64("a:b") + `"}`}),
			image:  "quay.io/x",
		},
		"legacy dockercfg": {
			secret: &corev1.Secret{
				Type: corev1.SecretTypeDockercfg,
				Data: map[string][]byte{corev1.DockerConfigKey: []byte(`{"quay.io/acme":` + cred("a") + `,"quay.io":` + cred("b") + `}`)},
			},
			image: "quay.io/acme/foo",
		},
		"no match": {
			secret: jsonSecret(map[string]string{"quay.io": cred("a")}),
			image:  "ghcr.io/acme/foo",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			want := keychainChoice(t, tc.secret, tc.image)
			if diff := cmp.Diff(want, lookupChoice(t, tc.secret, tc.image)); diff != "" {
				t.Errorf("Lookup(%q) differs from the keychain (-keychain +lookup):\n%s", tc.image, diff)
			}
		})
	}
}

// TestLookupAgainstKeychainGenerated compares both on generated secrets and images, from a
// fixed seed.
func TestLookupAgainstKeychainGenerated(t *testing.T) {
	schemes := []string{"", "https://", "http://"}
	keyHosts := []string{
		"quay.io", "*.quay.io", "a.quay.io", "*.*.quay.io", "q*.io", "qua?.io",
		"registry.local", "registry.local:5000", "*.local:5000", "localhost:5000",
	}
	keyPaths := []string{
		"", "", "", "/", "/v1/", "/v2/", "/v1", "/acme", "/acme", "/acme/", "/acme-tools", "/acme/foo",
		"/v2/acme", "/v2/acme/", "/acme/v2/", "/other",
	}
	imageHosts := []string{"quay.io", "a.quay.io", "a.b.quay.io", "registry.local", "registry.local:5000", "localhost:5000"}
	imageRepos := []string{"acme/foo", "acme-tools/x", "acme", "other/x", "v2/acme", "acme/foo/bar", "v1/x"}

	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	compared, matched := 0, 0
	for range 3000 {
		auths := map[string]string{}
		seen := map[string]bool{}
		for i := range 1 + rng.IntN(5) {
			key := pick(schemes) + pick(keyHosts) + pick(keyPaths)
			kk, _ := kubeletKey(key)
			if seen[kk] {
				continue
			}
			seen[kk] = true
			auths[key] = cred(fmt.Sprintf("u%d", i))
		}
		image := pick(imageHosts) + "/" + pick(imageRepos)
		s := &corev1.Secret{
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(t, auths)},
		}
		want := keychainChoice(t, s, image)
		got := lookupChoice(t, s, image)
		compared++
		if want != (AuthEntry{}) {
			matched++
		}
		if diff := cmp.Diff(want, got); diff != "" {
			keys := make([]string, 0, len(auths))
			for k := range auths {
				keys = append(keys, k)
			}
			t.Errorf("keys %s, image %q: Lookup differs from the keychain (-keychain +lookup):\n%s", strings.Join(keys, " "), image, diff)
		}
	}
	// Guard against a generator that never matches anything.
	if matched < compared/5 {
		t.Errorf("only %d of %d generated cases matched a key", matched, compared)
	}
	t.Logf("compared %d cases, %d with a credential", compared, matched)
}
