package webhook

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/enix/kuik/internal/route"
)

// appendString writes a string as json.Marshal does, byte for byte, escapes and invalid UTF-8
// included: the patch is what controller-runtime would have encoded.
func TestAppendStringIsJSONMarshal(t *testing.T) {
	for _, s := range []string{
		"", "quay.io/acme/app:v1@sha256:0123", `{"c":"quay.io/acme/app:v1"}`, `say "hi"`, `back\slash`,
		"<script>&</script>", "tab\there", "\x00", "\x1f", "\x7f", "é", "\xff\xfe", "\xed\xa0\x80", "\u2028\u2029", "~/",
	} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got[1:], want)
		}
	}
}

// The patch compares kuik's records member by member in this order, removals then additions,
// each sorted, as the operations of a diff of the whole maps were.
func TestRecordKeysAreSorted(t *testing.T) {
	if !slices.IsSorted(route.RecordAnnotations[:]) || !slices.IsSorted(route.RecordLabels[:]) {
		t.Errorf("unsorted: %q, %q", route.RecordAnnotations, route.RecordLabels)
	}
}
