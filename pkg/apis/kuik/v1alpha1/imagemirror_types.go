package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageMirrorSpec declares a registry path that mirrors images under their full reference.
type ImageMirrorSpec struct {
	// podSelector selects the pods this resource routes; empty selects every pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// namespaceSelector selects namespaces by their labels; empty selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// excludeImages are globs on the normalized image reference that this mirror does not serve:
	// '*' matches within a path segment, '**' across segments, '?' one character. A glob with no
	// tag or digest matches every tag and digest of the repositories it matches.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.all(g, g.matches('^[A-Za-z0-9._/:@*?-]+$'))",message="excludeImages: a glob may only hold letters, digits, '.', '_', '-', '/', ':', '@', '*' and '?'"
	// +kubebuilder:validation:XValidation:rule="self.all(g, !g.contains('***'))",message="excludeImages: '***' is not a valid glob"
	ExcludeImages []string `json:"excludeImages,omitempty"`
	// rewritePolicy is Always (mirror before the original image), OnFailure (mirror only when
	// the original is not available) or None (never routes, writes no Secret).
	// +optional
	// +kubebuilder:default=OnFailure
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
	// destination is where mirrored images live.
	// +required
	Destination MirrorDestination `json:"destination"`
	// keep: kuik copies the images of the pods this mirror selects into the destination,
	// verbatim, and deletes the tags it wrote once out of use for retention. Absent, kuik only
	// routes to what the mirror already holds. The keeper acts on it (chart value keeper.enabled).
	// +optional
	Keep *MirrorKeep `json:"keep,omitempty"`
}

// MirrorDestination is the registry path under which images are mirrored: the candidate for an
// image is path + its full normalized reference.
type MirrorDestination struct {
	// path is the registry path, e.g. registry.tld/mirror/; a registry host with a port and no
	// path must end with '/' (registry.tld:5000/), since registry.tld:5000 reads as a tag.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':')",message="destination.path: must not end with ':'"
	// +kubebuilder:validation:XValidation:rule="!self.contains('@')",message="destination.path: must not contain a digest"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[^/@:]*:[0-9]+$')",message="destination.path: a registry host with a port must end with '/' to name its root, e.g. registry.tld:5000/"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || self.matches('^[^/@:]*:[0-9]+$') || !self.matches(':[^/]*$')",message="destination.path: must not contain a tag"
	// +kubebuilder:validation:XValidation:rule="self.endsWith(':') || self.contains('@') || self.matches(':[^/]*$') || self.matches('^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])([.]([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(:[0-9]+)?)(/[a-z0-9]+(([._]|__|[-]+)[a-z0-9]+)*)*/?$')",message="destination.path: not a valid registry path"
	Path string `json:"path"`
	// insecure: the registry speaks plain HTTP.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// pull is how pods pull from the mirror.
	// +optional
	Pull *MirrorPull `json:"pull,omitempty"`
}

// MirrorPull holds the credential pods use to pull from the mirror.
type MirrorPull struct {
	// auth is the credential for the mirror; anonymous when absent.
	// +optional
	Auth *Auth `json:"auth,omitempty"`
}

// ImageMirror declares a mirror registry path; the webhook routes a pod to it when it is
// available (Always) or when the original is not (OnFailure).
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=im,categories=kuik
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.rewritePolicy`
// +kubebuilder:printcolumn:name="Entries",type=integer,JSONPath=`.status.entries`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Fallbacks",type=integer,JSONPath=`.status.fallbacks`
// +kubebuilder:printcolumn:name="Kept",type=integer,JSONPath=`.status.keep.present`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.keep.desired`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="DryRun",type=boolean,JSONPath=`.spec.dryRun`,priority=1
// +kubebuilder:printcolumn:name="PinDigest",type=boolean,JSONPath=`.spec.pinDigest`,priority=1
// +kubebuilder:printcolumn:name="Recreate",type=boolean,JSONPath=`.spec.recreateStuckPods`,priority=1
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.fallbackPods`,priority=1
// +kubebuilder:printcolumn:name="Top-Fallback",type=string,JSONPath=`.status.activeFallbacks[0].routedTo`,priority=1
// +kubebuilder:printcolumn:name="Missing",type=integer,JSONPath=`.status.keep.missingSource`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.keep.failed`,priority=1
// +kubebuilder:printcolumn:name="Keep-Ready",type=string,JSONPath=`.status.conditions[?(@.type=="KeepReady")].status`,priority=1
type ImageMirror struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired routing.
	// +required
	Spec ImageMirrorSpec `json:"spec"`
	// status is written by the secret-syncer, and status.keep by the keeper.
	// +optional
	Status ImageMirrorStatus `json:"status,omitempty"`
}

// ImageMirrorStatus is the observed state of an ImageMirror.
type ImageMirrorStatus struct {
	RoutingStatus `json:",inline"`
	// keep is what the keeper observed; absent without spec.keep.
	// +optional
	Keep *KeepStatus `json:"keep,omitempty"`
}

// ImageMirrorList is a list of ImageMirror.
// +kubebuilder:object:root=true
type ImageMirrorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageMirror `json:"items"`
}
