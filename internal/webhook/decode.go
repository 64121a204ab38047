package webhook

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// podFields is what kuik reads of a pod: its namespace, labels and annotations, the name and
// image of every container, and its image pull secrets. Each field has the name, tag and Go type
// of the pod's own, so encoding/json decodes it exactly as json.Unmarshal of a whole corev1.Pod
// does (case-insensitive names, the last of duplicate keys, null and absent maps kept apart);
// the fields kuik does not read are only checked for JSON syntax. Decoding the whole pod was
// most of an admission's CPU: resources, environment and probes kuik never looks at.
type podFields struct {
	Metadata struct {
		Namespace   string            `json:"namespace,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata,omitempty"`
	Spec struct {
		InitContainers      []containerFields             `json:"initContainers,omitempty"`
		Containers          []containerFields             `json:"containers"`
		EphemeralContainers []containerFields             `json:"ephemeralContainers,omitempty"`
		ImagePullSecrets    []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	} `json:"spec,omitempty"`
}

// containerFields is what kuik reads of a container, an init container or an ephemeral one
// (whose name and image corev1.EphemeralContainerCommon inlines).
type containerFields struct {
	Name  string `json:"name"`
	Image string `json:"image,omitempty"`
}

// decodePod decodes what kuik reads of the pod in raw into a corev1.Pod that holds only that.
// Its error is json.Unmarshal's: raw is not JSON, or a field kuik reads has the wrong type. A
// field kuik does not read may hold anything: the API server sends its own serialization of a
// pod, which always decodes.
func decodePod(raw []byte) (*corev1.Pod, error) {
	var f podFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	pod.Namespace = f.Metadata.Namespace
	pod.Labels = f.Metadata.Labels
	pod.Annotations = f.Metadata.Annotations
	pod.Spec.InitContainers = containers(f.Spec.InitContainers)
	pod.Spec.Containers = containers(f.Spec.Containers)
	if f.Spec.EphemeralContainers != nil {
		pod.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(f.Spec.EphemeralContainers))
		for i, c := range f.Spec.EphemeralContainers {
			pod.Spec.EphemeralContainers[i].Name, pod.Spec.EphemeralContainers[i].Image = c.Name, c.Image
		}
	}
	pod.Spec.ImagePullSecrets = f.Spec.ImagePullSecrets
	return pod, nil
}

// containers keeps nil apart from empty, as json.Unmarshal does.
func containers(cs []containerFields) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i].Name, out[i].Image = c.Name, c.Image
	}
	return out
}
