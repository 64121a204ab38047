package main

import (
	"fmt"
	"strings"
)

// RefDir is where the pages go, from the repository's root.
const RefDir = "docs/reference"

// Page is one generated file of RefDir.
type Page struct {
	Name    string
	Content []byte
}

// generators make each page's body from the repository at root; source names what it reads.
var generators = []struct {
	name, title, source string
	body                func(root string) (string, error)
}{
	{"api.md", "API reference", "charts/kuik/crds", apiPage},
	{"values.md", "Chart values", "charts/kuik/values.yaml", valuesPage},
	{"flags.md", "Command-line flags", "cmd/webhook/app, cmd/secret-syncer/app and cmd/keeper/app", flagsPage},
	{"metrics.md", "Metrics", "internal/metrics and charts/kuik/files/dashboards", metricsPage},
}

// Pages renders every reference page from the repository at root.
func Pages(root string) ([]Page, error) {
	var out []Page
	for _, g := range generators {
		body, err := g.body(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.name, err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "_Generated from %s by `make docs` (hack/docgen): do not edit._\n\n# %s\n\n", g.source, g.title)
		b.WriteString(body)
		out = append(out, Page{Name: g.name, Content: []byte(b.String())})
	}
	return out, nil
}

// cell escapes s for a Markdown table cell, on one line.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// code is s as inline code in a table cell (a backtick in s widens the fence).
func code(s string) string {
	s = cell(s)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}
