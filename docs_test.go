// Package docs_test checks that the repository's Markdown pages link to files and headings that
// exist, and that docs/architecture.md's package map is the real import graph.
package docs_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	linkText   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// TestRelativeLinksResolve fails for a relative link to a missing file, or to a heading that the
// target page does not have (GitHub's anchors: lower case, spaces to '-', punctuation dropped).
func TestRelativeLinksResolve(t *testing.T) {
	var pages []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == ".git" || path == "_output" || path == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := headingAnchors(read(t, page))
		anchors[page] = a
		return a
	}
	for _, page := range pages {
		text := inlineCode.ReplaceAllString(fence.ReplaceAllString(read(t, page), ""), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if scheme.MatchString(target) {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no file %s", page, target, dest)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with that anchor", page, target, dest)
			}
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// headingAnchors returns the anchors GitHub gives the headings of a page; a repeated heading gets
// "-1", "-2"… after the first.
func headingAnchors(page string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(page, ""), -1) {
		slug := slugify(linkText.ReplaceAllString(m[1], "$1"))
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlugify(t *testing.T) {
	for in, want := range map[string]string{
		"Who may call the webhook":                            "who-may-call-the-webhook",
		"5. Who may spread the credential":                    "5-who-may-spread-the-credential",
		"A pod's first OnFailure pull may precede its Secret": "a-pods-first-onfailure-pull-may-precede-its-secret",
		"Symptom → check → fix":                               "symptom--check--fix",
		"`kuik-inject-*` Secrets":                             "kuik-inject--secrets",
	} {
		if got := slugify(in); got != want {
			t.Errorf("slugify(%q) = %q, want %q", in, got, want)
		}
	}
}

var (
	mermaidNode = regexp.MustCompile(`(\w+)\[([^\]]+)\]`)
	mermaidEdge = regexp.MustCompile(`(?m)^\s*(\w+)(?:\[[^\]]*\])?\s*-->\s*(\w+)`)
)

// TestPackageMapIsTheImportGraph fails when the package map of docs/architecture.md and the real
// imports differ: among the packages it draws, each arrow must be a direct import and each
// direct import an arrow.
func TestPackageMapIsTheImportGraph(t *testing.T) {
	page := read(t, "docs/architecture.md")
	_, after, ok := strings.Cut(page, "## Package map")
	if !ok {
		t.Fatal("docs/architecture.md has no Package map section")
	}
	_, block, ok := strings.Cut(after, "```mermaid\n")
	if !ok {
		t.Fatal("the Package map section has no mermaid block")
	}
	block, _, _ = strings.Cut(block, "```")
	pkgOf := map[string]string{}
	for _, m := range mermaidNode.FindAllStringSubmatch(block, -1) {
		if strings.Contains(m[2], "/") {
			pkgOf[m[1]] = m[2]
		}
	}
	drawn := map[[2]string]bool{}
	for _, m := range mermaidEdge.FindAllStringSubmatch(block, -1) {
		from, to := pkgOf[m[1]], pkgOf[m[2]]
		if from == "" || to == "" {
			t.Fatalf("arrow %s --> %s: a node without a package path", m[1], m[2])
		}
		drawn[[2]string{from, to}] = true
	}
	const module = "github.com/enix/kuik/"
	args := []string{"list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}
	for _, p := range pkgOf {
		args = append(args, "./"+p)
	}
	out, err := exec.CommandContext(t.Context(), "go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	shown := map[string]bool{}
	for _, p := range pkgOf {
		shown[p] = true
	}
	real := map[[2]string]bool{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		from := strings.TrimPrefix(fields[0], module)
		for _, imp := range fields[1:] {
			if to := strings.TrimPrefix(imp, module); shown[to] {
				real[[2]string{from, to}] = true
			}
		}
	}
	for e := range real {
		if !drawn[e] {
			t.Errorf("%s imports %s: docs/architecture.md's package map has no arrow for it", e[0], e[1])
		}
	}
	for e := range drawn {
		if !real[e] {
			t.Errorf("docs/architecture.md's package map draws %s --> %s, which is no import", e[0], e[1])
		}
	}
}
