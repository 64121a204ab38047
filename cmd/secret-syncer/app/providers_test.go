package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakeprovider.CleanupBuild()
	os.Exit(code)
}

// providerFiles builds the fake plugin as binDir/fake-ecr and writes a configuration for it
// (matching registry.example.com) with extra YAML appended to its provider.
func providerFiles(t *testing.T, extra string) (config, binDir string, key []byte) {
	t.Helper()
	binDir = t.TempDir()
	fakeprovider.Build(t, binDir, "fake-ecr")
	key = []byte("render-key")
	config = filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: fake-ecr
  matchImages: ["registry.example.com"]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:
  - {name: FAKE_PROVIDER_KEY, value: %q}
%s`, key, extra)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return config, binDir, key
}

// The syncer refuses to start on a configuration the kubelet would refuse, or a binary missing
// from the bin dir, with a message naming the provider and field; the flags go together.
func TestInvalidProviderConfigurationDoesNotRun(t *testing.T) {
	good, binDir, _ := providerFiles(t, "")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: fake-ecr\n  matchImages: [registry.example.com]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"config without bin dir":     {[]string{"--image-credential-provider-config=" + good}, "go together"},
		"bin dir without config":     {[]string{"--image-credential-provider-bin-dir=" + binDir}, "go together"},
		"defaultCacheDuration unset": {[]string{"--image-credential-provider-config=" + bad, "--image-credential-provider-bin-dir=" + binDir}, `providers[0] "fake-ecr": defaultCacheDuration: Required value`},
		"binary missing":             {[]string{"--image-credential-provider-config=" + good, "--image-credential-provider-bin-dir=" + t.TempDir()}, "fake-ecr"},
	} {
		t.Run(name, func(t *testing.T) {
			_, called, err := execute(t, tc.args...)
			if err == nil || called || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("called %v, err %v; want an error containing %q and no run", called, err, tc.want)
			}
		})
	}
	got, called, err := execute(t, "--image-credential-provider-config="+good, "--image-credential-provider-bin-dir="+binDir)
	if err != nil || !called || got.Plugins == nil || got.Plugins.Config().Provider("fake-ecr") == nil {
		t.Fatalf("a valid configuration: called %v, err %v, plugins %v", called, err, got.Plugins)
	}
}

// render with the provider flags runs the plugin once per provider entry, prints the
// kuik-provider-* Secret and the pull Secret holding the plugin's credential, and lists on stderr
// every entry left out with its reason.
func TestRenderWithProviders(t *testing.T) {
	config, binDir, key := providerFiles(t, "")
	dir := t.TempDir()
	resources := filepath.Join(dir, "resources.yaml")
	if err := os.WriteFile(resources, []byte(`apiVersion: kuik.enix.io/v1alpha1
kind: ImageAlternative
metadata: {name: ecr, uid: 11111111-1111-1111-1111-111111111111}
spec:
  rewritePolicy: Always
  alternatives:
  - repository: registry.example.com/acme/foo
    auth: {provider: {name: fake-ecr}, injectPullSecret: true}
  - repository: quay.io/acme/foo
    auth: {provider: {name: fake-ecr}, injectPullSecret: true}
  - repository: gcr.io/acme/foo
    auth: {provider: {name: fake-gcr}, injectPullSecret: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(dir, "secrets.yaml")
	namespaces := filepath.Join(dir, "namespaces.yaml")
	if err := os.WriteFile(secrets, []byte("apiVersion: v1\nkind: List\nitems: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(namespaces, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(nil)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"render", "--resources", resources, "--secrets", secrets, "--namespaces", namespaces,
		"--cluster-resource-namespace", "kuik-system",
		"--image-credential-provider-config", config, "--image-credential-provider-bin-dir", binDir})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	scheme, err := syncer.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	byName := map[string]*corev1.Secret{}
	reader := utilyaml.NewYAMLReader(bufioReader(stdout.String()))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if strings.TrimSpace(string(doc)) == "" || strings.TrimSpace(string(doc)) == "---" {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		s := obj.(*corev1.Secret)
		byName[s.Namespace+"/"+s.Name] = s
	}
	pull := byName["team-a/kuik-inject-imagealternative-ecr"]
	if pull == nil || len(byName) != 2 {
		t.Fatalf("rendered %v, want the provider secret and team-a's pull secret", keys(byName))
	}
	cfg, err := credentials.ParseSecret(pull)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := cfg.Lookup("registry.example.com/acme/foo")
	if err != nil || a.Username != fakeprovider.Username || !fakeprovider.Verify(key, a.Password, time.Now()) {
		t.Errorf("the pull secret's credential %+v (%v) is not the plugin's", a, err)
	}
	if len(cfg.Entries()) != 1 {
		t.Errorf("the pull secret holds %v, want only the matching entry", cfg.Entries())
	}
	var provider *corev1.Secret
	for k, s := range byName {
		if strings.HasPrefix(k, "kuik-system/kuik-provider-fake-ecr-") {
			provider = s
		}
	}
	if provider == nil || provider.Data[credentialprovider.CredentialsKey] == nil {
		t.Errorf("no kuik-provider-fake-ecr-* secret with its record among %v", keys(byName))
	}
	for _, want := range []string{
		"spec.alternatives[1] (quay.io/acme/foo) left out: ProviderNotMatched",
		"spec.alternatives[2] (gcr.io/acme/foo) left out: ProviderNotConfigured",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

func keys(m map[string]*corev1.Secret) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
