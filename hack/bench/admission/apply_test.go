package main

import (
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/enix/kuik/internal/benchutil"
)

// BenchmarkAPIServerAppliesPatch is what kube-apiserver does with a mutating webhook's JSON
// patch to the campaign's pod, with the libraries it uses: decode the patch, encode the pod,
// apply, decode the result, compare it with the pod. Kuik's patch of the rewritten scenario
// against the image op alone and the image op with the label: the cost is touching metadata,
// not the number of ops.
func BenchmarkAPIServerAppliesPatch(b *testing.B) {
	image := `{"op":"replace","path":"/spec/containers/0/image","value":"127.0.0.1:40633/acme/app:v1"}`
	label := `{"op":"add","path":"/metadata/labels/kuik.enix.io~1rewritten","value":"true"}`
	records := `{"op":"add","path":"/metadata/annotations/kuik.enix.io~1original-images","value":"{\"app\":\"127.0.0.1:38149/acme/app:v1\"}"},` +
		`{"op":"add","path":"/metadata/annotations/kuik.enix.io~1reason","value":"{\"app\":\"OnFailure\"}"},` +
		`{"op":"add","path":"/metadata/annotations/kuik.enix.io~1rewritten-by","value":"{\"app\":\"ImageAlternative/rewritten\"}"}`
	for name, ops := range map[string][]string{
		"image":           {image},
		"image and label": {image, label},
		"kuik's 5 ops":    {image, records, label},
	} {
		b.Run(name, func(b *testing.B) {
			patch := []byte("[" + strings.Join(ops, ",") + "]")
			s := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
			pod := benchutil.PlainPod("bench-2", "r1-00000", "127.0.0.1:38149/acme/app:v1", 0)
			pod.APIVersion, pod.Kind = "v1", "Pod"
			b.ReportAllocs()
			for b.Loop() {
				p, err := jsonpatch.DecodePatch(patch)
				if err != nil {
					b.Fatal(err)
				}
				js, err := runtime.Encode(s, pod)
				if err != nil {
					b.Fatal(err)
				}
				if js, err = p.Apply(js); err != nil {
					b.Fatal(err)
				}
				patched := &corev1.Pod{}
				if _, _, err := s.Decode(js, nil, patched); err != nil {
					b.Fatal(err)
				}
				if equality.Semantic.DeepEqual(pod, patched) {
					b.Fatal("the patch changed nothing")
				}
			}
		})
	}
}
