package credentials

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatchImage(t *testing.T) {
	tests := map[string]struct {
		pattern, image string
		want           bool
	}{
		"a host matches its images":                      {"quay.io", "quay.io/acme/app", true},
		"a glob label matches one label":                 {"*.dkr.ecr.us-east-1.amazonaws.com", "123.dkr.ecr.us-east-1.amazonaws.com/app", true},
		"a glob label does not match two labels":         {"*.io", "a.b.io/app", false},
		"a partial glob matches":                         {"app*.k8s.io", "apps.k8s.io/x", true},
		"a top-level glob matches":                       {"k8s.*", "k8s.io/x", true},
		"the pattern's path is a prefix of the image's":  {"registry.io:8080/path", "registry.io:8080/path/app", true},
		"a path that is not a prefix does not match":     {"registry.io/path", "registry.io/other/app", false},
		"the port must be equal":                         {"registry.io:8080", "registry.io/app", false},
		"a pattern without port does not match a port":   {"registry.io", "registry.io:8080/app", false},
		"a leading /v2/ of a pattern is kept":            {"registry.io/v2/", "registry.io/app", false},
		"docker hub is matched on the normalized name":   {"docker.io", "docker.io/library/nginx", true},
		"an unnormalized docker hub name does not match": {"docker.io", "nginx", false},
		"a malformed glob never matches":                 {"[.io", "[.io/x", false},
		"a pattern that does not parse never matches":    {"registry.io/%zz", "registry.io/%zz/x", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := MatchImage(tc.pattern, tc.image); got != tc.want {
				t.Errorf("MatchImage(%q, %q) = %v, want %v", tc.pattern, tc.image, got, tc.want)
			}
		})
	}
}

func TestNewDockerConfigLooksUpTheMostSpecificKey(t *testing.T) {
	c := NewDockerConfig(map[string]AuthEntry{
		"*.example.com":          credOf("glob"),
		"registry.example.com":   credOf("host"),
		"registry.example.com/a": credOf("path"),
		"registry.example.com/b": {}, // matches, gives nothing: the next key is tried
		"other.io":               credOf("other"),
	})
	tests := map[string]lookupResult{
		"registry.example.com/a/app": {credOf("path"), "registry.example.com/a"},
		"registry.example.com/b/app": {credOf("host"), "registry.example.com"},
		"registry.example.com/c":     {credOf("host"), "registry.example.com"},
		"mirror.example.com/c":       {credOf("glob"), "*.example.com"},
	}
	for path, want := range tests {
		t.Run(path, func(t *testing.T) {
			e, k, err := c.Lookup(path)
			if err != nil {
				t.Fatalf("Lookup(%q): %v", path, err)
			}
			if diff := cmp.Diff(want, lookupResult{e, k}); diff != "" {
				t.Errorf("Lookup(%q) (-want +got):\n%s", path, diff)
			}
		})
	}
	if _, _, err := c.Lookup("quay.io/x"); err == nil {
		t.Errorf("Lookup(quay.io/x) found a credential, want none")
	}
}
