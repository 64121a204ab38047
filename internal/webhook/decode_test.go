package webhook

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// FuzzDecodePod checks decodePod against json.Unmarshal of a whole corev1.Pod: whenever the
// whole pod decodes, decodePod does too and gives every field kuik reads the same value, nil
// and empty kept apart. (The converse does not hold: a pod whose other fields do not decode
// still decodes for kuik.)
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
		var whole corev1.Pod
		if err := json.Unmarshal(raw, &whole); err != nil {
			return
		}
		got, err := decodePod(raw)
		if err != nil {
			t.Fatalf("the whole pod decodes, what kuik reads does not: %v", err)
		}
		if diff := cmp.Diff(readFields(&whole), readFields(got)); diff != "" {
			t.Errorf("what kuik reads (-whole pod +decodePod):\n%s", diff)
		}
	})
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
