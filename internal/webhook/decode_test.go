package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// FuzzDecodePod checks decodePod against json.Unmarshal of a whole corev1.Pod: whenever the
// whole pod decodes, decodePod does too and gives every field kuik reads the same value, nil
// and empty kept apart. (The converse does not hold: a pod whose other fields do not decode
// still decodes for kuik.) And whenever decodeFields takes a pod, it decodes it exactly as
// json.Unmarshal does.
func FuzzDecodePod(f *testing.F) {
	for _, seed := range seedReviews(f) {
		if req, ok := decodeReview(seed); ok && len(req.Object.Raw) > 0 {
			f.Add(req.Object.Raw)
		}
	}
	for _, seed := range decodeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast podFields
		if decodeFields(raw, &fast) {
			if !json.Valid(raw) {
				t.Fatalf("decodeFields took what is not JSON: %q", raw)
			}
			var want podFields
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatalf("decodeFields took a pod json.Unmarshal refuses: %v", err)
			}
			if diff := cmp.Diff(want, fast, cmp.AllowUnexported(podFields{})); diff != "" {
				t.Errorf("decodeFields (-json.Unmarshal +decodeFields):\n%s", diff)
			}
		}
		var whole corev1.Pod
		if err := json.Unmarshal(raw, &whole); err != nil {
			return
		}
		var got corev1.Pod
		if err := decodePod(raw, &got); err != nil {
			t.Fatalf("the whole pod decodes, what kuik reads does not: %v", err)
		}
		if diff := cmp.Diff(readFields(&whole), readFields(&got)); diff != "" {
			t.Errorf("what kuik reads (-whole pod +decodePod):\n%s", diff)
		}
	})
}

// FuzzSkipIsJSONValid checks the walker's syntax check against encoding/json's: it skips a
// whole input exactly when json.Valid takes it.
func FuzzSkipIsJSONValid(f *testing.F) {
	for _, seed := range append(append([]string{}, syntaxSeeds...), decodeSeeds...) {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		w := walker{b: raw}
		if got, want := w.whole(w.skip), json.Valid(raw); got != want {
			t.Fatalf("the walker skips %q: %t, json.Valid: %t", raw, got, want)
		}
	})
}

