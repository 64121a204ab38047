package admitscope

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/enix/kuik/internal/routing"
)

func TestExcludeRegexp(t *testing.T) {
	cases := map[string]struct {
		glob    routing.ExcludeGlob
		want    string
		matches []string
		misses  []string
	}{
		"a registry and everything below it": {
			glob:    routing.ExcludeGlob{Name: "docker.io/**"},
			want:    `docker[.]io(/[^/]+)+`,
			matches: []string{"docker.io/library/nginx", "docker.io/a/b/c"},
			misses:  []string{"docker.io", "docker.iox/a/b", "quay.io/docker.io/a"},
		},
		"a star stays within a segment": {
			glob:    routing.ExcludeGlob{Name: "quay.io/acme/foo*"},
			want:    `quay[.]io/acme/foo[^/]*`,
			matches: []string{"quay.io/acme/foo", "quay.io/acme/foo-bar"},
			misses:  []string{"quay.io/acme/foo/bar", "quay.io/acme/fo"},
		},
		"a doublestar in the middle is zero or more segments": {
			glob:    routing.ExcludeGlob{Name: "ghcr.io/**/app"},
			want:    `ghcr[.]io/([^/]+/)*app`,
			matches: []string{"ghcr.io/app", "ghcr.io/a/b/app"},
			misses:  []string{"ghcr.io/a/apps"},
		},
		"a doublestar within a segment is a star": {
			glob:    routing.ExcludeGlob{Name: "quay.io/**x"},
			want:    `quay[.]io/[^/]*x`,
			matches: []string{"quay.io/ax"},
			misses:  []string{"quay.io/a/x"},
		},
		"a leading doublestar": {
			glob:    routing.ExcludeGlob{Name: "**/nginx"},
			want:    `([^/]+/)*nginx`,
			matches: []string{"docker.io/library/nginx", "nginx"},
			misses:  []string{"docker.io/library/nginx2"},
		},
		"everything": {
			glob:    routing.ExcludeGlob{Name: "**"},
			want:    `[^/]+(/[^/]+)*`,
			matches: []string{"docker.io/library/nginx"},
		},
		"question marks": {
			glob:    routing.ExcludeGlob{Name: "docker.io/library/redi?"},
			want:    `docker[.]io/library/redi[^/]`,
			matches: []string{"docker.io/library/redis"},
			misses:  []string{"docker.io/library/redi", "docker.io/library/redis2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := excludeRegexp(tc.glob)
			if !ok || got != tc.want {
				t.Fatalf("excludeRegexp(%q) = %q, %v; want %q", tc.glob.Name, got, ok, tc.want)
			}
			re := regexp.MustCompile("^(" + got + ")$")
			for _, s := range tc.matches {
				if !re.MatchString(s) {
					t.Errorf("%q does not match %s", s, got)
				}
			}
			for _, s := range tc.misses {
				if re.MatchString(s) {
					t.Errorf("%q matches %s", s, got)
				}
			}
		})
	}
	for _, g := range []routing.ExcludeGlob{
		{Name: "docker.io/**", Tag: "debug", HasTag: true},
		{Name: "docker.io/**", Digest: "sha256:*", HasDigest: true},
		{Name: "docker.io/[ab]"},
		{Name: "docker.io/a***"},
	} {
		if re, ok := excludeRegexp(g); ok {
			t.Errorf("excludeRegexp(%+v) = %q, want none: it excludes some tags, digests or a class", g, re)
		}
	}
}

// The expression never matches a name the glob does not: a mirror is taken to cover an image
// unless it is excluded for sure. Random globs and names over a small alphabet, against
// doublestar itself.
func TestExcludeRegexpNeverMatchesMore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	globTokens := []string{"a", "b", ".", "-", "*", "**", "?", "/", "/**/", "/**", "**/"}
	nameTokens := []string{"a", "b", ".", "-", "/", "ab"}
	build := func(tokens []string, n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(tokens[rng.IntN(len(tokens))])
		}
		return b.String()
	}
	checked, matched := 0, 0
	for range 4000 {
		glob := build(globTokens, 1+rng.IntN(6))
		if !doublestar.ValidatePattern(glob) || strings.Contains(glob, "***") {
			continue
		}
		src, ok := excludeRegexp(routing.ExcludeGlob{Name: glob})
		if !ok {
			if !strings.Contains(glob, "//") && !strings.HasPrefix(glob, "/") && !strings.HasSuffix(glob, "/") {
				t.Fatalf("excludeRegexp(%q): not expressed", glob)
			}
			continue
		}
		re := regexp.MustCompile("^(" + src + ")$")
		for range 50 {
			name := build(nameTokens, 1+rng.IntN(7))
			checked++
			if !re.MatchString(name) {
				continue
			}
			matched++
			if ok, _ := doublestar.Match(glob, name); !ok {
				t.Fatalf("glob %q: %q matches %s but not the glob", glob, name, src)
			}
		}
	}
	if matched < checked/50 {
		t.Fatalf("only %d of %d pairs matched: the check proves little", matched, checked)
	}
	t.Logf("%d pairs, %d matched the expression and the glob", checked, matched)
}
