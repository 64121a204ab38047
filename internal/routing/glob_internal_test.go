package routing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompileGlob(t *testing.T) {
	tests := map[string]struct {
		glob string
		want excludeGlob
	}{
		"a glob without tag names the repository only": {
			glob: "quay.io/acme/*",
			want: excludeGlob{name: "quay.io/acme/*"},
		},
		"a colon before the last slash is a port, not a tag": {
			glob: "registry.local:5000/acme/*",
			want: excludeGlob{name: "registry.local:5000/acme/*"},
		},
		"a colon after the last slash is a tag": {
			glob: "registry.local:5000/acme/foo:v*",
			want: excludeGlob{name: "registry.local:5000/acme/foo", tag: "v*", hasTag: true},
		},
		"a digest is split off before the tag": {
			glob: "quay.io/acme/foo:v1@sha256:*",
			want: excludeGlob{name: "quay.io/acme/foo", tag: "v1", hasTag: true, digest: "sha256:*", hasDigest: true},
		},
		"a digest without tag": {
			glob: "quay.io/acme/foo@sha256:*",
			want: excludeGlob{name: "quay.io/acme/foo", digest: "sha256:*", hasDigest: true},
		},
		"an empty tag is a tag that no image has": {
			glob: "quay.io/acme/foo:",
			want: excludeGlob{name: "quay.io/acme/foo", hasTag: true},
		},
		"a single name is a docker hub official image": {
			glob: "nginx",
			want: excludeGlob{name: "docker.io/library/nginx"},
		},
		"a single name with a tag is a docker hub official image": {
			glob: "nginx:1.*",
			want: excludeGlob{name: "docker.io/library/nginx", tag: "1.*", hasTag: true},
		},
		"a first segment without dot or colon is a docker hub namespace": {
			glob: "bitnami/**",
			want: excludeGlob{name: "docker.io/bitnami/**"},
		},
		"docker hub without namespace is the official images": {
			glob: "docker.io/nginx",
			want: excludeGlob{name: "docker.io/library/nginx"},
		},
		"docker hub with a wildcard keeps its wildcard": {
			glob: "docker.io/**",
			want: excludeGlob{name: "docker.io/**"},
		},
		"the legacy docker hub host is docker.io": {
			glob: "index.docker.io/library/*",
			want: excludeGlob{name: "docker.io/library/*"},
		},
		"localhost is a host": {
			glob: "localhost/foo",
			want: excludeGlob{name: "localhost/foo"},
		},
		"a wildcard first segment is taken as written": {
			glob: "*/acme/**",
			want: excludeGlob{name: "*/acme/**"},
		},
		"a host with an upper-case letter is a host": {
			glob: "Registry/foo",
			want: excludeGlob{name: "Registry/foo"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := compileGlob(tc.glob)
			if err != nil {
				t.Fatalf("compileGlob(%q): %v", tc.glob, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(excludeGlob{})); diff != "" {
				t.Errorf("compileGlob(%q) (-want +got):\n%s", tc.glob, diff)
			}
		})
	}
}

func TestExcludeGlobMatchesPortedRepository(t *testing.T) {
	// Images on a host with a port are never mirrored, so this cannot be seen through
	// Candidates; an exclusion that misread the port as a tag would match nothing here.
	img, err := parseImage("registry.local:5000/acme/foo:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		glob string
		want bool
	}{
		"repository glob":            {glob: "registry.local:5000/acme/*", want: true},
		"repository glob, any depth": {glob: "registry.local:5000/**", want: true},
		"other port":                 {glob: "registry.local:5001/**", want: false},
		"wildcard port":              {glob: "registry.local:*/acme/foo", want: true},
		"tag glob":                   {glob: "registry.local:5000/acme/foo:v*", want: true},
		"other tag":                  {glob: "registry.local:5000/acme/foo:v2", want: false},
		"tag and digest":             {glob: "registry.local:5000/acme/foo:v1@sha256:0123*", want: true},
		"other digest":               {glob: "registry.local:5000/acme/foo@sha256:fed*", want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, err := compileGlob(tc.glob)
			if err != nil {
				t.Fatal(err)
			}
			if got := g.matches(&img); got != tc.want {
				t.Errorf("%q matches %q = %v, want %v", tc.glob, img.full, got, tc.want)
			}
		})
	}
}
