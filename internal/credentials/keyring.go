package credentials

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
)

// The rules below follow the kubelet's BasicDockerKeyring in
// k8s.io/kubernetes/pkg/credentialprovider/keyring.go (Add, URLsMatch, Lookup,
// isDefaultRegistryMatch); the code is written for this package.

// dockerHubLegacyKey is the key that https://index.docker.io/v1/ and its variants read as. The
// kubelet falls back to it for a Docker Hub image that no key matched (defaultRegistryHost).
const dockerHubLegacyKey = "index.docker.io"

// hostPath is an auths key or a registry path read as a schemeless URL.
type hostPath struct {
	labels []string // host labels, split on '.'; a key's labels are filepath.Match patterns
	port   string   // "" when there is none
	path   string   // the URL path, "" or starting with '/'
}

// parseHostPath reads s as the kubelet reads both sides of a match: "https://" + s through
// url.Parse, the host then split into labels and port with net.SplitHostPort (no port when it
// fails). It returns nil when url.Parse fails: the kubelet then never matches.
func parseHostPath(s string) *hostPath {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return &hostPath{labels: strings.Split(host, "."), port: port, path: u.Path}
}

// kubeletKey returns the index key the kubelet derives from an auths key, and that key read back
// for matching (nil when it does not parse, so the entry never matches).
//
// As in BasicDockerKeyring.Add: https:// is prepended unless the key starts with https:// or
// http://; a key url.Parse refuses is ignored; a path starting with /v1/ or /v2/ loses those
// three characters (only at the start: quay.io/acme/v2/ keeps its path); a path of "" or "/"
// leaves the host alone.
func kubeletKey(authsKey string) (string, *hostPath) {
	s := authsKey
	if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", nil
	}
	p := u.Path
	if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v2/") {
		p = p[len("/v1"):]
	}
	key := u.Host
	if p != "" && p != "/" {
		key += p
	}
	return key, parseHostPath(key)
}

