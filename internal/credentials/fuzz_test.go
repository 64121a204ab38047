package credentials

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"auths":{}}`,
		`{"auths":{"quay.io":{"auth":"dTpw"}}}`,
		`{"auths":{"quay.io":{"username":"a:b","password":"p"}}}`,
		`{"auths":{"quay.io":{"auth":"!"},"quay.io":{"auth":"dTpwdw=="}},"Auths":{"":null}}`,
		`{"auths":{"https://index.docker.io/v1/":{"auth":"OnA="},"*.x.io:5000/v2/a":{"username":"u"}}}`,
		`{"auths":{"quay.io":"x","ghcr.io":[],"gcr.io":{"email":1}},"HttpHeaders":{"a":"b"}}`,
		`null`,
		`{"auths":`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidDockerConfig) {
				t.Fatalf("Parse error %v does not wrap ErrInvalidDockerConfig", err)
			}
			return
		}
		for _, u := range c.Undecodable() {
			if !errors.Is(u.Err, ErrUndecodableEntry) {
				t.Fatalf("undecodable %q: %v does not wrap ErrUndecodableEntry", u.Key, u.Err)
			}
		}
		entries := c.Entries()
		for key := range entries {
			// Lookup never hands out an empty credential, whatever path a key makes.
			if e, _, err := c.Lookup(key); err == nil && e.Username == "" {
				t.Fatalf("Lookup(%q) returned an empty credential", key)
			}
		}
		encoded, err := Encode(entries)
		if err != nil {
			t.Fatalf("Encode(Parse(%q).Entries()): %v", data, err)
		}
		again, err := Parse(encoded)
		if err != nil {
			t.Fatalf("Parse(Encode(...)) of %q: %v", encoded, err)
		}
		if len(again.Undecodable()) != 0 {
			t.Fatalf("Encode wrote undecodable entries: %v", again.Undecodable())
		}
		if diff := cmp.Diff(entries, again.Entries()); diff != "" {
			t.Fatalf("round trip changed the entries (-parsed +re-parsed):\n%s", diff)
		}
		reencoded, err := Encode(again.Entries())
		if err != nil || string(reencoded) != string(encoded) {
			t.Fatalf("Encode is not stable: %q then %q (%v)", encoded, reencoded, err)
		}
		// The legacy form, the bare auths map, reads the same.
		var doc struct {
			Auths json.RawMessage `json:"auths"`
		}
		if err := json.Unmarshal(encoded, &doc); err != nil {
			t.Fatalf("re-reading %q: %v", encoded, err)
		}
		legacy, err := ParseSecret(&corev1.Secret{
			Type: corev1.SecretTypeDockercfg,
			Data: map[string][]byte{corev1.DockerConfigKey: doc.Auths},
		})
		if err != nil {
			t.Fatalf("ParseSecret(dockercfg %q): %v", doc.Auths, err)
		}
		if diff := cmp.Diff(entries, legacy.Entries()); diff != "" {
			t.Fatalf("the legacy form reads differently (-dockerconfigjson +dockercfg):\n%s", diff)
		}
	})
}

func FuzzLookup(f *testing.F) {
	for _, seed := range [][3]string{
		{"quay.io/acme", "https://quay.io/v2/", "quay.io/acme-tools/x"},
		{"*.example.com", "example.com", "a.example.com/x"},
		{"https://index.docker.io/v1/", "docker.io", "nginx"},
		{"registry.local:5000", "registry.local", "registry.local:5000/"},
		{"quay.io/acme/", "quay.io", "quay.io/acme/"},
		{"[", "%zz", "localhost"},
		{"", "http://", "registry.tld"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, key1, key2, path string) {
		c := mustParse(t, map[string]string{key1: cred("one"), key2: `{"username":"two","password":"p"}`})
		e, key, err := c.Lookup(path)
		if err != nil {
			if !errors.Is(err, ErrNoCredentialForPath) {
				t.Fatalf("Lookup(%q) error %v does not wrap ErrNoCredentialForPath", path, err)
			}
			return
		}
		got, ok := c.Entries()[key]
		if !ok || got != e {
			t.Fatalf("Lookup(%q) = %+v from %q, not an entry of %v", path, e, key, c.Entries())
		}
		if _, err := NormalizePath(path); err != nil {
			t.Fatalf("Lookup(%q) succeeded on a path NormalizePath refuses: %v", path, err)
		}
	})
}
