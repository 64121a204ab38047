package keep

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// What the keeper gathers from its caches, as plain values: the decisions read nothing else.

// DefaultRetention is how long a kept tag stays after its last use when a Mirror gives none.
const DefaultRetention = 168 * time.Hour

// Mirror is a keep-enabled ImageMirror's settings.
type Mirror struct {
	// Name is the ImageMirror's name: the Source of its candidates.
	Name string
	// Destination is spec.destination.path. It only names the reason an image is skipped; the
	// decision is the routing core's.
	Destination string
	// Retention is how long a kept tag stays after its last use; DefaultRetention when ≤ 0.
	Retention time.Duration
	// CountTemplates: images named by workload templates count as used.
	CountTemplates bool
	// AllowPrivateSources: an image whose source needs a credential is kept (privateSources Allow).
	AllowPrivateSources bool
	// Selects reports whether the mirror's selectors select a pod; nil selects every pod. It
	// only keeps the report of an image the mirror cannot name to the pods it selects: the
	// decision is the routing core's.
	Selects func(podLabels, namespaceLabels labels.Set) bool
}

func (m *Mirror) retention() time.Duration {
	if m.Retention <= 0 {
		return DefaultRetention
	}
	return m.Retention
}

// Snapshot is the cluster as the keeper's caches see it.
type Snapshot struct {
	// Pods are the live pods: not being deleted, not Succeeded nor Failed.
	Pods []Pod
	// Namespaces maps a namespace's name to its labels.
	Namespaces map[string]labels.Set
	// Templates are the workload templates that exist (see [Template]).
	Templates []Template
}

// Pod is what the keeper reads of a live pod.
type Pod struct {
	Namespace, Name string
	Labels          labels.Set
	// Annotations are the pod's; only kuik's records are read, with internal/route's readers.
	Annotations map[string]string
	// Containers are the init, regular and ephemeral containers.
	Containers []Container
}

// Container is one container of a pod.
type Container struct {
	Name string
	// Image is the spec image: what the kubelet pulls.
	Image string
	// ImageID is status.containerStatuses[].imageID; empty while unknown.
	ImageID string
	// StatusImage is status.containerStatuses[].image: the image the running container was
	// started from. The spec image can be changed in place, and the status then still reports
	// the old container until the kubelet replaces it: ImageID counts only while StatusImage is
	// the spec image.
	StatusImage string
}

// TemplateKind is the kind of a workload that holds a pod template.
type TemplateKind string

const (
	KindReplicaSet  TemplateKind = "ReplicaSet"
	KindStatefulSet TemplateKind = "StatefulSet"
	KindDaemonSet   TemplateKind = "DaemonSet"
	KindJob         TemplateKind = "Job"
	KindCronJob     TemplateKind = "CronJob"
)

// Template is a workload's pod template. The gatherer passes every ReplicaSet that exists (the
// Deployment controller already prunes those beyond revisionHistoryLimit; scaled to zero
// included), every StatefulSet, DaemonSet and Job, and every CronJob, suspended or not.
type Template struct {
	Kind            TemplateKind
	Namespace, Name string
	// Labels are the pod template's labels, which the resources' podSelector sees.
	Labels labels.Set
	// Images are the template's container images (init and regular).
	Images []string
}
