package routing

import (
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/distribution/reference"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const fuzzDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fuzzIndex covers every way a candidate is built: exact entries, groups on a path, on Docker
// Hub and on a bare host, and mirrors with and without exclusions.
func fuzzIndex(f *testing.F) *Index {
	ix, errs := NewIndex([]v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("exact").Repository("nginx").Repository("mirror.local/nginx").Build(),
		testutil.NewImageAlternative("hub").Policy(v1alpha1.RewritePolicyAlways).Group("library/").Group("registry.local/hub/").Build(),
		testutil.NewImageAlternative("quay").Group("quay.io/").Group("registry.local/quay/").Unavailable().Group("localhost:5000/q").Build(),
	}, []v1alpha1.ImageMirror{
		testutil.NewImageMirror("cache", "mirror.tld/cache/").Policy(v1alpha1.RewritePolicyAlways).Exclude("ghcr.io/**").Build(),
		testutil.NewImageMirror("backup", "backup.tld").Build(),
	})
	if len(errs) > 0 {
		f.Fatalf("NewIndex: %v", errs)
	}
	return ix
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"nginx", "nginx:1.25", "nginx@" + fuzzDigest, "nginx:1@" + fuzzDigest,
		"docker.io/nginx", "index.docker.io/library/nginx", "someone/app", "quay.io/foo",
		"quay.io/acme/foo/bar:v1", "localhost/foo", "localhost:5000/foo", "[::1]:5000/foo",
		"Registry.Local/foo", "registry.local:5000/a/b/c:v1", "ghcr.io/org/x",
		"mirror.tld/cache/docker.io/library/nginx:latest", "quay.io/" + strings.Repeat("a", 251),
		"quay.io/" + strings.Repeat("a", 250), "a:b:c", "", "UPPER", "foo@sha256:short",
	} {
		f.Add(s)
	}
	ix := fuzzIndex(f)
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Normalize(s)
		cands, cerr := ix.Candidates(s, nil, nil)
		if err != nil {
			if cerr == nil {
				t.Fatalf("Normalize(%q) failed (%v) but Candidates did not", s, err)
			}
			return
		}
		if cerr != nil {
			t.Fatalf("Normalize(%q) = %q but Candidates failed: %v", s, n, cerr)
		}
		if _, err := reference.ParseNamed(n); err != nil {
			t.Fatalf("Normalize(%q) = %q, not canonical: %v", s, n, err)
		}
		if again, err := Normalize(n); err != nil || again != n {
			t.Fatalf("Normalize(%q) = %q, %v; want it unchanged", n, again, err)
		}
		img, _ := parseImage(s)
		if img.name+img.suffix != n {
			t.Fatalf("parseImage(%q) splits %q into %q and %q", s, n, img.name, img.suffix)
		}
		seen := map[candidateKey]bool{}
		for _, c := range cands {
			if _, err := reference.ParseNamed(c.Reference); err != nil {
				t.Fatalf("candidate %q of %q (%s) is not a canonical reference: %v", c.Reference, s, c.Source, err)
			}
			if !strings.HasSuffix(c.Reference, img.suffix) {
				t.Fatalf("candidate %q of %q lost the tag or digest %q", c.Reference, n, img.suffix)
			}
			if c.Source.IsOriginal() && c.Reference != n {
				t.Fatalf("original candidate %q of %q", c.Reference, n)
			}
			k := candidateKey{reference: c.Reference, cred: credentialOf(c.Auth)}
			if seen[k] {
				t.Fatalf("candidate %q listed twice for %q", c.Reference, n)
			}
			seen[k] = true
		}
	})
}

func FuzzExcludeGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"ghcr.io/huge/**", "ghcr.io/huge/a/b:v1"},
		{"ghcr.io/huge/*", "ghcr.io/huge/a"},
		{"nginx", "nginx:1.25"},
		{"nginx:1.*", "docker.io/library/nginx:1.25"},
		{"bitnami/**", "bitnami/redis@" + fuzzDigest},
		{"registry.local:5000/**", "registry.local:5000/foo:v1"},
		{"quay.io/acme/foo@sha256:*", "quay.io/acme/foo:v1@" + fuzzDigest},
		{"**:latest", "redis"},
		{"*/library/*", "redis"},
		{"ghcr.io/[abc", "ghcr.io/a"},
		{"ghcr.io/{a,b}", "ghcr.io/a"},
		{"***", "x"},
		{"a:", "a"},
		{"@", "a"},
		{"\\", "a"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, glob, image string) {
		g, err := compileGlob(glob)
		if glob != "" && len(glob) <= maxGlobLen {
			errs := ValidateImageMirror(ptrTo(testutil.NewImageMirror("m", "registry.tld/").Exclude(glob).Build()))
			if (len(errs) == 0) != (err == nil) {
				t.Fatalf("compileGlob(%q) error %v, but validation says %v", glob, err, errs)
			}
		}
		if err != nil {
			return
		}
		for _, part := range []string{g.name, g.tag, g.digest} {
			if !doublestar.ValidatePattern(part) {
				t.Fatalf("compileGlob(%q) made the invalid pattern %q", glob, part)
			}
		}
		img, err := parseImage(image)
		if err != nil {
			return
		}
		matched := g.matches(&img)
		if !g.hasTag && !g.hasDigest {
			bare := imageRef{full: img.name, name: img.name, domain: img.domain}
			if g.matches(&bare) != matched {
				t.Fatalf("%q names no tag nor digest but matching %q depends on them", glob, img.full)
			}
		}
		everything, _ := compileGlob("**")
		if !everything.matches(&img) {
			t.Fatalf("** does not match %q", img.full)
		}
		// A glob spelled like the image names the same repository, short names included.
		if !strings.ContainsAny(image, "*?[]{}\\") && len(checkGlob(image)) == 0 {
			literal, err := compileGlob(image)
			if err != nil {
				t.Fatal(err)
			}
			if !literal.matches(&img) {
				t.Fatalf("the glob %q (%q) does not match the image it spells (%q)", image, literal.name, img.full)
			}
		}
	})
}

func ptrTo[T any](v T) *T { return &v }
