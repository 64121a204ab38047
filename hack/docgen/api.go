package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// apiPage documents each CRD of the chart from its OpenAPI schema: what the API server enforces
// (types, required fields, bounds, CEL rules and their messages), with the descriptions
// controller-gen took from the Go types (cut at make manifests' maxDescLen).
func apiPage(root string) (string, error) {
	files, err := filepath.Glob(filepath.Join(root, "charts", "kuik", "crds", "*.yaml"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no CRD in %s", filepath.Join(root, "charts", "kuik", "crds"))
	}
	sort.Strings(files)
	var b strings.Builder
	b.WriteString("The custom resources kuik defines, from the CRDs `make manifests` generates from pkg/apis/kuik/v1alpha1.\n" +
		"The API server enforces every type, bound and rule listed here; an invalid object is refused with the rule's message.\n")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		if err := writeCRD(&b, &crd); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
	}
	return b.String(), nil
}

func writeCRD(b *strings.Builder, crd *apiextensionsv1.CustomResourceDefinition) error {
	n := crd.Spec.Names
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("version %s has no schema", v.Name)
		}
		s := v.Schema.OpenAPIV3Schema
		fmt.Fprintf(b, "\n## %s\n\n%s\n\n", n.Kind, oneLine(s.Description))
		b.WriteString("| | |\n|-|-|\n")
		fmt.Fprintf(b, "| API version | `%s/%s` |\n", crd.Spec.Group, v.Name)
		fmt.Fprintf(b, "| Scope | %s |\n", crd.Spec.Scope)
		fmt.Fprintf(b, "| Resource | `%s` |\n", n.Plural)
		if len(n.ShortNames) > 0 {
			fmt.Fprintf(b, "| Short names | %s |\n", codes(n.ShortNames))
		}
		if len(n.Categories) > 0 {
			fmt.Fprintf(b, "| Categories | %s |\n", codes(n.Categories))
		}
		if len(v.AdditionalPrinterColumns) > 0 {
			fmt.Fprintf(b, "\n### Columns of kubectl get\n\n| Column | JSONPath | Only with -o wide |\n|--------|----------|-------------------|\n")
			for _, c := range v.AdditionalPrinterColumns {
				wide := ""
				if c.Priority > 0 {
					wide = "yes"
				}
				fmt.Fprintf(b, "| %s | %s | %s |\n", c.Name, code(c.JSONPath), wide)
			}
		}
		var fields, rules []string
		for _, name := range sortedProps(s) {
			if name == "apiVersion" || name == "kind" || name == "metadata" {
				continue
			}
			walkSchema(name, s.Properties[name], slices.Contains(s.Required, name), &fields, &rules)
		}
		fmt.Fprintf(b, "\n### Fields\n\n| Field | Type | Required | Description |\n|-------|------|----------|-------------|\n")
		b.WriteString(strings.Join(fields, ""))
		if len(rules) > 0 {
			fmt.Fprintf(b, "\n### Validation rules\n\nCEL rules the API server checks, with the message it answers.\n\n| Field | Rule | Message |\n|-------|------|---------|\n")
			b.WriteString(strings.Join(rules, ""))
		}
	}
	return nil
}

// walkSchema adds the rows of the field at path and of the fields under it.
func walkSchema(path string, s apiextensionsv1.JSONSchemaProps, required bool, fields, rules *[]string) {
	req := ""
	if required {
		req = "yes"
	}
	*fields = append(*fields, fmt.Sprintf("| `%s` | %s | %s | %s |\n", path, typeOf(s), req, describeField(s)))
	for _, r := range s.XValidations {
		msg := r.Message
		if msg == "" && r.MessageExpression != "" {
			msg = "(expression) " + r.MessageExpression
		}
		*rules = append(*rules, fmt.Sprintf("| `%s` | %s | %s |\n", path, code(r.Rule), cell(msg)))
	}
	if known(s) != "" || s.Type == "array" && s.Items != nil && s.Items.Schema != nil && known(*s.Items.Schema) != "" {
		return
	}
	switch {
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		item := *s.Items.Schema
		// The rules of the items apply to each.
		for _, r := range item.XValidations {
			*rules = append(*rules, fmt.Sprintf("| `%s[]` | %s | %s |\n", path, code(r.Rule), cell(r.Message)))
		}
		for _, name := range sortedProps(&item) {
			walkSchema(path+"[]."+name, item.Properties[name], slices.Contains(item.Required, name), fields, rules)
		}
	default:
		for _, name := range sortedProps(&s) {
			walkSchema(path+"."+name, s.Properties[name], slices.Contains(s.Required, name), fields, rules)
		}
	}
}

