package keep_test

import (
	"strings"
	"testing"

	"github.com/enix/kuik/internal/keep"
)

func TestDigestFromImageID(t *testing.T) {
	for name, tc := range map[string]struct {
		imageID string
		want    string
		ok      bool
	}{
		"containerd: repository@digest":                     {imageID: "docker.io/library/nginx@" + digestA, want: digestA, ok: true},
		"a familiar repository is normalized first":         {imageID: "nginx@" + digestA, want: digestA, ok: true},
		"dockershim and cri-dockerd: docker-pullable://":    {imageID: "docker-pullable://nginx@" + digestA, want: digestA, ok: true},
		"a tag beside the digest":                           {imageID: "registry.local:5000/app:1@" + digestB, want: digestB, ok: true},
		"a bare sha256 is the local image ID, not a digest": {imageID: digestA},
		"docker:// is the local image ID":                   {imageID: "docker://" + digestA},
		"unknown while the container has not started":       {imageID: ""},
		"a tag and no digest":                               {imageID: "docker.io/library/nginx:1"},
		"a digest with no repository":                       {imageID: "@" + digestA},
		"a short digest":                                    {imageID: "nginx@sha256:abc"},
		"an upper-case digest":                              {imageID: "nginx@" + strings.ToUpper(digestA)},
		"an unknown scheme":                                 {imageID: "containerd://nginx@" + digestA},
		"docker-pullable:// twice":                          {imageID: "docker-pullable://docker-pullable://nginx@" + digestA},
		"an unknown algorithm":                              {imageID: "nginx@md5:d41d8cd98f00b204e9800998ecf8427e"},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := keep.DigestFromImageID(tc.imageID)
			if got != tc.want || ok != tc.ok {
				t.Errorf("DigestFromImageID(%q) = %q, %v; want %q, %v", tc.imageID, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzDigestFromImageID: no panic; a digest found is the imageID's suffix after its last '@',
// has an algorithm and a hex part, and reads back the same from the containerd form.
func FuzzDigestFromImageID(f *testing.F) {
	for _, seed := range []string{
		"docker.io/library/nginx@" + digestA, "docker-pullable://nginx@" + digestA, digestA,
		"docker://" + digestA, "", "nginx:1@" + digestB, "@", "a@b@" + digestA, "docker-pullable://",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, imageID string) {
		d, ok := keep.DigestFromImageID(imageID)
		if !ok {
			if d != "" {
				t.Fatalf("DigestFromImageID(%q) = %q with ok false", imageID, d)
			}
			return
		}
		if !strings.HasSuffix(imageID, "@"+d) {
			t.Fatalf("DigestFromImageID(%q) = %q, not its suffix", imageID, d)
		}
		alg, hex, found := strings.Cut(d, ":")
		if !found || alg == "" || len(hex) < 32 || strings.ToLower(hex) != hex {
			t.Fatalf("DigestFromImageID(%q) = %q, not a digest", imageID, d)
		}
		if again, ok := keep.DigestFromImageID("docker.io/library/x@" + d); !ok || again != d {
			t.Fatalf("DigestFromImageID of %q's digest in the containerd form = %q, %v", imageID, again, ok)
		}
	})
}
