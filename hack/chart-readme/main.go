// Command chart-readme regenerates the values table of a chart's README.md from the comments
// of its values.yaml.
//
//	go run ./hack/chart-readme charts/kuik
//
// A comment line starting with "# --" right above a key documents that key: it becomes one row
// (key path, type, default, description) and the keys below it are not listed separately. A
// mapping without such a comment is walked into. A leaf without one is an error, so every value
// is documented. The table replaces what lies between the README's
// "<!-- values:begin -->" and "<!-- values:end -->" lines.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	beginMarker = "<!-- values:begin -->"
	endMarker   = "<!-- values:end -->"
	docPrefix   = "# --"
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
	rows, err := Rows(values)
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
	b.WriteString(Table(rows))
	b.WriteString(s[end:])
	return []byte(b.String()), nil
}

// Row documents one value.
type Row struct {
	Key, Type, Default, Description string
}

// Rows walks values.yaml and returns one row per documented key, in file order.
func Rows(values []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("parsing values.yaml: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml is not a mapping")
	}
	var rows []Row
	var errs []error
	walk(doc.Content[0], "", &rows, &errs)
	return rows, errors.Join(errs...)
}

func walk(m *yaml.Node, prefix string, rows *[]Row, errs *[]error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		desc, ok := description(k.HeadComment)
		switch {
		case ok:
			def, err := defaultOf(v)
			if err != nil {
				*errs = append(*errs, fmt.Errorf("%s: %w", key, err))
				continue
			}
			*rows = append(*rows, Row{Key: key, Type: typeOf(v), Default: def, Description: desc})
		case v.Kind == yaml.MappingNode && len(v.Content) > 0:
			walk(v, key+".", rows, errs)
		default:
			*errs = append(*errs, fmt.Errorf("%s (line %d) has no %q comment", key, k.Line, docPrefix))
		}
	}
}

// description returns the text of the "# --" comment block that ends a head comment (the
// lines from the last "# --" line on).
func description(head string) (string, bool) {
	lines := strings.Split(head, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), docPrefix) {
			start = i
		}
	}
	if start < 0 {
		return "", false
	}
	var parts []string
	for i, l := range lines[start:] {
		l = strings.TrimSpace(l)
		if i == 0 {
			l = strings.TrimPrefix(l, docPrefix)
		} else {
			l = strings.TrimPrefix(l, "#")
		}
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " "), len(parts) > 0
}

func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch v.ShortTag() {
		case "!!int":
			return "int"
		case "!!float":
			return "float"
		case "!!bool":
			return "bool"
		case "!!null":
			return "null"
		}
		return "string"
	}
	return "unknown"
}

func defaultOf(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Table renders rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|-----|------|---------|-------------|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.Key, r.Type, cell(r.Default), cell(r.Description))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
