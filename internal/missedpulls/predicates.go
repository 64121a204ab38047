package missedpulls

import (
	"fmt"
	"regexp"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The kubelet's reasons for image-pull failure events (pkg/kubelet/events: FailedToPullImage,
// BackOffPullImage), each watched with its own field selector. The same reasons name other
// failures too (a container that fails to start, a restart back-off): pullMessage tells.
const (
	ReasonFailed  = "Failed"
	ReasonBackOff = "BackOff"
)

// The waiting reasons the kubelet writes in a container's status when it cannot pull its image.
const (
	WaitingErrImagePull     = "ErrImagePull"
	WaitingImagePullBackOff = "ImagePullBackOff"
)

// pullMessage matches the kubelet's messages `Failed to pull image "…": …` and
// `Back-off pulling image "…"`: a cheap filter, the pod's status decides.
var pullMessage = regexp.MustCompile(`(?i)\bpull(ing)? image "`)

// PodOfEvent is the pod an event asks to look at, or false when the event is not the kubelet's
// kind of image-pull failure. The pod is looked for in the event's own namespace (where its
// author was allowed to write), never in another one the event names.
func PodOfEvent(ev *corev1.Event) (types.NamespacedName, bool) {
	if ev == nil || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name == "" || ev.Namespace == "" {
		return types.NamespacedName{}, false
	}
	if ev.InvolvedObject.Namespace != "" && ev.InvolvedObject.Namespace != ev.Namespace {
		return types.NamespacedName{}, false
	}
	if ev.Reason != ReasonFailed && ev.Reason != ReasonBackOff {
		return types.NamespacedName{}, false
	}
	if !pullMessage.MatchString(ev.Message) {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ev.Namespace, Name: ev.InvolvedObject.Name}, true
}

// FailingContainers returns, by container name, the image of each container of the pod that the
// kubelet reports failing to pull: its status is waiting in ErrImagePull or ImagePullBackOff and
// names the image the pod's spec names now (a spec changed since is not what failed). Status is
// written by the kubelet, never by the pod's author.
func FailingContainers(pod *corev1.Pod) map[string]string {
	specs := map[string]string{}
	for _, c := range pod.Spec.InitContainers {
		specs[c.Name] = c.Image
	}
	for _, c := range pod.Spec.Containers {
		specs[c.Name] = c.Image
	}
	for _, c := range pod.Spec.EphemeralContainers {
		specs[c.Name] = c.Image
	}
	var out map[string]string
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range statuses {
			w := st.State.Waiting
			if w == nil || (w.Reason != WaitingErrImagePull && w.Reason != WaitingImagePullBackOff) {
				continue
			}
			image, ok := specs[st.Name]
			if !ok || image == "" || !sameImage(st.Image, image) {
				continue
			}
			if out == nil {
				out = map[string]string{}
			}
			out[st.Name] = image
		}
	}
	return out
}

// sameImage compares a status image with a spec image: equal, or equal once normalized (the
// kubelet may report `nginx` as `docker.io/library/nginx:latest`).
func sameImage(status, spec string) bool {
	if status == spec {
		return true
	}
	a, err := routing.Normalize(status)
	if err != nil {
		return false
	}
	b, err := routing.Normalize(spec)
	return err == nil && a == b
}

// Controlled reports whether a controller owns the pod (an ownerReference with controller:
// true), the only pods that come back when deleted. A mirror pod (annotation
// kubernetes.io/config.mirror, its Node as controller) does not count: the kubelet recreates
// it from its static manifest, which the webhook never changes, so deleting it routes nothing
// and it would be deleted again every stuck age; nor does any pod whose controller is a Node,
// which recreates no pod.
func Controlled(pod *corev1.Pod) bool {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return r.APIVersion != "v1" || r.Kind != "Node"
		}
	}
	return false
}

// Ephemeral reports whether the pod's container of that name is an ephemeral one.
func Ephemeral(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// controllerUID is the UID of the pod's controller ("" for none).
func controllerUID(pod *corev1.Pod) types.UID {
	if r := ControllerOf(pod); r != nil {
		return r.UID
	}
	return ""
}

// ControllerOf is the pod's controller reference (the ownerReference with controller: true),
// nil when no controller owns it.
func ControllerOf(pod *corev1.Pod) *metav1.OwnerReference {
	for i, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return &pod.OwnerReferences[i]
		}
	}
	return nil
}

