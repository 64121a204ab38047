package routing_test

import (
	"errors"
	"testing"

	"github.com/enix/kuik/internal/routing"
)

func TestRepository(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for name, tc := range map[string]struct {
		image, want string
	}{
		"a Docker Hub short name is normalized":        {image: "nginx", want: "docker.io/library/nginx"},
		"the tag is dropped":                           {image: "quay.io/acme/foo:v1", want: "quay.io/acme/foo"},
		"the digest is dropped, same repository":       {image: "quay.io/acme/foo@" + digest, want: "quay.io/acme/foo"},
		"tag and digest are both dropped":              {image: "quay.io/acme/foo:v1@" + digest, want: "quay.io/acme/foo"},
		"a registry with a port keeps it":              {image: "registry.local:5000/acme/foo:v1", want: "registry.local:5000/acme/foo"},
		"a mirror path keeps the original's full name": {image: "registry.local/mirror/docker.io/library/nginx:1", want: "registry.local/mirror/docker.io/library/nginx"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := routing.Repository(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Repository(%q) = %q, want %q", tc.image, got, tc.want)
			}
		})
	}
	if _, err := routing.Repository("Not/A:Valid:Ref"); !errors.Is(err, routing.ErrInvalidImage) {
		t.Errorf("an invalid reference: err = %v, want ErrInvalidImage", err)
	}
}
