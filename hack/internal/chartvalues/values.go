// Package chartvalues reads the documented values of a chart's values.yaml, for the chart
// README's table (hack/chart-readme) and docs/reference/values.md (hack/docgen).
//
// A comment line starting with "# --" right above a key documents that key: it becomes one row
// (key path, type, default, description) and the keys below it are not listed separately. A
// mapping without such a comment is walked into. A leaf without one is an error, so every value
// is documented.
package chartvalues

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DocPrefix starts the comment line that documents a key.
const DocPrefix = "# --"

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
			*errs = append(*errs, fmt.Errorf("%s (line %d) has no %q comment", key, k.Line, DocPrefix))
		}
	}
}

// description returns the text of the "# --" comment block that ends a head comment (the
// lines from the last "# --" line on).
func description(head string) (string, bool) {
	lines := strings.Split(head, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), DocPrefix) {
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
			l = strings.TrimPrefix(l, DocPrefix)
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
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.Key, r.Type, Cell(r.Default), Cell(r.Description))
	}
	return b.String()
}

// Cell escapes s for a Markdown table cell.
func Cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
