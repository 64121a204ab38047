package testutil

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// FatPod adds to p what any pod author may add to make kuik hold memory: ~2,000 labels, a
// 250 KiB kuik.enix.io/ annotation, a container with a 512 KiB image, and a nodeSelector
// nothing matches, so it costs no node. The API server admits such a pod at ~800 KiB. p must
// have labels and annotations already.
func FatPod(p *corev1.Pod) *corev1.Pod {
	for i := range 2000 {
		p.Labels[fmt.Sprintf("tenant.example/l-%04d", i)] = strings.Repeat("v", 40)
	}
	p.Annotations["kuik.enix.io/notes"] = strings.Repeat("n", 250<<10)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "fat", Image: "registry.example/" + strings.Repeat("x", 512<<10)})
	p.Spec.NodeSelector = map[string]string{"kuik.example/nothing": "matches"}
	return p
}
