package chartvalues

import (
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
