package routing_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// MirrorReference is the keeper's name for an image in a mirror. It must be exactly the
// webhook's candidate: the same reference when the index offers the mirror for the image, and
// an error when it offers none.
func TestMirrorReferenceIsTheMirrorCandidate(t *testing.T) {
	long := "quay.io/" + strings.Repeat("a", 250) + ":v1" // fits alone, not under a mirror
	tests := []struct {
		dest, image string
		want        string
		err         error
	}{
		{dest: "registry.tld/mirror/", image: "nginx", want: "registry.tld/mirror/docker.io/library/nginx:latest"},
		{dest: "registry.tld/mirror", image: "quay.io/acme/foo:v1", want: "registry.tld/mirror/quay.io/acme/foo:v1"},
		{dest: "registry.tld:5000/", image: "quay.io/acme/foo:v1", want: "registry.tld:5000/quay.io/acme/foo:v1"},
		{dest: "library/", image: "ghcr.io/acme/x", want: "docker.io/library/ghcr.io/acme/x:latest"},
		{dest: "registry.tld/mirror/", image: "quay.io/acme/foo:v1@" + digest, want: "registry.tld/mirror/quay.io/acme/foo:v1@" + digest},
		{dest: "registry.tld/mirror/", image: "quay.io/acme/foo@" + digest, want: "registry.tld/mirror/quay.io/acme/foo@" + digest},
		{dest: "registry.tld/mirror/", image: "registry.tld/mirror-old/foo:v1", want: "registry.tld/mirror/registry.tld/mirror-old/foo:v1"},
		{dest: "registry.tld/mirror/", image: "registry.local:5000/acme/foo:v1", err: routing.ErrHostNotPathComponent},
		{dest: "registry.tld/mirror/", image: "[::1]:5000/acme/foo:v1", err: routing.ErrHostNotPathComponent},
		{dest: "registry.tld/mirror/", image: "Registry.tld/acme/foo:v1", err: routing.ErrHostNotPathComponent},
		{dest: "registry.tld/mirror/", image: "registry.tld/mirror/docker.io/library/nginx:latest", err: routing.ErrUnderMirror},
		{dest: "registry.tld/mirror/", image: "registry.tld/mirror:v1", err: routing.ErrUnderMirror},
		// The mirror's own image on a host with a port is its own, not one it fails to name.
		{dest: "registry.tld:5000/m/", image: "registry.tld:5000/m/docker.io/library/nginx:latest", err: routing.ErrUnderMirror},
		{dest: "registry.tld/mirror/", image: long, err: routing.ErrMirrorNameTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.dest+" "+tc.image, func(t *testing.T) {
			got, err := routing.MirrorReference(tc.dest, tc.image)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Errorf("MirrorReference = %q, %v; want %v", got, err, tc.err)
			case tc.err == nil && (err != nil || got != tc.want):
				t.Errorf("MirrorReference = %q, %v; want %q", got, err, tc.want)
			}

			ix := mustIndex(t, nil, []v1alpha1.ImageMirror{testutil.NewImageMirror("m", tc.dest).Build()})
			cands, err := ix.Candidates(tc.image, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var fromMirror []string
			for _, c := range cands {
				if c.Source == src(routing.KindImageMirror, "m") {
					fromMirror = append(fromMirror, c.Reference)
				}
			}
			switch {
			case tc.err != nil && len(fromMirror) > 0:
				t.Errorf("the index offers %q, MirrorReference cannot name it", fromMirror)
			case tc.err == nil && (len(fromMirror) != 1 || fromMirror[0] != tc.want):
				t.Errorf("the index offers %q, want [%q]", fromMirror, tc.want)
			}
		})
	}
}

func TestMirrorReferenceRefusesWhatDoesNotParse(t *testing.T) {
	for _, tc := range []struct{ dest, image string }{
		{"registry.tld/mirror:v1", "nginx"},
		{"registry.tld:5000", "nginx"},
		{"", "nginx"},
		{"registry.tld/mirror/", "Not An Image"},
	} {
		if got, err := routing.MirrorReference(tc.dest, tc.image); err == nil {
			t.Errorf("MirrorReference(%q, %q) = %q, want an error", tc.dest, tc.image, got)
		}
	}
	if _, err := routing.MirrorReference("registry.tld/mirror/", "Not An Image"); !errors.Is(err, routing.ErrInvalidImage) {
		t.Errorf("an image that does not parse: %v, want ErrInvalidImage", err)
	}
}
