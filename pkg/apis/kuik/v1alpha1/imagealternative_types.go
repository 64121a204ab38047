package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageAlternativeSpec declares repositories that serve the same images as one another.
// +kubebuilder:validation:XValidation:rule="self.alternatives.all(a, has(a.repository)) || self.alternatives.all(a, has(a.repositoryGroup))",message="alternatives: every entry must use the same form, repository or repositoryGroup",fieldPath=".alternatives"
type ImageAlternativeSpec struct {
	// podSelector selects the pods this resource routes; empty selects every pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// namespaceSelector selects namespaces by their labels; empty selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// rewritePolicy is Always (alternatives before the original image) or OnFailure
	// (alternatives only when the original is not available).
	// +optional
	// +kubebuilder:default=OnFailure
	// +kubebuilder:validation:XValidation:rule="self != 'None'",message="rewritePolicy: None is only valid for ImageMirror"
	RewritePolicy RewritePolicy `json:"rewritePolicy,omitempty"`
	// dryRun: the webhook decides and probes as usual but changes no image and adds no pull
	// Secret; it records what it would have done in the pod's kuik.enix.io/dry-run annotation.
	// The secret-syncer writes no Secret for a dry-run resource. A dry-run resource never
	// changes what an enforcing one decides.
	// +optional
	// +kubebuilder:default=false
	DryRun bool `json:"dryRun,omitempty"`
	// pinDigest: a container routed to this resource's candidate gets
	// <candidate repository>@<digest the probe saw>, so the pod pulls exactly what was probed;
	// the tag stays in kuik.enix.io/original-images.
	// +optional
	// +kubebuilder:default=false
	PinDigest bool `json:"pinDigest,omitempty"`
	// recreateStuckPods: the secret-syncer evicts a Pending pod none of whose containers ever
	// ran, that fails to pull an image this resource could route to an available candidate now,
	// when its controller recreates it from a template (the syncer's
	// --recreate-stuck-pod-owners), no other pod of that controller is being evicted, and it has
	// been failing for --stuck-pod-age, within a global rate limit, so that its controller
	// recreates it and the webhook routes it.
	// +optional
	// +kubebuilder:default=false
	RecreateStuckPods bool `json:"recreateStuckPods,omitempty"`
	// alternatives is the ordered list of equivalent repositories.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Alternatives []Alternative `json:"alternatives"`
}

// Alternative is one repository (or one group of repositories) of an ImageAlternative.
// +kubebuilder:validation:XValidation:rule="has(self.repository) != has(self.repositoryGroup)",message="exactly one of repository or repositoryGroup must be set"
type Alternative struct {
	// repository is one image repository, without tag or digest, e.g. quay.io/acme/foo.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':')",message="repository: must not end with ':'"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="repository: must not contain a digest (tags and digests are carried over from the pod's image)"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || !self.matches(':[^/]*$')",message="repository: must not contain a tag (tags and digests are carried over from the pod's image)"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || self.contains('@') || self.matches(':[^/]*$') || self.matches('^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*$')",message="repository: not a valid image repository reference"
	Repository string `json:"repository,omitempty"`
	// repositoryGroup is a path whose repositories one level below are equivalent to those
	// below the other entries' paths, e.g. quay.io/acme/.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':')",message="repositoryGroup: must not end with ':'"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="repositoryGroup: must not contain a digest"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || !self.matches(':[^/]*$')",message="repositoryGroup: must not contain a tag"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || self.contains('@') || self.matches(':[^/]*$') || self.matches('^((([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)/)?[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*/?$')",message="repositoryGroup: not a valid repository path"
	RepositoryGroup string `json:"repositoryGroup,omitempty"`
	// insecure: the registry speaks plain HTTP.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// unavailable: never a target; a pod using this entry is routed to another one.
	// +optional
	Unavailable bool `json:"unavailable,omitempty"`
	// auth is the credential for this entry; anonymous when absent.
	// +optional
	Auth *Auth `json:"auth,omitempty"`
}

// ImageAlternative declares equivalent image repositories; the webhook routes a pod to the
// first available one.
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ia,categories=kuik
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.rewritePolicy`
// +kubebuilder:printcolumn:name="Entries",type=integer,JSONPath=`.status.entries`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Fallbacks",type=integer,JSONPath=`.status.fallbacks`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="DryRun",type=boolean,JSONPath=`.spec.dryRun`,priority=1
// +kubebuilder:printcolumn:name="PinDigest",type=boolean,JSONPath=`.spec.pinDigest`,priority=1
// +kubebuilder:printcolumn:name="Recreate",type=boolean,JSONPath=`.spec.recreateStuckPods`,priority=1
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.fallbackPods`,priority=1
// +kubebuilder:printcolumn:name="Top-Fallback",type=string,JSONPath=`.status.activeFallbacks[0].routedTo`,priority=1
type ImageAlternative struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired routing.
	// +required
	Spec ImageAlternativeSpec `json:"spec"`
	// status is written by the secret-syncer.
	// +optional
	Status RoutingStatus `json:"status,omitempty"`
}

// ImageAlternativeList is a list of ImageAlternative.
// +kubebuilder:object:root=true
type ImageAlternativeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageAlternative `json:"items"`
}
