package benchutil

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlainPod is a pod of a realistic size (~3 KiB: labels, a last-applied annotation, 20
// environment variables) with one container "app" of image; i varies its template hash.
func PlainPod(ns, name, image string, i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{"app": "bench", "pod-template-hash": strconv.Itoa(i % 97)},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1024)},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: image,
			Args:  []string{"--listen=:8080", "--log-level=info"},
		}}},
	}
	for j := range 20 {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%02d", j), Value: strings.Repeat("v", 40)})
	}
	return p
}
