package routing

import (
	"errors"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// excludeGlob is one compiled excludeImages entry. The repository, the tag and the digest are
// matched apart: a glob that names no tag matches every tag, one that names no digest every
// digest, and a '*' in the repository part cannot run into the tag.
type excludeGlob struct {
	name              string
	tag, digest       string
	hasTag, hasDigest bool
}

var (
	// globChars is the CRD's character set for excludeImages.
	globChars = regexp.MustCompile(`^[A-Za-z0-9._/:@*?-]+$`)

	errGlobSyntax = errors.New("not a valid glob")
	errGlobChars  = errors.New("a glob may only hold letters, digits, '.', '_', '-', '/', ':', '@', '*' and '?'")
	errGlobStars  = errors.New("'***' is not a valid glob")
)

// checkGlob refuses what the CRD refuses and what doublestar cannot run.
func checkGlob(g string) []error {
	var errs []error
	if !doublestar.ValidatePattern(g) {
		errs = append(errs, errGlobSyntax)
	}
	if !globChars.MatchString(g) {
		errs = append(errs, errGlobChars)
	}
	if strings.Contains(g, "***") {
		errs = append(errs, errGlobStars)
	}
	return errs
}

func compileGlob(g string) (excludeGlob, error) {
	if errs := checkGlob(g); len(errs) > 0 {
		return excludeGlob{}, errors.Join(errs...)
	}
	var out excludeGlob
	name := g
	if before, after, ok := strings.Cut(name, "@"); ok {
		name, out.digest, out.hasDigest = before, after, true
	}
	// A ':' before the last '/' belongs to a registry port, not to a tag.
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, out.tag, out.hasTag = name[:i], name[i+1:], true
	}
	out.name = normalizeGlobName(name)
	return out, nil
}

// normalizeGlobName applies Docker Hub's short names to a glob whose first segment is literal,
// the way the reference parser does for an image, so that "bitnami/**" and "nginx" mean what
// they would mean in a pod. A glob starting with a wildcard cannot tell a host from a Docker Hub
// namespace, so it is taken as written, against the normalized reference.
func normalizeGlobName(name string) string {
	const meta = "*?[{\\"
	first, remainder, hasSlash := strings.Cut(name, "/")
	if strings.ContainsAny(first, meta) {
		return name
	}
	if !hasSlash {
		return "docker.io/library/" + name
	}
	var host string
	switch {
	case first == "localhost" || strings.ContainsAny(first, ".:") || strings.ToLower(first) != first:
		host = first
		if host == "index.docker.io" {
			host = "docker.io"
		}
	default:
		host, remainder = "docker.io", name
	}
	if host == "docker.io" && !strings.Contains(remainder, "/") && !strings.ContainsAny(remainder, meta) {
		remainder = "library/" + remainder
	}
	return host + "/" + remainder
}

// matches needs no validation at match time: compileGlob refused every character that could
// make a part of the glob malformed.
func (g *excludeGlob) matches(img *imageRef) bool {
	if g.hasTag && (img.tag == "" || !doublestar.MatchUnvalidated(g.tag, img.tag)) {
		return false
	}
	if g.hasDigest && (img.digest == "" || !doublestar.MatchUnvalidated(g.digest, img.digest)) {
		return false
	}
	return doublestar.MatchUnvalidated(g.name, img.name)
}