// OwnerKind is the group and kind an ownerReference names (its apiVersion's version left out).
func OwnerKind(r metav1.OwnerReference) schema.GroupKind {
	group, _, _ := strings.Cut(r.APIVersion, "/")
	if !strings.Contains(r.APIVersion, "/") {
		group = "" // the core group: apiVersion "v1"
	}
	return schema.GroupKind{Group: group, Kind: r.Kind}
}

// JobKind is a Job's group and kind: its pods are recreated only with Options.RecreateJobs and
// while it has retries left ([JobHasRetries]).
var JobKind = schema.GroupKind{Group: "batch", Kind: "Job"}

// DefaultRecreateOwners are the controllers whose pods are recreated by default: they recreate
// a deleted pod from their template, whatever happened to it. A Job counts a deleted pod as a
// failure (see Options.RecreateJobs); Argo Workflows, Tekton, Spark or KubeVirt mark their run
// failed.
var DefaultRecreateOwners = []schema.GroupKind{
	{Group: "apps", Kind: "ReplicaSet"},
	{Group: "apps", Kind: "StatefulSet"},
	{Group: "apps", Kind: "DaemonSet"},
}

// ParseOwner parses an owner kind written Kind.group (ReplicaSet.apps; a kind of the core
// group alone: ReplicationController), as kubectl writes a resource of a group.
func ParseOwner(s string) (schema.GroupKind, error) {
	gk := schema.ParseGroupKind(s)
	if gk.Kind == "" || strings.ContainsAny(s, " /") {
		return schema.GroupKind{}, fmt.Errorf("owner kind %q: want Kind.group, e.g. ReplicaSet.apps", s)
	}
	return gk, nil
}

// NeverRan reports whether none of the pod's init or regular containers ever ran: the pod is
// Pending and no status of theirs is running or terminated, has started, counts a restart or
// holds a last state. Only such a pod is recreated: evicting it stops nothing that ran (a
// Running pod whose sidecar fails to pull is serving). Ephemeral containers do not count.
func NeverRan(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodPending {
		return false
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range statuses {
			last := st.LastTerminationState
			if st.State.Running != nil || st.State.Terminated != nil || (st.Started != nil && *st.Started) ||
				st.RestartCount > 0 || last.Running != nil || last.Terminated != nil || last.Waiting != nil {
				return false
			}
		}
	}
	return true
}

// JobHasRetries reports whether one more failed pod leaves the Job running: it has not
// finished (Complete, Failed, or their targets), has no per-index limit (backoffLimitPerIndex,
// whose counts are per index), no podFailurePolicy rule that fails the Job (an evicted pod
// carries DisruptionTarget, which a FailJob rule may match whatever the limit), and has failed
// fewer times than spec.backoffLimit (default 6): the Job controller counts an evicted pod as
// failed (unless a podFailurePolicy rule ignores DisruptionTarget, which is not relied on), and
// fails the Job once failures exceed the limit. The failures it has not counted yet
// (status.uncountedTerminatedPods.failed: a pod gone whose failure is not in status.failed yet,
// as a sibling evicted a moment ago) count too.
func JobHasRetries(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:
			if c.Status == corev1.ConditionTrue {
				return false
			}
		}
	}
	if job.Spec.BackoffLimitPerIndex != nil {
		return false
	}
	if p := job.Spec.PodFailurePolicy; p != nil {
		for _, r := range p.Rules {
			if r.Action == batchv1.PodFailurePolicyActionFailJob || r.Action == batchv1.PodFailurePolicyActionFailIndex {
				return false
			}
		}
	}
	limit := int32(6)
	if job.Spec.BackoffLimit != nil {
		limit = *job.Spec.BackoffLimit
	}
	failed := int64(job.Status.Failed)
	if u := job.Status.UncountedTerminatedPods; u != nil {
		failed += int64(len(u.Failed))
	}
	return failed < int64(limit)
}

// Skipped reports whether the webhook never sees the pod: opted out with kuik.enix.io/skip, or
// in a namespace the webhook configuration excludes.
func Skipped(pod *corev1.Pod, excluded map[string]bool) bool {
	return pod.Labels[v1alpha1.LabelSkip] == "true" || excluded[pod.Namespace]
}

// StillFailing reports whether every container of want still fails to pull the same image in
// pod (the second read, right before a delete).
func StillFailing(pod *corev1.Pod, want map[string]string) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	now := FailingContainers(pod)
	for name, image := range want {
		if now[name] != image {
			return false
		}
	}
	return len(want) > 0
}