// matches reports whether the key glob k matches the target t, as the kubelet's URLsMatch:
// same port, same number of host labels, k's path a string prefix of t's, and each host label
// of t matched by filepath.Match against k's (a malformed pattern never matches).
func (k *hostPath) matches(t *hostPath) bool {
	if k.port != t.port || len(k.labels) != len(t.labels) || !strings.HasPrefix(t.path, k.path) {
		return false
	}
	for i, pattern := range k.labels {
		if ok, err := filepath.Match(pattern, t.labels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// isDockerHub reports whether the kubelet counts a normalized path as Docker Hub's, for the
// index.docker.io fallback (isDefaultRegistryMatch in keyring.go). A normalized path always
// starts with its registry host, so only the kubelet's test of a first segment followed by
// others applies: docker.io and index.docker.io, and, as in the kubelet, any host holding
// neither '.' nor ':' (localhost/x gets the fallback too).
func isDockerHub(normalized string) bool {
	host, _, _ := strings.Cut(normalized, "/")
	switch host {
	case "":
		return false
	case "docker.io", dockerHubLegacyKey:
		return true
	default:
		return !strings.ContainsAny(host, ".:")
	}
}

// Lookup returns the credential the kubelet would use for a registry path, and the auths key,
// as written, that it came from.
//
// path is an image repository (quay.io/acme/foo, nginx, registry.local:5000/x) or a path prefix
// (quay.io/acme/, registry.tld/mirror, registry.tld/), normalized by [NormalizePath]. Every
// auths key matching the path by the kubelet's rules is a candidate, the most specific first;
// Lookup returns the first that gives a credential, skipping undecodable entries (which are not
// candidates at all) and empty ones. A key reading as index.docker.io is a candidate for a
// Docker Hub path only when no key matched.
//
// The error wraps ErrNoCredentialForPath (and ErrInvalidPath for a path that does not parse).
func (c *DockerConfig) Lookup(path string) (entry AuthEntry, key string, err error) {
	normalized, err := NormalizePath(path)
	if err != nil {
		return AuthEntry{}, "", fmt.Errorf("%w: %w", ErrNoCredentialForPath, err)
	}
	target := parseHostPath(normalized)
	if target == nil {
		// NormalizePath only returns what the reference grammar accepts; url.Parse takes all of it.
		return AuthEntry{}, "", fmt.Errorf("%w: %w: %q does not parse as a URL", ErrNoCredentialForPath, ErrInvalidPath, normalized)
	}
	matched := false
	for i := range c.entries {
		e := &c.entries[i]
		if e.glob == nil || !e.glob.matches(target) {
			continue
		}
		matched = true
		if e.usable() {
			return e.auth, e.key, nil
		}
	}
	if matched {
		return AuthEntry{}, "", fmt.Errorf("%w: the auths keys matching %q hold no username", ErrNoCredentialForPath, normalized)
	}
	if isDockerHub(normalized) {
		for i := range c.entries {
			e := &c.entries[i]
			if e.kubeletKey == dockerHubLegacyKey && e.usable() {
				return e.auth, e.key, nil
			}
		}
	}
	for _, u := range c.undecodable {
		if _, glob := kubeletKey(u.Key); glob != nil && glob.matches(target) {
			return AuthEntry{}, "", fmt.Errorf("%w: the auths key %q matching %q is undecodable: %w", ErrNoCredentialForPath, u.Key, normalized, u.Err)
		}
	}
	return AuthEntry{}, "", fmt.Errorf("%w: no auths key matches %q", ErrNoCredentialForPath, normalized)
}

// NormalizePath returns a registry path as the kubelet sees the images under it: the Docker Hub
// forms are expanded as the kubelet expands images (nginx is docker.io/library/nginx, acme/foo
// is docker.io/acme/foo, index.docker.io/acme/ is docker.io/acme/), and a trailing '/' is kept.
//
//   - A path ending in '/' is a prefix: its first segment is read as in an image below it, so
//     quay.io/ is the registry quay.io and acme/ is docker.io/acme/.
//   - A path of one segment that can only be a registry host (it holds '.' or ':', is localhost,
//     or is not lower case) is that registry's root: registry.tld and registry.local:5000 are
//     registries, as a mirror's destination path without its trailing slash reads. The
//     reference parser would make registry.tld the Docker Hub image docker.io/library/registry.tld.
//   - Any other path is an image repository, without tag or digest.
//
// Use the result as an auths key for a Docker Hub path: the kubelet reads an auths key's first
// segment as a host, so the key nginx never matches the image nginx, docker.io/library/nginx does.
// Errors wrap ErrInvalidPath.
func NormalizePath(path string) (string, error) {
	body, prefix := strings.CutSuffix(path, "/")
	if body == "" {
		return "", fmt.Errorf("%w: %q is empty", ErrInvalidPath, path)
	}
	first, _, more := strings.Cut(body, "/")
	if prefix || (!more && isHostLike(first)) {
		// Normalize a longer name under the path, then take the path back: two segments so that
		// a lone docker.io/ is not turned into docker.io/library/.
		const below = "/x/x"
		named, err := reference.ParseNormalizedNamed(body + below)
		if err != nil {
			return "", fmt.Errorf("%w: %q: %w", ErrInvalidPath, path, err)
		}
		name, ok := strings.CutSuffix(named.Name(), below)
		if !ok || !reference.IsNameOnly(named) {
			return "", fmt.Errorf("%w: %q is not a repository path", ErrInvalidPath, path)
		}
		if prefix {
			name += "/"
		}
		return name, nil
	}
	named, err := reference.ParseNormalizedNamed(body)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrInvalidPath, path, err)
	}
	if !reference.IsNameOnly(named) {
		return "", fmt.Errorf("%w: %q has a tag or digest", ErrInvalidPath, path)
	}
	return named.Name(), nil
}

// isHostLike reports whether the first segment of a name can only be a registry host, by the
// rules the reference parser applies to a first segment followed by others.
func isHostLike(segment string) bool {
	return segment == "localhost" || strings.ContainsAny(segment, ".:") || strings.ToLower(segment) != segment
}

// MatchImage reports whether a credential provider's matchImages pattern matches an image as
// the kubelet's URLsMatchStr does (pkg/credentialprovider/keyring.go): both read as schemeless
// URLs, the same port, the same number of host labels each matched by the pattern's label as a
// filepath.Match glob, and the pattern's path a string prefix of the image's. Unlike an auths
// key, the pattern keeps a leading /v1/ or /v2/ of its path. image is matched as given: pass it
// normalized (docker.io/library/nginx, not nginx). A pattern or image that does not parse never
// matches.
func MatchImage(pattern, image string) bool {
	k, t := parseHostPath(pattern), parseHostPath(image)
	return k != nil && t != nil && k.matches(t)
}
