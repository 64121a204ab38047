// Command docgen writes the reference pages of docs/reference from the code: api.md from the
// chart's CRDs, values.md from the comments of the chart's values.yaml, flags.md from the
// binaries' commands and metrics.md from the collectors of internal/metrics.
//
//	go run ./hack/docgen        # make docs
//	go run ./hack/docgen -check # fail when a page is stale
//
// It runs from the repository's root. TestReferenceIsCurrent fails when a committed page
// differs from what docgen writes.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	check := flag.Bool("check", false, "fail if a page is stale instead of rewriting it")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: docgen [-check] [-root DIR]")
		os.Exit(2)
	}
	// $POD_NAMESPACE is the default of --cluster-resource-namespace: the page shows the
	// built-in one.
	if err := os.Unsetenv("POD_NAMESPACE"); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	pages, err := Pages(root)
	if err != nil {
		return err
	}
	var stale []error
	for _, p := range pages {
		path := filepath.Join(root, RefDir, p.Name)
		old, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if bytes.Equal(old, p.Content) {
			continue
		}
		if check {
			stale = append(stale, fmt.Errorf("%s is stale: run make docs", filepath.Join(RefDir, p.Name)))
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, p.Content, 0o644); err != nil {
			return err
		}
	}
	return errors.Join(stale...)
}
