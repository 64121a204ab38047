package credentials

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cred is an auths entry, as JSON, whose auth decodes to user / user-pw.
func cred(user string) string {
	return `{"auth":"` + base64.StdEncoding.EncodeToString([]byte(user+":"+user+"-pw")) + `"}`
}

// credOf is the entry cred(user) decodes to.
func credOf(user string) AuthEntry { return AuthEntry{Username: user, Password: user + "-pw"} }

// dockerConfigJSON builds a .dockerconfigjson from auths key -> entry JSON.
func dockerConfigJSON(t testing.TB, auths map[string]string) []byte {
	t.Helper()
	raw := make(map[string]json.RawMessage, len(auths))
	for k, v := range auths {
		raw[k] = json.RawMessage(v)
	}
	b, err := json.Marshal(map[string]any{"auths": raw})
	if err != nil {
		t.Fatalf("building docker config: %v", err)
	}
	return b
}

func mustParse(t testing.TB, auths map[string]string) *DockerConfig {
	t.Helper()
	c, err := Parse(dockerConfigJSON(t, auths))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

type lookupResult struct {
	Entry AuthEntry
	Key   string
}

func TestLookup(t *testing.T) {
	tests := map[string]struct {
		auths map[string]string
		path  string
		want  lookupResult // zero: no credential
	}{
		// Ports.
		"key without port does not match a path with a port": {
			auths: map[string]string{"registry.local": cred("a")},
			path:  "registry.local:5000/x",
		},
		"key with a port does not match a path without one": {
			auths: map[string]string{"registry.local:5000": cred("a")},
			path:  "registry.local/x",
		},
		"key with the same port matches": {
			auths: map[string]string{"registry.local:5000": cred("a")},
			path:  "registry.local:5000/x",
			want:  lookupResult{credOf("a"), "registry.local:5000"},
		},
		"key with another port does not match": {
			auths: map[string]string{"registry.local:5001": cred("a")},
			path:  "registry.local:5000/x",
		},
		"no glob in ports": {
			auths: map[string]string{"registry.local:*": cred("a")},
			path:  "registry.local:5000/x",
		},
		"localhost with a port": {
			auths: map[string]string{"localhost:5000": cred("a")},
			path:  "localhost:5000/x",
			want:  lookupResult{credOf("a"), "localhost:5000"},
		},

		// Host label globs.
		"label glob matches one label": {
			auths: map[string]string{"*.example.com": cred("a")},
			path:  "a.example.com/x",
			want:  lookupResult{credOf("a"), "*.example.com"},
		},
		"label glob does not match the apex": {
			auths: map[string]string{"*.example.com": cred("a")},
			path:  "example.com/x",
		},
		"label glob does not match two labels": {
			auths: map[string]string{"*.example.com": cred("a")},
			path:  "a.b.example.com/x",
		},
		"two label globs match two labels": {
			auths: map[string]string{"*.*.example.com": cred("a")},
			path:  "a.b.example.com/x",
			want:  lookupResult{credOf("a"), "*.*.example.com"},
		},
		"glob within a label": {
			auths: map[string]string{"eu-*.example.com": cred("a")},
			path:  "eu-west.example.com/x",
			want:  lookupResult{credOf("a"), "eu-*.example.com"},
		},
		"glob within a label does not match another label": {
			auths: map[string]string{"eu-*.example.com": cred("a")},
			path:  "us-west.example.com/x",
		},
		"malformed glob never matches": {
			auths: map[string]string{"[.example.com": cred("a")},
			path:  "a.example.com/x",
		},
		"exact host comes before a glob host": {
			auths: map[string]string{"*.example.com": cred("glob"), "a.example.com": cred("exact")},
			path:  "a.example.com/x",
			want:  lookupResult{credOf("exact"), "a.example.com"},
		},
		"host labels are not a suffix match": {
			auths: map[string]string{"example.com": cred("a")},
			path:  "a.example.com/x",
		},

		// Paths are string prefixes.
		"key path is a string prefix, not a segment prefix": {
			auths: map[string]string{"quay.io/acme": cred("a")},
			path:  "quay.io/acme-tools/x",
			want:  lookupResult{credOf("a"), "quay.io/acme"},
		},
		"key path with a trailing slash does not match a sibling": {
			auths: map[string]string{"quay.io/acme/": cred("a")},
			path:  "quay.io/acme-tools/x",
		},
		"key path with a trailing slash matches below it": {
			auths: map[string]string{"quay.io/acme/": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io/acme/"},
		},
		"key path longer than the path does not match": {
			auths: map[string]string{"quay.io/acme/foo": cred("a")},
			path:  "quay.io/acme",
		},
		"key path equal to the repository matches": {
			auths: map[string]string{"quay.io/acme/foo": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io/acme/foo"},
		},
		"key path of another namespace does not match": {
			auths: map[string]string{"quay.io/other": cred("a")},
			path:  "quay.io/acme/foo",
		},

		// Most specific first.
		"most specific key wins": {
			auths: map[string]string{"quay.io": cred("host"), "quay.io/acme": cred("ns"), "quay.io/acme/foo": cred("repo")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("repo"), "quay.io/acme/foo"},
		},
		"more specific key of a sibling does not win": {
			auths: map[string]string{"quay.io": cred("host"), "quay.io/acme/bar": cred("bar")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("host"), "quay.io"},
		},
		"reverse lexicographic order between two matching prefixes": {
			auths: map[string]string{"quay.io/acme": cred("acme"), "quay.io/acme-tools": cred("tools")},
			path:  "quay.io/acme-tools/x",
			want:  lookupResult{credOf("tools"), "quay.io/acme-tools"},
		},
		"keys reading the same are tried in auths key order": {
			auths: map[string]string{"quay.io": cred("plain"), "https://quay.io": cred("scheme")},
			path:  "quay.io/x",
			want:  lookupResult{credOf("scheme"), "https://quay.io"},
		},

		// Docker Hub.
		"docker.io key matches an official image": {
			auths: map[string]string{"docker.io": cred("a")},
			path:  "nginx",
			want:  lookupResult{credOf("a"), "docker.io"},
		},
		"docker.io key matches a user image": {
			auths: map[string]string{"docker.io": cred("a")},
			path:  "acme/foo",
			want:  lookupResult{credOf("a"), "docker.io"},
		},
		"docker.io/library key matches an official image": {
			auths: map[string]string{"docker.io/library": cred("lib"), "docker.io": cred("hub")},
			path:  "nginx",
			want:  lookupResult{credOf("lib"), "docker.io/library"},
		},
		"docker.io/library key does not match a user image": {
			auths: map[string]string{"docker.io/library": cred("lib")},
			path:  "acme/foo",
		},
		"legacy index key is the fallback for Docker Hub": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "nginx",
			want:  lookupResult{credOf("index"), "https://index.docker.io/v1/"},
		},
		"legacy index key without scheme is the fallback": {
			auths: map[string]string{"index.docker.io": cred("index")},
			path:  "docker.io/acme/foo",
			want:  lookupResult{credOf("index"), "index.docker.io"},
		},
		"legacy index key with /v2/ is the fallback": {
			auths: map[string]string{"index.docker.io/v2/": cred("index")},
			path:  "acme/foo",
			want:  lookupResult{credOf("index"), "index.docker.io/v2/"},
		},
		"legacy index key with a path is no fallback": {
			auths: map[string]string{"index.docker.io/library": cred("index")},
			path:  "nginx",
		},
		"legacy index key is not used when a docker.io key matched": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index"), "docker.io": cred("hub")},
			path:  "nginx",
			want:  lookupResult{credOf("hub"), "docker.io"},
		},
		"legacy index key is not used when a matching docker.io entry is empty": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index"), "docker.io": `{}`},
			path:  "nginx",
		},
		"legacy index key is used when the matching docker.io entry is undecodable": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index"), "docker.io": `{"auth":"%%%"}`},
			path:  "nginx",
			want:  lookupResult{credOf("index"), "https://index.docker.io/v1/"},
		},
		"legacy index key is no fallback for another registry": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "quay.io/acme/foo",
		},
		"legacy index key is a fallback for localhost, as in the kubelet": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "localhost/x",
			want:  lookupResult{credOf("index"), "https://index.docker.io/v1/"},
		},
		"legacy index key is no fallback for localhost with a port": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "localhost:5000/x",
		},
		"legacy index key is no fallback for a mirror root without slash": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "registry.tld",
		},
		"legacy index key is the fallback for the Docker Hub root": {
			auths: map[string]string{"https://index.docker.io/v1/": cred("index")},
			path:  "docker.io/",
			want:  lookupResult{credOf("index"), "https://index.docker.io/v1/"},
		},
		"index.docker.io path is read as docker.io": {
			auths: map[string]string{"docker.io": cred("hub")},
			path:  "index.docker.io/library/nginx",
			want:  lookupResult{credOf("hub"), "docker.io"},
		},
		"Docker Hub group path": {
			auths: map[string]string{"docker.io/acme": cred("acme")},
			path:  "acme/",
			want:  lookupResult{credOf("acme"), "docker.io/acme"},
		},

		// Schemes and /v1/, /v2/.
		"https scheme is dropped": {
			auths: map[string]string{"https://quay.io": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "https://quay.io"},
		},
		"http scheme is dropped": {
			auths: map[string]string{"http://registry.local:5000/acme": cred("a")},
			path:  "registry.local:5000/acme/foo",
			want:  lookupResult{credOf("a"), "http://registry.local:5000/acme"},
		},
		"leading /v1/ is dropped": {
			auths: map[string]string{"https://quay.io/v1/": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "https://quay.io/v1/"},
		},
		"leading /v2/ is dropped and the rest kept": {
			auths: map[string]string{"quay.io/v2/acme": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io/v2/acme"},
		},
		"leading /v2/ dropped keeps the path restrictive": {
			auths: map[string]string{"quay.io/v2/acme": cred("a")},
			path:  "quay.io/other/foo",
		},
		"trailing /v2/ after a path is kept": {
			auths: map[string]string{"quay.io/acme/v2/": cred("a")},
			path:  "quay.io/acme/foo",
		},
		"/v1 without a slash is a path": {
			auths: map[string]string{"quay.io/v1": cred("a")},
			path:  "quay.io/acme/foo",
		},
		"trailing slash alone is the host": {
			auths: map[string]string{"quay.io/": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io/"},
		},
		"key that is not a URL is ignored": {
			auths: map[string]string{"quay.io/%zz": cred("bad"), "quay.io": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io"},
		},

		// Group and mirror paths.
		"group path matched by its namespace key": {
			auths: map[string]string{"quay.io/acme": cred("a")},
			path:  "quay.io/acme/",
			want:  lookupResult{credOf("a"), "quay.io/acme"},
		},
		"group path matched by the same key with a slash": {
			auths: map[string]string{"quay.io/acme/": cred("a")},
			path:  "quay.io/acme/",
			want:  lookupResult{credOf("a"), "quay.io/acme/"},
		},
		"group path not covered by a repository key": {
			auths: map[string]string{"quay.io/acme/foo": cred("a")},
			path:  "quay.io/acme/",
		},
		"registry root group path": {
			auths: map[string]string{"quay.io": cred("a"), "quay.io/acme": cred("b")},
			path:  "quay.io/",
			want:  lookupResult{credOf("a"), "quay.io"},
		},
		"mirror path matched by the registry key": {
			auths: map[string]string{"registry.tld": cred("a")},
			path:  "registry.tld/mirror",
			want:  lookupResult{credOf("a"), "registry.tld"},
		},
		"mirror path matched by its own key before the registry's": {
			auths: map[string]string{"registry.tld": cred("host"), "registry.tld/mirror": cred("mirror")},
			path:  "registry.tld/mirror/",
			want:  lookupResult{credOf("mirror"), "registry.tld/mirror"},
		},
		"mirror root without its trailing slash is the registry": {
			auths: map[string]string{"registry.tld": cred("a"), "docker.io": cred("hub")},
			path:  "registry.tld",
			want:  lookupResult{credOf("a"), "registry.tld"},
		},
		"mirror root with a port": {
			auths: map[string]string{"registry.local:5000": cred("a")},
			path:  "registry.local:5000",
			want:  lookupResult{credOf("a"), "registry.local:5000"},
		},

		// Entries.
		"undecodable entry skipped for a less specific decodable one": {
			auths: map[string]string{"quay.io/acme": `{"auth":"not base64!"}`, "quay.io": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io"},
		},
		"entry whose auth has no colon is skipped": {
			auths: map[string]string{"quay.io/acme": `{"auth":"` + base64.StdEncoding.EncodeToString([]byte("token")) + `"}`, "quay.io": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io"},
		},
		"empty entry skipped for a less specific one": {
			auths: map[string]string{"quay.io/acme": `{"password":"x"}`, "quay.io": cred("a")},
			path:  "quay.io/acme/foo",
			want:  lookupResult{credOf("a"), "quay.io"},
		},
		"only an undecodable entry matches": {
			auths: map[string]string{"quay.io": `{"auth":"x"}`},
			path:  "quay.io/acme/foo",
		},
		"auth wins over username and password": {
			auths: map[string]string{"quay.io": `{"username":"u","password":"p","auth":"` + base64.StdEncoding.EncodeToString([]byte("a:b")) + `"}`},
			path:  "quay.io/x",
			want:  lookupResult{AuthEntry{Username: "a", Password: "b"}, "quay.io"},
		},
		"username and password without auth": {
			auths: map[string]string{"quay.io": `{"username":"u","password":"p","email":"e@x"}`},
			path:  "quay.io/x",
			want:  lookupResult{AuthEntry{Username: "u", Password: "p"}, "quay.io"},
		},
		"empty auth leaves username and password": {
			auths: map[string]string{"quay.io": `{"username":"u","password":"p","auth":""}`},
			path:  "quay.io/x",
			want:  lookupResult{AuthEntry{Username: "u", Password: "p"}, "quay.io"},
		},
		"password holding colons": {
			auths: map[string]string{"quay.io": `{"auth":"` + base64.StdEncoding.EncodeToString([]byte("u:p:q")) + `"}`},
			path:  "quay.io/x",
			want:  lookupResult{AuthEntry{Username: "u", Password: "p:q"}, "quay.io"},
		},

		// No match.
		"no key matches": {
			auths: map[string]string{"quay.io": cred("a"), "ghcr.io": cred("b")},
			path:  "registry.local/x",
		},
		"no entry at all": {
			auths: map[string]string{},
			path:  "nginx",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := mustParse(t, tc.auths)
			e, key, err := c.Lookup(tc.path)
			if tc.want == (lookupResult{}) {
				if !errors.Is(err, ErrNoCredentialForPath) {
					t.Fatalf("Lookup(%q) = %+v, %q, %v; want ErrNoCredentialForPath", tc.path, e, key, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup(%q): %v", tc.path, err)
			}
			if diff := cmp.Diff(tc.want, lookupResult{e, key}); diff != "" {
				t.Errorf("Lookup(%q) (-want +got):\n%s", tc.path, diff)
			}
		})
	}
}

func TestLookupInvalidPath(t *testing.T) {
	c := mustParse(t, map[string]string{"quay.io": cred("a")})
	for name, path := range map[string]string{
		"empty":           "",
		"slash only":      "/",
		"tag":             "quay.io/acme/foo:v1",
		"digest":          "quay.io/acme/foo@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"upper case path": "quay.io/Acme/foo",
		"double slash":    "quay.io//",
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := c.Lookup(path)
			if !errors.Is(err, ErrNoCredentialForPath) || !errors.Is(err, ErrInvalidPath) {
				t.Errorf("Lookup(%q) error = %v; want ErrNoCredentialForPath and ErrInvalidPath", path, err)
			}
		})
	}
}

func TestLookupErrorNamesAnUndecodableMatch(t *testing.T) {
	c := mustParse(t, map[string]string{"quay.io/acme": `{"auth":"x"}`, "ghcr.io": cred("a")})
	_, _, err := c.Lookup("quay.io/acme/foo")
	if !errors.Is(err, ErrNoCredentialForPath) || !errors.Is(err, ErrUndecodableEntry) {
		t.Errorf("Lookup error = %v; want ErrNoCredentialForPath and ErrUndecodableEntry", err)
	}
}

func TestLookupZeroValue(t *testing.T) {
	var c DockerConfig
	if _, _, err := c.Lookup("nginx"); !errors.Is(err, ErrNoCredentialForPath) {
		t.Errorf("Lookup on the zero DockerConfig: %v; want ErrNoCredentialForPath", err)
	}
}

func TestNormalizePath(t *testing.T) {
	tests := map[string]struct {
		path string
		want string
	}{
		"official image":                        {"nginx", "docker.io/library/nginx"},
		"official image under docker.io":        {"docker.io/nginx", "docker.io/library/nginx"},
		"user image":                            {"acme/foo", "docker.io/acme/foo"},
		"legacy index host":                     {"index.docker.io/acme/foo", "docker.io/acme/foo"},
		"registry image":                        {"quay.io/acme/foo", "quay.io/acme/foo"},
		"registry with port":                    {"registry.local:5000/x", "registry.local:5000/x"},
		"localhost":                             {"localhost/x", "localhost/x"},
		"group keeps its slash":                 {"quay.io/acme/", "quay.io/acme/"},
		"Docker Hub group":                      {"acme/", "docker.io/acme/"},
		"Docker Hub library group":              {"library/", "docker.io/library/"},
		"Docker Hub root":                       {"docker.io/", "docker.io/"},
		"legacy Docker Hub root":                {"index.docker.io/", "docker.io/"},
		"registry root":                         {"quay.io/", "quay.io/"},
		"mirror path":                           {"registry.tld/mirror", "registry.tld/mirror"},
		"mirror root without slash":             {"registry.tld", "registry.tld"},
		"mirror root with port without slash":   {"registry.local:5000", "registry.local:5000"},
		"localhost root without slash":          {"localhost", "localhost"},
		"one segment without a dot is an image": {"busybox", "docker.io/library/busybox"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := NormalizePath(tc.path)
			if err != nil {
				t.Fatalf("NormalizePath(%q): %v", tc.path, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NormalizePath(%q) (-want +got):\n%s", tc.path, diff)
			}
		})
	}
}

func TestKubeletKey(t *testing.T) {
	tests := map[string]struct {
		key  string
		want string
	}{
		"host":                           {"quay.io", "quay.io"},
		"host and path":                  {"quay.io/acme", "quay.io/acme"},
		"https scheme":                   {"https://quay.io/acme", "quay.io/acme"},
		"http scheme":                    {"http://quay.io", "quay.io"},
		"legacy Docker Hub":              {"https://index.docker.io/v1/", "index.docker.io"},
		"leading v2 with a path":         {"quay.io/v2/acme/", "quay.io/acme/"},
		"trailing v2 kept":               {"quay.io/acme/v2/", "quay.io/acme/v2/"},
		"v1 without a slash kept":        {"quay.io/v1", "quay.io/v1"},
		"slash only is the host":         {"quay.io/", "quay.io"},
		"port kept":                      {"registry.local:5000/x", "registry.local:5000/x"},
		"upper case scheme is no scheme": {"HTTPS://quay.io", "HTTPS://quay.io"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, _ := kubeletKey(tc.key)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kubeletKey(%q) (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}
