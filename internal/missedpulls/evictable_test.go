package missedpulls_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// One case per rule of Evictable; policies/pod_deletes_cases_test.go holds the table that also
// runs the pod-deletes policies on an API server.
func TestEvictable(t *testing.T) {
	stuck := func(mut func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "1", Controller: ptr.To(true)},
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Image: "docker.io/library/nginx:latest",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingErrImagePull}},
			}}},
		}
		if mut != nil {
			mut(p)
		}
		return p
	}
	owners := append(slices.Clone(missedpulls.DefaultRecreateOwners), missedpulls.JobKind)
	excluded := map[string]bool{"kube-system": true}
	tests := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"stuck, a ReplicaSet's": {stuck(nil), true},
		"a Job's": {stuck(func(p *corev1.Pod) {
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "batch/v1", "Job"
		}), true},
		"a ReplicationController's": {stuck(func(p *corev1.Pod) {
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "v1", "ReplicationController"
		}), false},
		"no controller":  {stuck(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), false},
		"a mirror pod":   {stuck(func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }), false},
		"being deleted":  {stuck(func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }), false},
		"skipped":        {stuck(func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.LabelSkip: "true"} }), false},
		"in kube-system": {stuck(func(p *corev1.Pod) { p.Namespace = "kube-system" }), false},
		"Running":        {stuck(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), false},
		"ran before":     {stuck(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 }), false},
		"another image":  {stuck(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Image = "quay.io/acme/web:v1" }), false},
		"only an ephemeral container fails": {stuck(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "nginx"}}}
			p.Status.EphemeralContainerStatuses = p.Status.ContainerStatuses
			p.Status.EphemeralContainerStatuses[0].Name = "debug"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "nginx"}}
		}), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := missedpulls.Evictable(tc.pod, owners, excluded); got != tc.want {
				t.Errorf("Evictable = %v, want %v", got, tc.want)
			}
		})
	}
}
