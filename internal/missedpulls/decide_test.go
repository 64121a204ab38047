package missedpulls_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/missedpulls"
)

func TestPodOfEvent(t *testing.T) {
	ev := func(mut func(*corev1.Event)) *corev1.Event {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "team", Name: "web.1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "team", Name: "web"},
			Reason:         missedpulls.ReasonFailed,
			Message:        `Failed to pull image "quay.io/acme/web:v1": rpc error: connection refused`,
		}
		if mut != nil {
			mut(e)
		}
		return e
	}
	web := types.NamespacedName{Namespace: "team", Name: "web"}
	tests := map[string]struct {
		ev   *corev1.Event
		want types.NamespacedName
		ok   bool
	}{
		"the kubelet's failed pull": {ev(nil), web, true},
		"the kubelet's back-off": {ev(func(e *corev1.Event) {
			e.Reason, e.Message = missedpulls.ReasonBackOff, `Back-off pulling image "quay.io/acme/web:v1"`
		}), web, true},
		"a restart back-off is no pull failure": {ev(func(e *corev1.Event) {
			e.Reason, e.Message = missedpulls.ReasonBackOff, "Back-off restarting failed container app in pod web"
		}), types.NamespacedName{}, false},
		"a failed start is no pull failure": {ev(func(e *corev1.Event) {
			e.Message = "Error: failed to create containerd task"
		}), types.NamespacedName{}, false},
		"another reason": {ev(func(e *corev1.Event) { e.Reason = "Pulling" }), types.NamespacedName{}, false},
		"not a pod":      {ev(func(e *corev1.Event) { e.InvolvedObject.Kind = "Node" }), types.NamespacedName{}, false},
		"a pod of another namespace is never looked for": {ev(func(e *corev1.Event) { e.InvolvedObject.Namespace = "victim" }), types.NamespacedName{}, false},
		"no namespace named: the event's":                {ev(func(e *corev1.Event) { e.InvolvedObject.Namespace = "" }), web, true},
		"nil":                                            {nil, types.NamespacedName{}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := missedpulls.PodOfEvent(tc.ev)
			if got != tc.want || ok != tc.ok {
				t.Errorf("PodOfEvent = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestFailingContainers(t *testing.T) {
	waiting := func(name, image, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	pod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init", Image: "quay.io/acme/init:v1"}},
				Containers:     []corev1.Container{{Name: "app", Image: "nginx"}, {Name: "side", Image: "quay.io/acme/side:v1"}},
			},
			Status: corev1.PodStatus{ContainerStatuses: statuses},
		}
	}
	tests := map[string]struct {
		pod  *corev1.Pod
		want map[string]string
	}{
		"ErrImagePull": {pod(waiting("side", "quay.io/acme/side:v1", "ErrImagePull")), map[string]string{"side": "quay.io/acme/side:v1"}},
		"ImagePullBackOff, the image as the kubelet normalizes it": {
			pod(waiting("app", "docker.io/library/nginx:latest", "ImagePullBackOff")), map[string]string{"app": "nginx"},
		},
		"an init container": {func() *corev1.Pod {
			p := pod()
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("init", "quay.io/acme/init:v1", "ErrImagePull")}
			return p
		}(), map[string]string{"init": "quay.io/acme/init:v1"}},
		"waiting for another reason":         {pod(waiting("side", "quay.io/acme/side:v1", "ContainerCreating")), nil},
		"running":                            {pod(corev1.ContainerStatus{Name: "side", Image: "quay.io/acme/side:v1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}), nil},
		"the spec changed since the failure": {pod(waiting("side", "quay.io/acme/side:v0", "ErrImagePull")), nil},
		"a status of no container":           {pod(waiting("ghost", "quay.io/acme/side:v1", "ErrImagePull")), nil},
		"no status (no kubelet said so)":     {pod(), nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, missedpulls.FailingContainers(tc.pod)); diff != "" {
				t.Errorf("FailingContainers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestControlled(t *testing.T) {
	tests := map[string]struct {
		refs []metav1.OwnerReference
		want bool
	}{
		"a ReplicaSet controls it": {[]metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", Controller: ptr.To(true)}}, true},
		"owned, not controlled":    {[]metav1.OwnerReference{{Kind: "ConfigMap", Name: "x"}, {Kind: "ReplicaSet", Name: "web-1", Controller: ptr.To(false)}}, false},
		"no owner":                 {nil, false},
		"a Node controls it":       {[]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", Controller: ptr.To(true)}}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := missedpulls.Controlled(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.refs}}); got != tc.want {
				t.Errorf("Controlled = %v, want %v", got, tc.want)
			}
		})
	}
}