// syntaxSeeds are JSON and near-JSON corners of the syntax check.
var syntaxSeeds = []string{
	``, ` `, `{}`, `[]`, `{ }`, `[ ]`, `""`, `"\u00e9\/\b\f\n\r\t\"\\"`, `"\u00g0"`, `"\u00"`, `"\x"`, `"\`, `"a` + "\x01" + `"`, `"a` + "\x7f\xff" + `"`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e+07`, `-01.0`, `1.0e5x`,
	`true`, `false`, `null`, `tru`, `nulls`, `True`, `true false`, `{"a":1,}`, `[1,]`, `[,1]`, `{,"a":1}`, `{"a":1 "b":2}`, `{"a" 1}`,
	`{"a":{"b":[1,{"c":null}],"d":"e"}}`, `[[[]]]`, `[[[]]`, `[]]`, `{"a":[}`, `{"a"}`, `{1:2}`, `{"a":1}x`, "{\"a\":1}\x00", "\t{\"a\" :\n[ 1 , 2 ]\r}",
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, `{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
}

// decodeSeeds are the JSON corners decodePod must decode as json.Unmarshal does.
var decodeSeeds = []string{
	`{"metadata":{"labels":{"a":"1"},"labels":{"b":"2"}},"spec":{"containers":[{"name":"c","image":"x"}],"containers":[{"image":"y"}]}}`,
	`{"metadata":{"labels":null,"annotations":{}},"spec":{"containers":[],"imagePullSecrets":null}}`,
	`{"Metadata":{"NAMESPACE":"ns","Labels":{"a":"b"}},"SPEC":{"Containers":[{"NAME":"c","Image":"x"}],"initcontainers":[{"name":"i","image":"y"}]}}`,
	`{"metadata":{"annotations":{"k":"v"},"annotations":null},"spec":{"ephemeralContainers":[{"name":"e","image":"z","targetContainerName":"c"}],"imagePullSecrets":[{"name":"s"},{}]}}`,
	`{"spec":{"containers":[{"name":"c","image":"x","resources":{"limits":{"cpu":"1"}},"env":[{"name":"A","value":"b"}]}],"nodeName":"n"},"status":{"phase":"Pending"}}`,
	`{"metadata":{"name":"\u00e9\ud800","labels":{"\u212aey":"v"}},"spec":{"containers":[{"name":"c\u0000","image":"quay.io/acme/app:v1"}]}}`,
	`{"metadata":null,"spec":null}`,
	`null`,
	`{"spec":{"containers":[{"name":"c","image":1}]}}`,
	`{"spec":{"nodeName":1,"containers":[{"name":"c","image":"quay.io/acme/app:v1"}]}}`,
	// Read by decodeFields: spaces, escapes, UTF-8 (valid or not), values it skips holding
	// brackets and quotes, numbers and literals, a key written with an escape.
	"{ \"metadata\" : { \"annotations\" : { \"a\" : \"{\\\"x\\\":[1,{}]}\", \"b\":\"\u00e9\u003c\", \"c\":\"é\xff\" } ,\n\"labels\":{\"app\":\"x\",\"app\":\"y\"}},\n \"spec\":{\"nodeSelector\":{\"k\":\"}]\\\"\"},\"priority\":-1.5e3,\"hostNetwork\":true,\"x\":[[],[{}],null],\"containers\":[{\"name\":\"c\",\"ports\":[{\"containerPort\":80}],\"im\\u0061ge\":\"quay.io/acme/app:v1\"}],\"imagePullSecrets\":[{\"name\":\"s\"}]}}",
	`{"metadata":{"labels":{}},"spec":{"containers":[],"initContainers":[{}],"imagePullSecrets":[]}}`,
	`{"spec":{"containers":[{"name":"c","name":"d"}]}}`,
	`{"spec":{"containers":[{"name":"c","Image":"x"}]}}`,
	`{"metadata":{"labels":{"a":null}}}`,
}

// The pods the API server sends, and the corners above that decodeFields reads, take its
// path, not json.Unmarshal's.
func TestDecodeFieldsReadsWhatTheAPIServerWrites(t *testing.T) {
	var pods [][]byte
	for _, seed := range seedReviews(t) {
		if req, ok := decodeReview(seed); ok && req.Kind.Kind == "Pod" {
			pods = append(pods, req.Object.Raw)
		}
	}
	pods = append(pods, []byte(decodeSeeds[10]), []byte(decodeSeeds[11]))
	for _, raw := range pods {
		var f podFields
		if !json.Valid(raw) || !decodeFields(raw, &f) {
			t.Errorf("decodeFields left %s to json.Unmarshal", raw)
		}
	}
}

// read is what kuik reads of a pod.
type read struct {
	Namespace                            string
	Labels, Annotations                  map[string]string
	Init, Containers, Ephemeral          [][2]string
	InitNil, ContainersNil, EphemeralNil bool
	PullSecrets                          []corev1.LocalObjectReference
	PullSecretsNil                       bool
}

func readFields(p *corev1.Pod) read {
	r := read{
		Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations,
		InitNil: p.Spec.InitContainers == nil, ContainersNil: p.Spec.Containers == nil, EphemeralNil: p.Spec.EphemeralContainers == nil,
		PullSecrets: p.Spec.ImagePullSecrets, PullSecretsNil: p.Spec.ImagePullSecrets == nil,
	}
	for _, c := range p.Spec.InitContainers {
		r.Init = append(r.Init, [2]string{c.Name, c.Image})
	}
	for _, c := range p.Spec.Containers {
		r.Containers = append(r.Containers, [2]string{c.Name, c.Image})
	}
	for _, c := range p.Spec.EphemeralContainers {
		r.Ephemeral = append(r.Ephemeral, [2]string{c.Name, c.Image})
	}
	return r
}
