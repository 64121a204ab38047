package admitscope

import (
	"strings"

	"github.com/enix/kuik/internal/routing"
)

// excludeRegexp translates an excludeImages glob into an RE2 expression on a repository name
// that matches no name the glob (github.com/bmatcuk/doublestar) does not match: a mirror is
// taken to cover an image unless the expression proves it excluded. It reports false for a
// glob it does not express: one that names a tag or a digest (it excludes some tags only), or
// holds a character outside the CRD's set.
//
// '*' is [^/]*, '?' is [^/], a whole segment '**' is zero or more segments, and a '**' within
// a segment is '*', as in doublestar; a segment of '*' alone is one non-empty segment, and a
// glob with an empty segment is not expressed (no name has one). The result holds no backslash nor quote, so it fits a
// CEL string as it is. Upper-case letters stay as written: the names it is matched against
// are lowered, and a glob with an upper-case letter matches no name a mirror can route (a
// mirror never routes an image whose host has upper case, and paths are lower case).
func excludeRegexp(g routing.ExcludeGlob) (string, bool) {
	if g.HasTag || g.HasDigest {
		return "", false
	}
	segs := strings.Split(g.Name, "/")
	var b strings.Builder
	for i, seg := range segs {
		last := i == len(segs)-1
		if seg == "**" {
			switch {
			case i == 0 && last:
				b.WriteString(`[^/]+(/[^/]+)*`)
			case i == 0:
				b.WriteString(`([^/]+/)*`)
			case last:
				b.WriteString(`(/[^/]+)+`)
			default:
				b.WriteString(`/([^/]+/)*`)
			}
			continue
		}
		if seg == "" {
			return "", false // no name has an empty segment
		}
		if i > 0 && segs[i-1] != "**" {
			b.WriteByte('/')
		}
		if strings.Trim(seg, "*") == "" {
			b.WriteString(`[^/]+`) // a segment of stars: one segment, never an empty one
			continue
		}
		for j := 0; j < len(seg); j++ {
			switch c := seg[j]; {
			case c == '*':
				if strings.HasPrefix(seg[j:], "***") {
					return "", false // the CRD refuses it
				}
				b.WriteString(`[^/]*`)
				if j+1 < len(seg) && seg[j+1] == '*' {
					j++
				}
			case c == '?':
				b.WriteString(`[^/]`)
			case c == '.':
				b.WriteString(`[.]`)
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == ':', c == '@':
				b.WriteByte(c)
			default:
				return "", false
			}
		}
	}
	return b.String(), true
}
