package missedpulls

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
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
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return r.UID
		}
	}
	return ""
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
