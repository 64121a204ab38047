package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MirrorKeep makes kuik copy the images pods run into the mirror, so that they stay pullable
// when their upstream is gone. Every field has a default: keep: {} turns it on.
type MirrorKeep struct {
	// push is how kuik writes kept images into the mirror; anonymous when absent.
	// +optional
	Push *KeepPush `json:"push,omitempty"`
	// retention is how long a kept tag stays in the mirror after its last use, from 1h to
	// 8760h (a year).
	// +optional
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('8760h')",message="keep.retention: must be from 1h to 8760h"
	Retention *metav1.Duration `json:"retention,omitempty"`
	// countTemplates: images named by workload templates count as used (ReplicaSets within
	// their Deployment's revisionHistoryLimit, Deployments scaled to zero, StatefulSets,
	// DaemonSets, Jobs, suspended CronJobs).
	// +optional
	// +kubebuilder:default=true
	CountTemplates *bool `json:"countTemplates,omitempty"`
	// privateSources is Deny or Allow: whether an image whose source needed a credential is
	// kept. A kept image is pullable by every namespace the mirror's pull Secret reaches.
	// +optional
	// +kubebuilder:default=Deny
	PrivateSources PrivateSourcesPolicy `json:"privateSources,omitempty"`
	// referrers: also copy the cosign tags (sha256-<hex>.sig, .att, .sbom) and the OCI
	// referrers of each kept digest, so that signatures still verify on the mirror.
	// +optional
	// +kubebuilder:default=true
	Referrers *bool `json:"referrers,omitempty"`
}

// KeepPush holds the credential kuik writes kept images with.
type KeepPush struct {
	// auth is the credential kuik writes and deletes kept tags with; anonymous when absent.
	// Pods never get it: it is distinct from destination.pull.
	// +optional
	Auth *KeepPushAuth `json:"auth,omitempty"`
}

// KeepPushAuth is the credential kuik writes and deletes kept tags with: a Secret only.
type KeepPushAuth struct {
	// secretRef names a kubernetes.io/dockerconfigjson Secret in the cluster resource
	// namespace, with write and delete rights on the destination.
	// +required
	SecretRef LocalSecretReference `json:"secretRef"`
}

// PrivateSourcesPolicy says whether kuik keeps an image whose source needed a credential.
// +kubebuilder:validation:Enum=Deny;Allow
type PrivateSourcesPolicy string

const (
	// PrivateSourcesDeny keeps only images their source serves anonymously.
	PrivateSourcesDeny PrivateSourcesPolicy = "Deny"
	// PrivateSourcesAllow keeps private images too.
	PrivateSourcesAllow PrivateSourcesPolicy = "Allow"
)

// Defaults of spec.keep, the CRD's, for objects that did not come through the API server.
const (
	DefaultKeepRetention      = 168 * time.Hour
	DefaultKeepCountTemplates = true
	DefaultKeepReferrers      = true
)

// RetentionOrDefault is retention, or the CRD's default when unset.
func (k *MirrorKeep) RetentionOrDefault() metav1.Duration {
	if k == nil || k.Retention == nil {
		return metav1.Duration{Duration: DefaultKeepRetention}
	}
	return *k.Retention
}

// CountsTemplates is countTemplates, or the CRD's default when unset.
func (k *MirrorKeep) CountsTemplates() bool {
	if k == nil || k.CountTemplates == nil {
		return DefaultKeepCountTemplates
	}
	return *k.CountTemplates
}

// CopiesReferrers is referrers, or the CRD's default when unset.
func (k *MirrorKeep) CopiesReferrers() bool {
	if k == nil || k.Referrers == nil {
		return DefaultKeepReferrers
	}
	return *k.Referrers
}

// AllowsPrivateSources reports whether privateSources is Allow (Deny when unset).
func (k *MirrorKeep) AllowsPrivateSources() bool {
	return k != nil && k.PrivateSources == PrivateSourcesAllow
}

// KeepStatus is what the keeper observed of an ImageMirror with spec.keep.
type KeepStatus struct {
	// desired is the number of images the mirror is to hold now: used by live pods, named by
	// counted templates, or within retention.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Desired int32 `json:"desired,omitempty"`
	// present is the number of desired images the mirror holds, with the expected digest.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Present int32 `json:"present,omitempty"`
	// missingSource is the number of desired images neither the mirror nor their source holds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MissingSource int32 `json:"missingSource,omitempty"`
	// failed is the number of desired images whose last copy failed (failures lists them).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failed int32 `json:"failed,omitempty"`
	// pendingDeletion is the number of kept tags out of use, deleted once retention is over.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PendingDeletion int32 `json:"pendingDeletion,omitempty"`
	// failures are the images not kept and why, the most recent attempts first, at most 100
	// (failed gives the whole number).
	// +optional
	// +listType=map
	// +listMapKey=image
	// +kubebuilder:validation:MaxItems=100
	Failures []KeepFailure `json:"failures,omitempty"`
}

// KeepFailure is one image kuik could not keep.
type KeepFailure struct {
	// image is the image's normalized reference, e.g. docker.io/library/nginx:1.27@sha256:….
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image"`
	// reason says why it is not kept.
	// +required
	Reason KeepFailureReason `json:"reason"`
	// message gives the details, e.g. the registry's answer.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// lastAttempt is when kuik last tried to keep it.
	// +required
	LastAttempt metav1.Time `json:"lastAttempt"`
}

// KeepFailureReason says why an image is not kept.
// +kubebuilder:validation:Enum=SourceUnavailable;QuotaExceeded;AuthRequired;PushFailed;TooLarge;Stalled;Unnameable
type KeepFailureReason string

const (
	// KeepSourceUnavailable: the source does not serve the image (deleted, or unreachable).
	KeepSourceUnavailable KeepFailureReason = "SourceUnavailable"
	// KeepQuotaExceeded: the source registry's rate limit is reached; kuik waits for its reset.
	KeepQuotaExceeded KeepFailureReason = "QuotaExceeded"
	// KeepAuthRequired: the source needs a credential, and privateSources is Deny or no
	// resource selecting the pod gives one.
	KeepAuthRequired KeepFailureReason = "AuthRequired"
	// KeepPushFailed: the mirror refused or failed a write.
	KeepPushFailed KeepFailureReason = "PushFailed"
	// KeepTooLarge: the image is over the keeper's size limit.
	KeepTooLarge KeepFailureReason = "TooLarge"
	// KeepStalled: a transfer stopped progressing and was abandoned; it is retried.
	KeepStalled KeepFailureReason = "Stalled"
	// KeepUnnameable: the mirror cannot name the image (routing.MirrorReference), e.g. its
	// registry host has a port; the webhook never routes it to the mirror either.
	KeepUnnameable KeepFailureReason = "Unnameable"
)
