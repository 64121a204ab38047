package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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
