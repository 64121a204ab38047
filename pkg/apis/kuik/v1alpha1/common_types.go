package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RewritePolicy says when the webhook routes an image to a resource's candidates, and when the
// secret-syncer writes the resource's pull Secret.
// +kubebuilder:validation:Enum=Always;OnFailure;None
type RewritePolicy string

const (
	// RewritePolicyAlways puts the resource's candidates before the original image, and makes
	// the syncer write its Secret in every selected namespace before any pod exists.
	RewritePolicyAlways RewritePolicy = "Always"
	// RewritePolicyOnFailure puts the resource's candidates after the original image, used only
	// when the original is not available; the Secret follows the pods that were rewritten.
	RewritePolicyOnFailure RewritePolicy = "OnFailure"
	// RewritePolicyNone (ImageMirror only) never routes a pod and writes no Secret.
	RewritePolicyNone RewritePolicy = "None"
)

// Condition types and reasons written by the secret-syncer.
const (
	// ConditionReady is True when every injecting entry's credential resolved.
	ConditionReady = "Ready"

	ReasonSynced = "Synced"
	// ReasonDryRun: spec.dryRun is set; the resource routes no pod and has no pull Secret.
	ReasonDryRun                = "DryRun"
	ReasonNothingToInject       = "NothingToInject"
	ReasonSecretNotFound        = "SecretNotFound"
	ReasonNotDockerConfig       = "NotDockerConfig"
	ReasonInvalidDockerConfig   = "InvalidDockerConfig"
	ReasonNoCredentialForPath   = "NoCredentialForPath"
	ReasonProviderNotConfigured = "ProviderNotConfigured"
	// ReasonProviderNotMatched: the provider's matchImages do not match the entry's path, so
	// the kubelet would never run it for those images either; the plugin is not run.
	ReasonProviderNotMatched = "ProviderNotMatched"
	// ReasonServiceAccountRequired: the provider asks for a service-account token
	// (tokenAttributes.requireServiceAccount) and the entry names no serviceAccountRef.
	ReasonServiceAccountRequired = "ServiceAccountRequired"
	// ReasonProviderPending: the plugin has not answered yet for this entry.
	ReasonProviderPending = "ProviderPending"
	// ReasonProviderFailed: the plugin failed and no unexpired credential from an earlier run
	// is left.
	ReasonProviderFailed = "ProviderFailed"
	// ReasonProviderRenewalFailed (Ready stays True): the plugin failed to renew a credential
	// that is still valid and stays in use until it expires.
	ReasonProviderRenewalFailed = "ProviderRenewalFailed"
	// ReasonProviderSecretFull (Ready stays True): the entry's credential does not fit in the
	// kuik-provider-* Secret of its provider and ServiceAccount, which the syncer bounds under
	// the API server's limit; the pull Secret still gets it, the webhook probes without it.
	ReasonProviderSecretFull = "ProviderSecretFull"
)

// Condition type and reasons written by the keeper on an ImageMirror with spec.keep. For a
// push Secret that does not resolve, KeepReady is False with the reasons of Ready:
// ReasonSecretNotFound, ReasonNotDockerConfig, ReasonInvalidDockerConfig,
// ReasonNoCredentialForPath.
const (
	// ConditionKeepReady is True when kuik can write kept images into the mirror.
	ConditionKeepReady = "KeepReady"

	// ReasonKeeping (True): the push credential resolved and the destination accepted kuik's
	// writes; status.keep counts the progress.
	ReasonKeeping = "Keeping"
	// ReasonPushDenied (False): the destination refused a write with the push credential.
	ReasonPushDenied = "PushDenied"
	// ReasonDestinationUnavailable (False): the destination registry does not answer.
	ReasonDestinationUnavailable = "DestinationUnavailable"
)

// Condition type and reason written by the secret-syncer's leader when it keeps the pod
// webhook's matchConditions (--match-conditions-of). Its reason and message never change
// with the conditions (filtered, or every pod sent: the leader's metric says which), so a
// change of them rewrites no resource's status.
const (
	// ConditionPodsSent is True when the pod webhook's matchConditions send every pod the
	// resource's observedGeneration can route, and have been in effect for the settle time.
	// A webhook run with --match-conditions-gate routes with a generation only once it is.
	ConditionPodsSent = "PodsSent"
	// ReasonCovered (True): the conditions cover the observedGeneration.
	ReasonCovered = "Covered"
)

