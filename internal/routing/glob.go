package routing

import (
	"errors"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// globForm says which form of an image reference a glob is matched against: a glob that names
// no tag matches every tag of the repositories it matches, and one that names no digest
// matches every digest.
type globForm uint8

const (
	matchName globForm = iota
	matchNameTag
	matchNameDigest
	matchFull
)

// excludeGlob is one compiled excludeImages entry.
type excludeGlob struct {
	pattern string
	form    globForm
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
	name, rest := g, ""
	hasTag, hasDigest := false, false
	if i := strings.IndexByte(name, '@'); i >= 0 {
		hasDigest = true
		name, rest = g[:i], g[i:]
	}
	// A ':' before the last '/' belongs to a registry port, not to a tag.
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		hasTag = true
		name, rest = g[:i], g[i:]
	}
	out := excludeGlob{pattern: normalizeGlobName(name) + rest}
	switch {
	case hasTag && hasDigest:
		out.form = matchFull
	case hasTag:
		out.form = matchNameTag
	case hasDigest:
		out.form = matchNameDigest
	}
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

func (g *excludeGlob) matches(img *imageRef) bool {
	var s string
	switch g.form {
	case matchName:
		s = img.name
	case matchNameTag:
		if img.tag == "" {
			return false
		}
		s = img.nameTag()
	case matchNameDigest:
		if img.digest == "" {
			return false
		}
		s = img.nameDigest()
	case matchFull:
		if img.tag == "" || img.digest == "" {
			return false
		}
		s = img.full
	}
	return doublestar.MatchUnvalidated(g.pattern, s)
}
