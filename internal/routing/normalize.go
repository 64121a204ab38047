package routing

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
)

// ErrInvalidImage is returned for an image reference that does not parse; the wrapped error
// says why.
var ErrInvalidImage = errors.New("invalid image reference")

// Normalize returns the fully qualified form of an image reference, the form every matching
// and every candidate uses: docker.io/library/nginx:latest for nginx, the tag and the digest
// both kept when both are given.
func Normalize(image string) (string, error) {
	ref, err := parseImage(image)
	if err != nil {
		return "", err
	}
	return ref.full, nil
}

// imageRef is a pod's image split the way routing needs it; name and suffix share full's
// backing string.
type imageRef struct {
	full   string // normalized reference, tag and digest kept
	name   string // normalized repository name, host first
	domain string
	tag    string
	digest string
	suffix string // what is carried over to other repositories: ":tag", "@digest" or both
}

func parseImage(image string) (imageRef, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return imageRef{}, fmt.Errorf("%w %q: %w", ErrInvalidImage, image, err)
	}
	named = reference.TagNameOnly(named)
	full := named.String()
	ref := imageRef{
		full:   full,
		name:   full[:len(named.Name())],
		domain: reference.Domain(named),
	}
	ref.suffix = full[len(ref.name):]
	if t, ok := named.(reference.Tagged); ok {
		ref.tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		ref.digest = d.Digest().String()
	}
	return ref, nil
}

// tagPattern is the CRD's test for a tag: a ':' with no '/' after it.
var tagPattern = regexp.MustCompile(`:[^/]*$`)

var (
	errEndsWithColon = errors.New("must not end with ':'")
	errHasDigest     = errors.New("must not contain a digest (tags and digests are carried over from the pod's image)")
	errHasTag        = errors.New("must not contain a tag (tags and digests are carried over from the pod's image)")
)

// checkNameOnly applies the CRD's CEL tests, in the CRD's order, so that the index refuses
// what the API server would have refused, for the same reason.
func checkNameOnly(s string) error {
	switch {
	case strings.HasSuffix(s, ":"):
		return errEndsWithColon
	case strings.Contains(s, "@"):
		return errHasDigest
	case tagPattern.MatchString(s):
		return errHasTag
	}
	return nil
}

// The CRD's patterns, repeated so that the index accepts nothing the API server would refuse
// (the reference parser alone also takes IPv6 hosts, for one).
var (
	repositoryPattern  = regexp.MustCompile(`^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*$`)
	groupPattern       = regexp.MustCompile(`^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*/?$`)
	destinationPattern = regexp.MustCompile(`^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*/?$`)
)

// pathKind is one of the three kinds of path a routing resource declares.
type pathKind struct {
	what    string // for messages, as the CRD words it
	pattern *regexp.Regexp
	// placeholder completes a path into a repository name, so that the reference parser
	// decides where the host ends and applies Docker Hub's rules. A group holds repositories
	// one level below; a mirror holds whole references, at least two levels below (host and
	// path). A repository needs none.
	placeholder string
}

var (
	repositoryKind  = pathKind{what: "image repository reference", pattern: repositoryPattern}
	groupKind       = pathKind{what: "repository path", pattern: groupPattern, placeholder: "x"}
	destinationKind = pathKind{what: "registry path", pattern: destinationPattern, placeholder: "x/x"}
)

// parse normalizes a repository (nginx is docker.io/library/nginx), a repositoryGroup or a
// destination.path (returned without a trailing '/': library/ is docker.io/library).
func (k pathKind) parse(s string) (string, error) {
	if err := checkNameOnly(s); err != nil {
		return "", err
	}
	name, err := k.normalize(s)
	if err != nil {
		return "", fmt.Errorf("not a valid %s: %w", k.what, err)
	}
	if !k.pattern.MatchString(s) {
		return "", fmt.Errorf("not a valid %s", k.what)
	}
	return name, nil
}

func (k pathKind) normalize(s string) (string, error) {
	if k.placeholder == "" {
		named, err := reference.ParseNormalizedNamed(s)
		if err != nil {
			return "", err
		}
		if !reference.IsNameOnly(named) {
			return "", errHasTag
		}
		return named.Name(), nil
	}
	trimmed := strings.TrimSuffix(s, "/")
	if trimmed == "" {
		return "", errors.New("empty")
	}
	named, err := reference.ParseNormalizedNamed(trimmed + "/" + k.placeholder)
	if err != nil {
		// The path alone usually fails the same way, with a message that does not show the
		// placeholder.
		if _, alone := reference.ParseNormalizedNamed(trimmed); alone != nil {
			err = alone
		}
		return "", err
	}
	name, ok := strings.CutSuffix(named.Name(), "/"+k.placeholder)
	if !ok || !reference.IsNameOnly(named) {
		return "", reference.ErrReferenceInvalidFormat
	}
	return name, nil
}

// domainLen is the length of the host part of a normalized name, which the reference
// grammar leaves out of the 255-character limit on repository paths.
func domainLen(name string) int {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return i
	}
	return len(name)
}

// fitsPathLimit reports whether a repository name built by concatenation still parses: the
// parser limits the path (the name without its host) to 255 characters.
func fitsPathLimit(nameLen, hostLen int) bool {
	return nameLen-hostLen-1 <= reference.RepositoryNameTotalLengthMax
}

// hostIsPathComponent reports whether a registry host, already valid as a host, is also valid
// as a path component below a mirror's destination: a port, an IPv6 address or an upper-case
// letter is not.
func hostIsPathComponent(host string) bool {
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c == ':' || c == '[' || c == ']' || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