func sortedProps(s *apiextensionsv1.JSONSchemaProps) []string {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// knownTypes are apimachinery's types controller-gen inlines, told by their fields: the page
// links them rather than listing their fields.
var knownTypes = []struct {
	name   string
	fields []string
}{
	{"LabelSelector", []string{"matchExpressions", "matchLabels"}},
	{"Condition", []string{"lastTransitionTime", "message", "observedGeneration", "reason", "status", "type"}},
}

// known is a link to the apimachinery type s is, "" for none.
func known(s apiextensionsv1.JSONSchemaProps) string {
	for _, k := range knownTypes {
		if s.Type == "object" && slices.Equal(sortedProps(&s), k.fields) {
			return "[" + k.name + "](https://pkg.go.dev/k8s.io/apimachinery/pkg/apis/meta/v1#" + k.name + ")"
		}
	}
	return ""
}

func typeOf(s apiextensionsv1.JSONSchemaProps) string {
	if k := known(s); k != "" {
		return k
	}
	switch {
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil && known(*s.Items.Schema) != "":
		return `\[\]` + known(*s.Items.Schema)
	case s.XIntOrString:
		return "int or string"
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		return "[]" + typeOf(*s.Items.Schema)
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return "map[string]" + typeOf(*s.AdditionalProperties.Schema)
	case s.Type == "string" && s.Format != "":
		return "string (" + s.Format + ")"
	}
	return s.Type
}

// describeField is the field's description followed by its schema's constraints.
func describeField(s apiextensionsv1.JSONSchemaProps) string {
	parts := []string{cell(s.Description)}
	if strings.HasSuffix(parts[0], "...") {
		parts = append(parts, "(The CRD cuts descriptions at 400 characters: the Go type has the rest.)")
	}
	if s.Default != nil {
		parts = append(parts, "Default: "+code(string(s.Default.Raw))+".")
	}
	if len(s.Enum) > 0 {
		var vs []string
		for _, e := range s.Enum {
			vs = append(vs, code(strings.Trim(string(e.Raw), `"`)))
		}
		parts = append(parts, "One of "+strings.Join(vs, ", ")+".")
	}
	bound := func(what string, lo, hi *int64) {
		switch {
		case lo != nil && hi != nil:
			parts = append(parts, fmt.Sprintf("%s %d to %d.", what, *lo, *hi))
		case lo != nil:
			parts = append(parts, fmt.Sprintf("%s at least %d.", what, *lo))
		case hi != nil:
			parts = append(parts, fmt.Sprintf("%s at most %d.", what, *hi))
		}
	}
	bound("Length", s.MinLength, s.MaxLength)
	bound("Items", s.MinItems, s.MaxItems)
	bound("Keys", s.MinProperties, s.MaxProperties)
	num := func(f *float64) string { return strconv.FormatFloat(*f, 'g', -1, 64) }
	switch {
	case s.Minimum != nil && s.Maximum != nil:
		parts = append(parts, "Value "+num(s.Minimum)+" to "+num(s.Maximum)+".")
	case s.Minimum != nil:
		parts = append(parts, "Value at least "+num(s.Minimum)+".")
	case s.Maximum != nil:
		parts = append(parts, "Value at most "+num(s.Maximum)+".")
	}
	if s.ExclusiveMinimum || s.ExclusiveMaximum {
		parts = append(parts, "Bounds excluded.")
	}
	if s.Pattern != "" {
		parts = append(parts, "Pattern "+code(s.Pattern)+".")
	}
	if s.XListType != nil {
		switch *s.XListType {
		case "set":
			parts = append(parts, "Items are unique.")
		case "map":
			parts = append(parts, "Items are unique by "+codes(s.XListMapKeys)+".")
		}
	}
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), " ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func codes(ss []string) string {
	var out []string
	for _, s := range ss {
		out = append(out, code(s))
	}
	return strings.Join(out, ", ")
}
