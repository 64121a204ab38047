package route

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// TestEncodeEntriesIsJSONMarshal: the records' encoder writes exactly what json.Marshal writes
// of the same map, for plain values (its own path) and for every character json.Marshal
// escapes (its fallback).
func TestEncodeEntriesIsJSONMarshal(t *testing.T) {
	alphabet := []string{"a", "Z", "0", "-", "_", ".", "/", ":", "@", " ", "~", "\"", "\\", "<", ">", "&", "\n", "\t", "\x00", "\x7f", "é", "\u2028", "\xff", "日本"}
	rnd := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		var b bytes.Buffer
		for range rnd.IntN(12) {
			if rnd.IntN(4) == 0 {
				b.WriteString(alphabet[rnd.IntN(len(alphabet))])
			} else {
				b.WriteString(alphabet[rnd.IntN(9)])
			}
		}
		return b.String()
	}
	cases := []map[string]string{
		{},
		{"app": "docker.io/library/nginx:1.27"},
		{"app": "ImageAlternative/acme", "sidecar": "ImageMirror/mirror", "init": "ClusterImageMirror/x"},
		{"": ""},
	}
	for range 5000 {
		m := map[string]string{}
		for range rnd.IntN(5) {
			m[word()] = word()
		}
		cases = append(cases, m)
	}
	plain := 0
	for _, m := range cases {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeEntries(entriesOf(m))
		if err != nil {
			t.Fatalf("encodeEntries(%q): %v", m, err)
		}
		if got != string(want) {
			t.Fatalf("encodeEntries(%q) = %s, json.Marshal = %s", m, got, want)
		}
		if bytes.IndexByte(want, '\\') < 0 && bytes.IndexByte(want, 0xef) < 0 {
			plain++
		}
	}
	if plain < len(cases)/10 {
		t.Fatalf("only %d of %d cases took the direct path", plain, len(cases))
	}
}

// readMap decodes exactly what json.Unmarshal does (nil for none, for JSON null and for what
// does not decode), whether a value takes its direct path (what encodeEntries writes directly)
// or json.Unmarshal, and readEntries gives the same, sorted; a fuzzed value too.
func FuzzReadMap(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `{"c":"quay.io/acme/app:v1"}`, `{"a":"1","b":"2","a":"3"}`, `{"a":"1",}`, `{"a":"1"}x`,
		`{"a":"1"}}`, `{ "a" : "1" }`, `{"a":"\"q\""}`, `{"a":"<&>"}`, `{"a":1}`, `{"a":"é"}`, "{\"a\":\"\xff\"}",
		`{"":""}`, `{"a":"1","b"}`, `{"a":"1","b":}`, `{"a""1"}`, `{"a":"1"`, `"x"`, `[]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var want map[string]string
		if v != "" {
			if err := json.Unmarshal([]byte(v), &want); err != nil {
				want = nil
			}
		}
		got := readMap(map[string]string{"k": v}, "k")
		if !reflect.DeepEqual(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("readMap(%q) = %#v, json.Unmarshal = %#v", v, got, want)
		}
		if es := readEntries(map[string]string{"k": v}, "k"); !reflect.DeepEqual(es, entriesOf(want)) {
			t.Fatalf("readEntries(%q) = %q, want %q", v, es, entriesOf(want))
		}
	})
}

// Every map encodeEntries writes reads back as it was, most of them by the direct path.
func TestReadMapReadsWhatEncodeEntriesWrites(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "Z", "0", "-", "_", ".", "/", ":", "@", " ", "~", "<", "&", "\"", "\\", "é", "\n"}
	word := func() string {
		var b bytes.Buffer
		for range rnd.IntN(12) {
			b.WriteString(alphabet[rnd.IntN(len(alphabet))])
		}
		return b.String()
	}
	direct := 0
	for range 5000 {
		m := map[string]string{}
		for range rnd.IntN(5) {
			m[word()] = word()
		}
		b, err := encodeEntries(entriesOf(m))
		if err != nil {
			t.Fatal(err)
		}
		if got := readMap(map[string]string{"k": b}, "k"); !reflect.DeepEqual(got, m) {
			t.Fatalf("readMap(%s) = %q, want %q", b, got, m)
		}
		if got := readEntries(map[string]string{"k": b}, "k"); !reflect.DeepEqual(got, entriesOf(m)) {
			t.Fatalf("readEntries(%s) = %q, want %q", b, got, entriesOf(m))
		}
		if _, ok := decodePlainEntries(b); ok {
			direct++
		}
	}
	if direct < 500 {
		t.Fatalf("only %d of 5000 maps took the direct path", direct)
	}
}

// entriesOf is m as entries, nil for nil.
func entriesOf(m map[string]string) entries {
	if m == nil {
		return nil
	}
	es := entries{}
	for k, v := range m {
		es = append(es, entry{k, v})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.container, b.container) })
	return es
}

// write puts each record on the pod as json.Marshal writes its map, the plain ones and the
// others together, and removes the empty ones.
func TestWriteGivesEachRecordJSONMarshalOfItsMap(t *testing.T) {
	for name, rec := range map[string]records{
		"plain":           {originals: entries{{"a", "quay.io/x:v1"}, {"b", "quay.io/y:v2"}}, rewrittenBy: entries{{"a", "ImageAlternative/x"}}, reasons: entries{{"a", "OnFailure"}, {"b", "NoAlternatives"}}},
		"one to escape":   {originals: entries{{"a", "quay.io/x:v1"}}, rewrittenBy: entries{{`a"<b>`, "ImageMirror/m"}}, reasons: entries{{"a", "Always"}}},
		"the first empty": {rewrittenBy: entries{{"a", "ImageAlternative/x"}}, reasons: entries{{"é", "OnFailure"}}},
		"none":            {},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{}
			pod.Annotations = map[string]string{v1alpha1.AnnotationOriginalImages: "stale", "other": "kept"}
			if err := rec.write(pod); err != nil {
				t.Fatal(err)
			}
			for key, es := range map[string]entries{v1alpha1.AnnotationOriginalImages: rec.originals, v1alpha1.AnnotationRewrittenBy: rec.rewrittenBy, v1alpha1.AnnotationReason: rec.reasons} {
				got, ok := pod.Annotations[key]
				if len(es) == 0 {
					if ok {
						t.Errorf("%s = %q, want none", key, got)
					}
					continue
				}
				m := map[string]string{}
				for _, e := range es {
					m[e.container] = e.value
				}
				want, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				if got != string(want) {
					t.Errorf("%s = %s, want %s", key, got, want)
				}
			}
			if pod.Annotations["other"] != "kept" {
				t.Errorf("another annotation changed: %q", pod.Annotations)
			}
		})
	}
}
