package credentialprovider

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeFile writes content to dir/name and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// v1Config is a kubelet.config.k8s.io/v1 CredentialProviderConfig holding the providers, given
// as YAML list items indented by two spaces.
func v1Config(providers string) string {
	return "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n" + providers
}

// provider is a valid provider as YAML list items; extra lines (indented by four spaces) are
// appended.
func provider(name string, extra ...string) string {
	s := "  - name: " + name + "\n" +
		"    matchImages: [\"*.example.com\"]\n" +
		"    defaultCacheDuration: 10m\n" +
		"    apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

func TestLoadConfigReadsEachPublishedVersion(t *testing.T) {
	want := func(file, apiVersion string) *Config {
		return &Config{Providers: []Provider{{
			Name:                 "ecr-credential-provider",
			MatchImages:          []string{"*.dkr.ecr.*.amazonaws.com", "registry.io:8080/path"},
			DefaultCacheDuration: 12 * time.Hour,
			APIVersion:           apiVersion,
			Args:                 []string{"get-credentials", "-v=2"},
			Env:                  []string{"AWS_PROFILE=node", "EMPTY="},
			File:                 file,
		}}}
	}
	body := func(kind, apiVersion string) string {
		return "apiVersion: kubelet.config.k8s.io/" + kind + "\n" +
			"kind: CredentialProviderConfig\n" +
			"providers:\n" +
			"  - name: ecr-credential-provider\n" +
			"    matchImages: [\"*.dkr.ecr.*.amazonaws.com\", \"registry.io:8080/path\"]\n" +
			"    defaultCacheDuration: 12h\n" +
			"    apiVersion: " + apiVersion + "\n" +
			"    args: [get-credentials, -v=2]\n" +
			"    env:\n" +
			"      - {name: AWS_PROFILE, value: node}\n" +
			"      - {name: EMPTY, value: \"\"}\n"
	}
	tests := map[string]struct{ configVersion, apiVersion string }{
		"v1 config, v1 exec API":             {"v1", "credentialprovider.kubelet.k8s.io/v1"},
		"v1beta1 config, v1beta1 exec API":   {"v1beta1", "credentialprovider.kubelet.k8s.io/v1beta1"},
		"v1alpha1 config, v1alpha1 exec API": {"v1alpha1", "credentialprovider.kubelet.k8s.io/v1alpha1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", body(tc.configVersion, tc.apiVersion))
			got, err := LoadConfig(p)
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if diff := cmp.Diff(want(p, tc.apiVersion), got); diff != "" {
				t.Errorf("LoadConfig (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadConfigReadsJSONAndTokenAttributes(t *testing.T) {
	p := writeFile(t, t.TempDir(), "any-name", `{
  "apiVersion": "kubelet.config.k8s.io/v1",
  "kind": "CredentialProviderConfig",
  "providers": [{
    "name": "acr",
    "matchImages": ["*.azurecr.io"],
    "defaultCacheDuration": "0s",
    "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
    "tokenAttributes": {
      "serviceAccountTokenAudience": "api://AzureADTokenExchange",
      "cacheType": "ServiceAccount",
      "requireServiceAccount": true,
      "requiredServiceAccountAnnotationKeys": ["azure.workload.identity/client-id"],
      "optionalServiceAccountAnnotationKeys": ["azure.workload.identity/tenant-id"]
    }
  }]
}`)
	got, err := LoadConfig(p)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	want := &Config{Providers: []Provider{{
		Name:        "acr",
		MatchImages: []string{"*.azurecr.io"},
		APIVersion:  "credentialprovider.kubelet.k8s.io/v1",
		File:        p,
		TokenAttributes: &TokenAttributes{
			Audience:               "api://AzureADTokenExchange",
			CacheType:              "ServiceAccount",
			RequireServiceAccount:  true,
			RequiredAnnotationKeys: []string{"azure.workload.identity/client-id"},
			OptionalAnnotationKeys: []string{"azure.workload.identity/tenant-id"},
		},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadConfig (-want +got):\n%s", diff)
	}
}

func TestLoadConfigMergesADirectoryInNameOrder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "20-b.yaml", v1Config(provider("b1")+provider("b2")))
	writeFile(t, dir, "10-a.json", `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[`+
		`{"name":"a","matchImages":["a.io"],"defaultCacheDuration":"1m","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}`)
	writeFile(t, dir, "30-c.yml", v1Config(provider("c")))
	// Not read: other extensions, and directories even when their name ends in .yaml.
	writeFile(t, dir, "README.md", "not a config")
	writeFile(t, dir, "40-d.yaml.bak", "not a config")
	writeFile(t, dir, "50-e.yaml/inner.yaml", "not a config")
	got, err := LoadConfig(dir)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	var names, files []string
	for _, p := range got.Providers {
		names = append(names, p.Name)
		files = append(files, filepath.Base(p.File))
	}
	if diff := cmp.Diff([]string{"a", "b1", "b2", "c"}, names); diff != "" {
		t.Errorf("provider order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10-a.json", "20-b.yaml", "20-b.yaml", "30-c.yml"}, files); diff != "" {
		t.Errorf("provider files (-want +got):\n%s", diff)
	}
}

// loadErr returns LoadConfig's error with the temporary directory replaced by DIR.
func loadErr(t *testing.T, dir, path string) string {
	t.Helper()
	_, err := LoadConfig(path)
	if err == nil {
		t.Fatalf("LoadConfig(%s) succeeded, want an error", path)
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error %v does not wrap ErrInvalidConfig", err)
	}
	return strings.ReplaceAll(err.Error(), dir, "DIR")
}

func TestLoadConfigRefusesFilesTheKubeletRefuses(t *testing.T) {
	tests := map[string]struct {
		files map[string]string
		path  string // relative to the directory; "" is the directory
		want  string
		// wantStart: the error starts with want.
		wantStart bool
	}{
		"a missing path": {
			path: "nothing.yaml",
			want: `invalid credential provider configuration: unable to access path "DIR/nothing.yaml": stat DIR/nothing.yaml: no such file or directory`,
		},
		"a directory without a config file": {
			files: map[string]string{"notes.txt": "x"},
			want:  `invalid credential provider configuration: no configuration files found in directory "DIR"`,
		},
		"a name used twice in two files": {
			files: map[string]string{"a.yaml": v1Config(provider("ecr")), "b.yaml": v1Config(provider("gcr") + provider("ecr"))},
			want:  `invalid credential provider configuration: DIR/b.yaml: providers[1]: duplicate provider name "ecr" found in configuration file(s) (first at DIR/a.yaml: providers[0])`,
		},
		"a name used twice in one file": {
			files: map[string]string{"a.yaml": v1Config(provider("ecr") + provider("ecr"))},
			want:  `invalid credential provider configuration: DIR/a.yaml: providers[1]: duplicate provider name "ecr" found in configuration file(s) (first at DIR/a.yaml: providers[0])`,
		},
		"an unknown field, named": {
			files: map[string]string{"a.yaml": v1Config(provider("ecr", "matchImage: [x.io]"))},
			want:  `invalid credential provider configuration: error decoding config "DIR/a.yaml": strict decoding error: unknown field "providers[0].matchImage"`,
		},
		"a field given twice": {
			files: map[string]string{"a.yaml": v1Config(provider("ecr", "name: again"))},
			want:  `invalid credential provider configuration: error decoding config "DIR/a.yaml": strict decoding error: yaml: unmarshal errors:` + "\n" + `  line 8: key "name" already set in map`,
		},
		"tokenAttributes in a v1beta1 config": {
			files: map[string]string{"a.yaml": strings.Replace(v1Config(provider("ecr", "tokenAttributes: {}")), "/v1\n", "/v1beta1\n", 1)},
			want:  `invalid credential provider configuration: error decoding config "DIR/a.yaml": strict decoding error: unknown field "providers[0].tokenAttributes"`,
		},
		"another kind": {
			files: map[string]string{"a.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"},
			want:  `invalid credential provider configuration: error decoding config "DIR/a.yaml": failed to decode "KubeletConfiguration" (wrong Kind)`,
		},
		"no kind": {
			files: map[string]string{"a.yaml": "apiVersion: kubelet.config.k8s.io/v1\nproviders: []\n"},
			want:  "invalid credential provider configuration: error decoding config \"DIR/a.yaml\": Object 'Kind' is missing in 'apiVersion: kubelet.config.k8s.io/v1\nproviders: []\n'",
		},
		"an unknown version": {
			files: map[string]string{"a.yaml": "apiVersion: kubelet.config.k8s.io/v2\nkind: CredentialProviderConfig\n"},
			// The message ends with the scheme's source line in apimachinery.
			want:      `invalid credential provider configuration: error decoding config "DIR/a.yaml": no kind "CredentialProviderConfig" is registered for version "kubelet.config.k8s.io/v2" in scheme `,
			wantStart: true,
		},
		"no provider": {
			files: map[string]string{"a.yaml": v1Config("  []\n")},
			want:  "invalid credential provider configuration:\nDIR: providers: Required value: at least 1 item in plugins is required",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for n, c := range tc.files {
				writeFile(t, dir, n, c)
			}
			got := loadErr(t, dir, filepath.Join(dir, tc.path))
			if tc.wantStart && strings.HasPrefix(got, tc.want) {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadConfigAppliesTheKubeletsValidation(t *testing.T) {
	const prefix = "invalid credential provider configuration:\nDIR/c.yaml: "
	tests := map[string]struct {
		providers string
		want      []string // lines after the prefix
	}{
		"a name with a slash": {
			providers: provider("a/b"),
			want:      []string{`providers[0] "a/b": name: Invalid value: "a/b": provider name cannot contain '/'`},
		},
		"a name with a space": {
			providers: provider(`"a b"`),
			want:      []string{`providers[0] "a b": name: Invalid value: "a b": provider name cannot contain spaces`},
		},
		"a name of '.'": {
			providers: provider(`"."`),
			want:      []string{`providers[0] ".": name: Invalid value: ".": provider name cannot be '.'`},
		},
		"a name of '..'": {
			providers: provider(`".."`),
			want:      []string{`providers[0] "..": name: Invalid value: "..": provider name cannot be '..'`},
		},
		"an empty name": {
			providers: provider(`""`),
			want:      []string{`providers[0] "": name: Required value`},
		},
		"no apiVersion": {
			providers: "  - {name: p, matchImages: [a.io], defaultCacheDuration: 1m}\n",
			want:      []string{`providers[0] "p": apiVersion: Required value`},
		},
		"an unsupported apiVersion": {
			providers: "  - {name: p, matchImages: [a.io], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v2}\n",
			want: []string{`providers[0] "p": apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v2": ` +
				`supported values: "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1"`},
		},
		"no matchImages": {
			providers: "  - {name: p, matchImages: [], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n",
			want:      []string{`providers[0] "p": matchImages: Required value: at least 1 item in matchImages is required`},
		},
		"a matchImage that does not parse": {
			providers: "  - {name: p, matchImages: [a.io, \"a.io/%zz\"], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n",
			want:      []string{`providers[0] "p": matchImages[1]: Invalid value: "a.io/%zz": match image is invalid: parse "https://a.io/%zz": invalid URL escape "%zz"`},
		},
		"no defaultCacheDuration": {
			providers: "  - {name: p, matchImages: [a.io], apiVersion: credentialprovider.kubelet.k8s.io/v1}\n",
			want:      []string{`providers[0] "p": defaultCacheDuration: Required value`},
		},
		"a negative defaultCacheDuration": {
			providers: "  - {name: p, matchImages: [a.io], defaultCacheDuration: -1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n",
			want:      []string{`providers[0] "p": defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0`},
		},
		"every error of every provider, each named by its index": {
			providers: provider("ok") + "  - {name: \"bad/one\", matchImages: []}\n",
			want: []string{
				`providers[1] "bad/one": name: Invalid value: "bad/one": provider name cannot contain '/'`,
				`providers[1] "bad/one": apiVersion: Required value`,
				`providers[1] "bad/one": matchImages: Required value: at least 1 item in matchImages is required`,
				`providers[1] "bad/one": defaultCacheDuration: Required value`,
			},
		},
		"tokenAttributes without audience, cacheType nor requireServiceAccount": {
			providers: provider("p", "tokenAttributes: {}"),
			want: []string{
				`providers[0] "p": tokenAttributes.serviceAccountTokenAudience: Required value`,
				`providers[0] "p": tokenAttributes.requireServiceAccount: Required value`,
				`providers[0] "p": tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token`,
			},
		},
		"tokenAttributes with an unknown cacheType": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Pod}"),
			want:      []string{`providers[0] "p": tokenAttributes.cacheType: Unsupported value: "Pod": supported values: "ServiceAccount", "Token"`},
		},
		"tokenAttributes with an exec API other than v1": {
			providers: "  - name: p\n    matchImages: [a.io]\n    defaultCacheDuration: 1m\n    apiVersion: credentialprovider.kubelet.k8s.io/v1beta1\n" +
				"    tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Token}\n",
			want: []string{`providers[0] "p": tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version`},
		},
		"required annotation keys without requireServiceAccount": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: false, cacheType: Token, requiredServiceAccountAnnotationKeys: [a.io/k]}"),
			want:      []string{`providers[0] "p": tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set`},
		},
		"annotation keys that are not qualified names": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Token, requiredServiceAccountAnnotationKeys: [\"a b\"], optionalServiceAccountAnnotationKeys: [ok, \"-x\"]}"),
			want: []string{
				`providers[0] "p": tokenAttributes.requiredServiceAccountAnnotationKeys[0]: Invalid value: "a b": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				`providers[0] "p": tokenAttributes.optionalServiceAccountAnnotationKeys[1]: Invalid value: "-x": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
			},
		},
		"upper case annotation keys are valid": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Token, requiredServiceAccountAnnotationKeys: [Example.COM/Key]}"),
		},
		"an annotation key listed twice": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Token, optionalServiceAccountAnnotationKeys: [a.io/k, a.io/k]}"),
			want:      []string{`providers[0] "p": tokenAttributes.optionalServiceAccountAnnotationKeys[1]: Duplicate value: "a.io/k"`},
		},
		"an annotation key both required and optional": {
			providers: provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: ServiceAccount, requiredServiceAccountAnnotationKeys: [b.io/k, a.io/k], optionalServiceAccountAnnotationKeys: [a.io/k, b.io/k]}"),
			want:      []string{`providers[0] "p": tokenAttributes: Invalid value: ["a.io/k","b.io/k"]: annotation keys cannot be both required and optional`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := writeFile(t, dir, "c.yaml", v1Config(tc.providers))
			if len(tc.want) == 0 {
				if _, err := LoadConfig(p); err != nil {
					t.Fatalf("LoadConfig: %v", err)
				}
				return
			}
			if diff := cmp.Diff(prefix+strings.Join(tc.want, "\nDIR/c.yaml: "), loadErr(t, dir, p)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckBinDir(t *testing.T) {
	cfg := &Config{Providers: []Provider{{Name: "good"}, {Name: "missing"}, {Name: "not-executable"}, {Name: "a-directory"}}}
	dir := t.TempDir()
	writeFile(t, dir, "good", "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(dir, "good"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "not-executable", "#!/bin/sh\n")
	if err := os.Mkdir(filepath.Join(dir, "a-directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := cfg.CheckBinDir(dir)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("CheckBinDir = %v, want an error wrapping ErrInvalidConfig", err)
	}
	want := "invalid credential provider configuration: " +
		`provider "missing": plugin binary executable DIR/missing did not exist` + "\n" +
		`provider "not-executable": error inspecting binary executable DIR/not-executable: exec: "DIR/not-executable": permission denied` + "\n" +
		`provider "a-directory": error inspecting binary executable DIR/a-directory: exec: "DIR/a-directory": is a directory`
	if diff := cmp.Diff(want, strings.ReplaceAll(err.Error(), dir, "DIR")); diff != "" {
		t.Errorf("CheckBinDir (-want +got):\n%s", diff)
	}

	if err := (&Config{Providers: []Provider{{Name: "good"}}}).CheckBinDir(dir); err != nil {
		t.Errorf("CheckBinDir with an executable: %v", err)
	}
	err = (&Config{Providers: []Provider{{Name: "good"}}}).CheckBinDir(filepath.Join(dir, "none"))
	if want := "invalid credential provider configuration: plugin binary directory DIR/none did not exist"; err == nil || strings.ReplaceAll(err.Error(), dir, "DIR") != want {
		t.Errorf("CheckBinDir of a missing directory = %v, want %s", err, want)
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(v1Config(provider("p", "tokenAttributes: {serviceAccountTokenAudience: aud, requireServiceAccount: true, cacheType: Token}"))))
	f.Add([]byte(`{"apiVersion":"kubelet.config.k8s.io/v1alpha1","kind":"CredentialProviderConfig","providers":[{"name":"x"}]}`))
	f.Add([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\nproviders: [{}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			if cfg != nil {
				t.Errorf("LoadConfig returned a config with error %v", err)
			}
			return
		}
		if len(cfg.Providers) == 0 {
			t.Errorf("LoadConfig accepted a config without provider")
		}
		for _, pr := range cfg.Providers {
			if pr.Name == "" || len(pr.MatchImages) == 0 || pr.DefaultCacheDuration < 0 {
				t.Errorf("LoadConfig accepted an invalid provider %+v", pr)
			}
			_ = pr.Matches("docker.io/library/nginx")
		}
	})
}
