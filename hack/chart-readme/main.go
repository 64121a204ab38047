// Command chart-readme regenerates the values table of a chart's README.md from the comments
// of its values.yaml.
//
//	go run ./hack/chart-readme charts/kuik
//
// The rows are those of package chartvalues (one per "# --" comment). The table replaces what
// lies between the README's "<!-- values:begin -->" and "<!-- values:end -->" lines.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/enix/kuik/hack/internal/chartvalues"
)

const (
	beginMarker = "<!-- values:begin -->"
	endMarker   = "<!-- values:end -->"
)

func main() {
	check := flag.Bool("check", false, "fail if README.md is stale instead of rewriting it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: chart-readme [-check] CHART_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *check); err != nil {
		fmt.Fprintln(os.Stderr, "chart-readme:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	readmePath := filepath.Join(dir, "README.md")
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	out, err := Update(readme, values)
	if err != nil {
		return err
	}
	if bytes.Equal(out, readme) {
		return nil
	}
	if check {
		return fmt.Errorf("%s is stale: run make chart-readme", readmePath)
	}
	return os.WriteFile(readmePath, out, 0o644)
}

// Update returns readme with its values table regenerated from values.
func Update(readme, values []byte) ([]byte, error) {
	rows, err := chartvalues.Rows(values)
	if err != nil {
		return nil, err
	}
	s := string(readme)
	begin := strings.Index(s, beginMarker)
	end := strings.Index(s, endMarker)
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("README has no %q ... %q section", beginMarker, endMarker)
	}
	var b strings.Builder
	b.WriteString(s[:begin+len(beginMarker)])
	b.WriteString("\n")
	b.WriteString(chartvalues.Table(rows))
	b.WriteString(s[end:])
	return []byte(b.String()), nil
}
