package credentialprovider

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"

	"github.com/enix/kuik/internal/credentials"
)

// NormalizeImage returns the name the kubelet gives a credential provider for an image: the
// normalized repository without tag or digest (nginx:1.27 is docker.io/library/nginx), as the
// kubelet's image puller does before asking its providers.
//
// So that a routing entry's repository, repositoryGroup or mirror path can be asked about too:
//   - a path ending in '/' is a path prefix, normalized by [credentials.NormalizePath] and given
//     without the '/' (quay.io/acme/ is quay.io/acme, acme/ is docker.io/acme);
//   - a single segment whose host part (before any ':') holds a '.' or is localhost is a
//     registry root (registry.tld, registry.local:5000), not a Docker Hub image;
//   - anything else is read as an image reference, tag and digest dropped.
func NormalizeImage(image string) (string, error) {
	if strings.HasSuffix(image, "/") {
		n, err := credentials.NormalizePath(image)
		if err != nil {
			return "", fmt.Errorf("image %q: %w", image, err)
		}
		return strings.TrimSuffix(n, "/"), nil
	}
	if !strings.Contains(image, "/") {
		host, _, _ := strings.Cut(image, ":")
		if strings.Contains(host, ".") || host == "localhost" {
			if n, err := credentials.NormalizePath(image); err == nil {
				return n, nil
			}
		}
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	return reference.TrimNamed(named).Name(), nil
}

// Matches reports whether one of the provider's matchImages matches the image (a reference,
// with or without tag or digest, normalized first by [NormalizeImage]: nginx is
// docker.io/library/nginx) by the kubelet's rules: same number of host labels each matched as
// a glob, same port, the matchImage's path a prefix of the image's. An image that does not
// parse matches nothing.
func (p *Provider) Matches(image string) bool {
	normalized, err := NormalizeImage(image)
	if err != nil {
		return false
	}
	return p.matches(normalized)
}

// matches is Matches for a normalized image.
func (p *Provider) matches(normalized string) bool {
	for _, m := range p.MatchImages {
		if credentials.MatchImage(m, normalized) {
			return true
		}
	}
	return false
}