// LocalSecretReference names a Secret in the cluster resource namespace (where kuik runs).
type LocalSecretReference struct {
	// name of the Secret in the cluster resource namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ServiceAccountReference names a ServiceAccount whose token a credential provider may ask for.
type ServiceAccountReference struct {
	// namespace of the ServiceAccount.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the ServiceAccount.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ProviderAuth resolves a credential through a kubelet credential-provider exec plugin.
type ProviderAuth struct {
	// name of the provider in the CredentialProviderConfig given to the secret-syncer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// serviceAccountRef is the ServiceAccount whose token is passed to a plugin that asks for one.
	// +optional
	ServiceAccountRef *ServiceAccountReference `json:"serviceAccountRef,omitempty"`
}

// Auth is the credential used to probe an entry and, when injected, to pull from it.
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.provider)",message="auth: exactly one of secretRef or provider must be set"
type Auth struct {
	// secretRef names a kubernetes.io/dockerconfigjson Secret in the cluster resource namespace.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
	// provider resolves the credential through a kubelet credential-provider plugin.
	// +optional
	Provider *ProviderAuth `json:"provider,omitempty"`
	// injectPullSecret adds the credential to the pull Secret kuik writes in the pod's
	// namespace. Defaults to true for secretRef and false for provider.
	// +optional
	InjectPullSecret *bool `json:"injectPullSecret,omitempty"`
}

// Injects reports whether the credential of this auth is to be injected into pods.
func (a *Auth) Injects() bool {
	if a == nil {
		return false
	}
	if a.InjectPullSecret != nil {
		return *a.InjectPullSecret
	}
	return a.SecretRef != nil
}

// RoutingStatus is the observed state of a routing resource, written by the secret-syncer.
type RoutingStatus struct {
	// observedGeneration is the generation the syncer last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, with a reason such as SecretNotFound or NoCredentialForPath.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// entries is the number of entries (alternatives, or 1 for a mirror).
	// +optional
	Entries int32 `json:"entries,omitempty"`
	// namespaces is the number of namespaces holding this resource's pull Secret.
	// +optional
	Namespaces int32 `json:"namespaces,omitempty"`
	// activeFallbacks are the images live pods are routed away from by this resource now, the
	// ones with the most pods first, at most 32 (fallbacks gives the whole number).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	ActiveFallbacks []ActiveFallback `json:"activeFallbacks,omitempty"`
	// fallbacks is the number of (original, routedTo) pairs live pods are routed through now.
	// +optional
	Fallbacks int32 `json:"fallbacks,omitempty"`
	// fallbackPods is the number of live pods routed by this resource now.
	// +optional
	FallbackPods int32 `json:"fallbackPods,omitempty"`
	// unavailable are the repositories ahead of where live pods were routed (the originals,
	// and the candidates before the one they got) that gave the secret-syncer's leader no
	// answer at its last check, the most recent first, at most 256. Every webhook replica
	// reads them as hints: it waits at most its hinted wait for such a candidate before it
	// takes the next one in order. A hint never removes a candidate.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Unavailable []UnavailableRepository `json:"unavailable,omitempty"`
}

// UnavailableRepository is one repository that gave no answer to a background check.
type UnavailableRepository struct {
	// repository, e.g. docker.io/library/nginx.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Repository string `json:"repository"`
	// reason: Timeout (no answer within the check timeout) or Unreachable (the connection
	// was refused, or a network or TLS error). Any HTTP answer, a 401, 404, 429 or 5xx
	// included, is an answer.
	// +required
	// +kubebuilder:validation:Enum=Timeout;Unreachable
	Reason string `json:"reason"`
	// since is when the checks first found it so, in this run of them.
	// +required
	Since metav1.Time `json:"since"`
	// checkedAt is the last check that found it so. A webhook ignores a hint older than its
	// --hint-max-age.
	// +required
	CheckedAt metav1.Time `json:"checkedAt"`
}

// Reasons of [UnavailableRepository].
const (
	UnavailableTimeout     = "Timeout"
	UnavailableUnreachable = "Unreachable"
)

// ActiveFallback is one image repository live pods are routed away from, and where to.
type ActiveFallback struct {
	// original is the repository the pods asked for, e.g. docker.io/library/nginx.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Original string `json:"original"`
	// routedTo is the repository they were routed to.
	// +required
	// +kubebuilder:validation:MaxLength=512
	RoutedTo string `json:"routedTo"`
	// pods is the number of live pods routed so.
	// +required
	Pods int32 `json:"pods"`
	// since is the creation time of the oldest of those pods.
	// +required
	Since metav1.Time `json:"since"`
}
