package missedpulls_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

func TestNeverRan(t *testing.T) {
	waiting := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingErrImagePull}}}
	pod := func(phase corev1.PodPhase, mut func(*corev1.PodStatus)) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{waiting}}}
		if mut != nil {
			mut(&p.Status)
		}
		return p
	}
	tests := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"Pending, pulling":        {pod(corev1.PodPending, nil), true},
		"Pending, no status yet":  {pod(corev1.PodPending, func(s *corev1.PodStatus) { s.ContainerStatuses = nil }), true},
		"Running":                 {pod(corev1.PodRunning, nil), false},
		"no phase":                {pod("", nil), false},
		"a container restarted":   {pod(corev1.PodPending, func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount = 1 }), false},
		"a container has started": {pod(corev1.PodPending, func(s *corev1.PodStatus) { s.ContainerStatuses[0].Started = ptr.To(true) }), false},
		"a last state": {pod(corev1.PodPending, func(s *corev1.PodStatus) {
			s.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
		}), false},
		"a sidecar running": {pod(corev1.PodPending, func(s *corev1.PodStatus) {
			s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
		}), false},
		"an init container completed": {pod(corev1.PodPending, func(s *corev1.PodStatus) {
			s.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}}
		}), false},
		"an ephemeral container ran: does not count": {pod(corev1.PodPending, func(s *corev1.PodStatus) {
			s.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debug", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		}), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := missedpulls.NeverRan(tc.pod); got != tc.want {
				t.Errorf("NeverRan = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestJobHasRetries(t *testing.T) {
	job := func(limit *int32, failed int32, mut func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{Spec: batchv1.JobSpec{BackoffLimit: limit}, Status: batchv1.JobStatus{Failed: failed}}
		if mut != nil {
			mut(j)
		}
		return j
	}
	tests := map[string]struct {
		job  *batchv1.Job
		want bool
	}{
		"backoffLimit 0: the first failure fails it": {job(ptr.To[int32](0), 0, nil), false},
		"failures left":                  {job(ptr.To[int32](2), 1, nil), true},
		"no failure left":                {job(ptr.To[int32](2), 2, nil), false},
		"the default limit, 6":           {job(nil, 5, nil), true},
		"the default limit, used up":     {job(nil, 6, nil), false},
		"a per-index limit: not counted": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To[int32](1) }), false},
		"complete": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}), false},
		"failing already": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}
		}), false},
		"a failure not counted yet takes the last retry": {job(ptr.To[int32](1), 0, func(j *batchv1.Job) {
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"sibling"}}
		}), false},
		"an uncounted failure leaves retries": {job(ptr.To[int32](2), 0, func(j *batchv1.Job) {
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"sibling"}}
		}), true},
		"a podFailurePolicy that fails the Job on a disruption": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionFailJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}}
		}), false},
		"a podFailurePolicy that only ignores disruptions": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}}
		}), true},
		"a condition not true": {job(ptr.To[int32](6), 0, func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}}
		}), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := missedpulls.JobHasRetries(tc.job); got != tc.want {
				t.Errorf("JobHasRetries = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOwnerKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		ref  metav1.OwnerReference
		want schema.GroupKind
	}{
		"a group":    {metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet"}, schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}},
		"core":       {metav1.OwnerReference{APIVersion: "v1", Kind: "ReplicationController"}, schema.GroupKind{Kind: "ReplicationController"}},
		"a CRD kind": {metav1.OwnerReference{APIVersion: "argoproj.io/v1alpha1", Kind: "Workflow"}, schema.GroupKind{Group: "argoproj.io", Kind: "Workflow"}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := missedpulls.OwnerKind(tc.ref); got != tc.want {
				t.Errorf("OwnerKind = %v, want %v", got, tc.want)
			}
			// Written as the flags and the policy write it, it parses back.
			if back, err := missedpulls.ParseOwner(tc.want.String()); err != nil || back != tc.want {
				t.Errorf("ParseOwner(%q) = %v, %v; want %v", tc.want.String(), back, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "apps/v1/replicasets", "Replica Set.apps"} {
		if _, err := missedpulls.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted", bad)
		}
	}
}
