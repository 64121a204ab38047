package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRows(t *testing.T) {
	values := `# File header, not a description.

# -- Top-level string.
name: ""
group:
  # -- A nested list,
  # on two lines.
  list: [a]
  # -- A documented map is one row.
  map:
    inner: 1
# A plain comment above a walked-into map.
walked:
  # -- A bool.
  flag: true
`
	got, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Key: "name", Type: "string", Default: `""`, Description: "Top-level string."},
		{Key: "group.list", Type: "list", Default: `["a"]`, Description: "A nested list, on two lines."},
		{Key: "group.map", Type: "object", Default: `{"inner":1}`, Description: "A documented map is one row."},
		{Key: "walked.flag", Type: "bool", Default: "true", Description: "A bool."},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestUndocumentedValueIsAnError(t *testing.T) {
	_, err := Rows([]byte("# -- ok\na: 1\nb:\n  c: 2\n"))
	if err == nil || !strings.Contains(err.Error(), "b.c") {
		t.Errorf("error = %v, want one naming b.c", err)
	}
}

func TestUpdateReplacesOnlyTheTable(t *testing.T) {
	readme := "intro\n<!-- values:begin -->\nstale\n<!-- values:end -->\noutro\n"
	got, err := Update([]byte(readme), []byte("# -- A | pipe.\na: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "intro\n<!-- values:begin -->\n| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n| `a` | string | `\"x\"` | A \\| pipe. |\n<!-- values:end -->\noutro\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("README (-want +got):\n%s", diff)
	}
	if _, err := Update([]byte("no markers"), []byte("# -- a\na: 1\n")); err == nil {
		t.Error("a README without markers was accepted")
	}
}

// The chart's README is up to date with its values.yaml (make chart-readme).
func TestChartREADMEIsCurrent(t *testing.T) {
	dir := filepath.Join("..", "..", "charts", "kuik")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Update(readme, values)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(readme) {
		t.Error("charts/kuik/README.md is stale: run make chart-readme")
	}
}
