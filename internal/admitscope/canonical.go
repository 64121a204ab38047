package admitscope

import "strings"

// canonicalName is an image's repository as github.com/distribution/reference normalizes it,
// then lowered, the index.docker.io and library/ rules applied after lowering: the tag and the
// digest dropped; a first segment that has no '.' nor ':', is not localhost and has no upper
// case is not a host (docker.io is); docker.io's single-segment names get library/.
//
// For every image the reference parser accepts, canonicalName(image) equals
// canonicalName(its normalized name), so an image whose normalized repository is an entry has
// the entry's canonical name. Where the parser keeps the case (a host Quay.IO), canonicalName
// lowers it: it may only match more. celCanonical is the same function in CEL.
func canonicalName(image string) string {
	s := image
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	if c := strings.LastIndexByte(s, ':'); c > strings.LastIndexByte(s, '/') {
		s = s[:c]
	}
	var d, r string
	if k := strings.IndexByte(s, '/'); k >= 0 && isHost(s[:k]) {
		d, r = lowerASCII(s[:k]), lowerASCII(s[k+1:])
	} else {
		d, r = "docker.io", lowerASCII(s)
	}
	if d == "index.docker.io" {
		d = "docker.io"
	}
	if d == "docker.io" && !strings.Contains(r, "/") {
		r = "library/" + r
	}
	return d + "/" + r
}

// canonicalGroup is a repositoryGroup path (normalized, no trailing '/') in the form
// parentOf(canonicalName(image)) takes for the images one level below it.
func canonicalGroup(path string) string {
	return parentOf(canonicalName(path + "/x"))
}

func parentOf(name string) string {
	return name[:strings.LastIndexByte(name, '/')]
}

// isHost is the reference parser's test of a first path segment.
func isHost(first string) bool {
	return strings.ContainsAny(first, ".:") || first == "localhost" || lowerASCII(first) != first
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// celCanonical is canonicalName in CEL: it binds m, the canonical name of the string i, for
// body. Each binding is a one-element list's exists(), the only let in the API server's CEL
// of Kubernetes 1.30 (no cel.bind). Indexes are in code points, bytes for the ASCII of valid
// references; an invalid reference gives some name and no error.
func celCanonical(body string) string {
	return "[i.indexOf('@') >= 0 ? i.substring(0, i.indexOf('@')) : i].exists(s, " +
		"[s.lastIndexOf(':') > s.lastIndexOf('/') ? s.substring(0, s.lastIndexOf(':')) : s].exists(n, " +
		"[n.indexOf('/')].exists(k, " +
		"[k >= 0 && [n.substring(0, k)].exists(f, f.contains('.') || f.contains(':') || f == 'localhost' || f != f.lowerAscii())].exists(h, " +
		"[h ? n.substring(0, k).lowerAscii() : 'docker.io'].exists(d0, " +
		"[d0 == 'index.docker.io' ? 'docker.io' : d0].exists(d, " +
		"[h ? n.substring(k + 1).lowerAscii() : n.lowerAscii()].exists(r, " +
		"[d + '/' + (d == 'docker.io' && !r.contains('/') ? 'library/' + r : r)].exists(m, " +
		body + "))))))))"
}
