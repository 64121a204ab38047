package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestParsePlatforms(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []v1.Platform
		wantErr bool
	}{
		"both defaults":          {in: "linux/amd64,linux/arm64", want: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}},
		"a variant, with spaces": {in: "linux/arm/v7 , linux/amd64", want: []v1.Platform{{OS: "linux", Architecture: "arm", Variant: "v7"}, {OS: "linux", Architecture: "amd64"}}},
		"not linux is refused":   {in: "windows/amd64", wantErr: true},
		"an empty entry":         {in: "linux/amd64,", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parsePlatforms(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeychain(t *testing.T) {
	repo, err := name.NewRepository("registry.example:5000/kuik/kuik-webhook")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		env  map[string]string
		want *authn.AuthConfig
	}{
		"credentials from the environment": {
			env:  map[string]string{"REGISTRY_USERNAME": "ci", "REGISTRY_PASSWORD": "pw", "HOME": t.TempDir()},
			want: &authn.AuthConfig{Username: "ci", Password: "pw"},
		},
		"no username: the Docker config, here empty, so anonymous": {
			env:  map[string]string{"REGISTRY_PASSWORD": "pw"},
			want: &authn.AuthConfig{},
		},
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, err := keychain(func(k string) string { return tc.env[k] }).Resolve(repo)
			if err != nil {
				t.Fatal(err)
			}
			got, err := a.Authorization()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppVersion(t *testing.T) {
	tests := map[string]struct {
		chart   string
		want    string
		wantErr bool
	}{
		"appVersion":       {chart: "apiVersion: v2\nname: x\nversion: 1.0.0\nappVersion: \"1.2.3\"\n", want: "1.2.3"},
		"no appVersion":    {chart: "apiVersion: v2\nname: x\nversion: 1.0.0\n", wantErr: true},
		"not a Chart.yaml": {chart: "[", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte(tc.chart), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := appVersion(dir)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("appVersion = %q, %v; want %q, error %t", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := appVersion(filepath.Join("..", "..", "charts", "kuik")); err != nil {
		t.Errorf("the chart's own appVersion: %v", err)
	}
}
