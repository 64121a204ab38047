package route

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestEncodeMapIsJSONMarshal: the records' encoder writes exactly what json.Marshal writes, for
// plain values (its own path) and for every character json.Marshal escapes (its fallback).
func TestEncodeMapIsJSONMarshal(t *testing.T) {
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
		got, err := encodeMap(m)
		if err != nil {
			t.Fatalf("encodeMap(%q): %v", m, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeMap(%q) = %s, json.Marshal = %s", m, got, want)
		}
		if bytes.IndexByte(want, '\\') < 0 && bytes.IndexByte(want, 0xef) < 0 {
			plain++
		}
	}
	if plain < len(cases)/10 {
		t.Fatalf("only %d of %d cases took the direct path", plain, len(cases))
	}
}
