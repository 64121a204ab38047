package admitscope

import (
	"testing"

	"github.com/enix/kuik/internal/routing"
)

func TestCanonicalName(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]string{
		"nginx":           "docker.io/library/nginx",
		"library/nginx":   "docker.io/library/nginx",
		"docker.io/nginx": "docker.io/library/nginx",
		"index.docker.io/library/nginx:1@" + digest: "docker.io/library/nginx",
		"nginx@" + digest:                   "docker.io/library/nginx",
		"bitnami/redis:7":                   "docker.io/bitnami/redis",
		"localhost/x":                       "localhost/x",
		"localhost:5000/x:1":                "localhost:5000/x",
		"registry.local:5000/a/b/c/d/e:tag": "registry.local:5000/a/b/c/d/e",
		"Quay.IO/acme/foo":                  "quay.io/acme/foo",
		"INDEX.DOCKER.IO/nginx":             "docker.io/library/nginx",
		"Foo/bar":                           "foo/bar",
		"quay.io/acme/foo-bar:v1":           "quay.io/acme/foo-bar",
	}
	for image, want := range cases {
		if got := canonicalName(image); got != want {
			t.Errorf("canonicalName(%q) = %q, want %q", image, got, want)
		}
	}
	if got := canonicalGroup("docker.io"); got != "docker.io/library" {
		t.Errorf("canonicalGroup(docker.io) = %q, want docker.io/library: its images are docker.io/library/<name>", got)
	}
}

// canonicalName of an image is that of its normalized reference: what makes an entry, compared
// in canonical form, match every image whose normalized repository it is.
func FuzzCanonicalNameOfNormalized(f *testing.F) {
	for _, s := range corpusSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		norm, err := routing.Normalize(image)
		if err != nil {
			return
		}
		if a, b := canonicalName(image), canonicalName(norm); a != b {
			t.Errorf("canonicalName(%q) = %q, but canonicalName(%q) = %q", image, a, norm, b)
		}
		if lowerASCII(norm) == norm && !hasPort(norm) {
			// A name a mirror can route: its canonical form is its normalized name.
			if got, want := canonicalName(image), norm[:len(nameOf(norm))]; got != want {
				t.Errorf("canonicalName(%q) = %q, want its normalized name %q", image, got, want)
			}
		}
	})
}

var corpusSeeds = []string{
	"nginx", "library/nginx", "docker.io/nginx", "index.docker.io/nginx", "INDEX.DOCKER.IO/nginx",
	"Docker.IO/nginx", "localhost/x", "LOCALHOST/x", "localhost:5000/x:1", "[::1]:5000/x",
	"Quay.IO/acme/foo:v1", "quay.io/acme/foo@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	"a/b/c/d/e/f", "foo:1", "example.com/foo:Latest",
}

func hasPort(ref string) bool {
	for i := 0; i < len(ref) && ref[i] != '/'; i++ {
		if ref[i] == ':' || ref[i] == '[' {
			return true
		}
	}
	return false
}

// nameOf cuts a normalized reference's tag and digest.
func nameOf(ref string) string {
	s := ref
	for i := 0; i < len(s); i++ {
		if s[i] == '@' {
			s = s[:i]
			break
		}
	}
	last := -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '/':
			last = -1
		case ':':
			last = i
		}
	}
	if last >= 0 {
		s = s[:last]
	}
	return s
}
