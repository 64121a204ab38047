package v1alpha1

// Labels and annotations kuik writes on pods and Secrets; they are part of its contract with
// operators and between its two processes.
const (
	// AnnotationOriginalImages is a JSON map container name -> image before rewriting. A
	// container listed there is never routed again (reinvocation is idempotent).
	AnnotationOriginalImages = "kuik.enix.io/original-images"
	// AnnotationRewrittenBy is a JSON map container name -> "<Kind>/<name>" of the routing
	// resource whose entry the container was rewritten to.
	AnnotationRewrittenBy = "kuik.enix.io/rewritten-by"
	// AnnotationReason is a JSON map container name -> Always | OnFailure | NoAlternatives.
	AnnotationReason = "kuik.enix.io/reason"

	// LabelRewritten ("true") marks pods the webhook rewrote, so the secret-syncer watches
	// only those.
	LabelRewritten = "kuik.enix.io/rewritten"
	// LabelSkip ("true") on a pod opts it out of the webhook.
	LabelSkip = "kuik.enix.io/skip"

	// LabelManagedBy / ManagedBySecretSyncer label every Secret the secret-syncer writes.
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	ManagedBySecretSyncer = "kuik-secret-syncer"

	// PullSecretPrefix starts the name of every Secret kuik injects into pods.
	PullSecretPrefix = "kuik-inject-"
	// ProviderSecretPrefix starts the name of the Secrets that hold provider credentials in
	// the cluster resource namespace.
	ProviderSecretPrefix = "kuik-provider-"

	// ReasonNoAlternatives is recorded for a container none of whose candidates was available.
	ReasonNoAlternatives = "NoAlternatives"

	// EventPullSecretInjectionFailed is the reason of the Warning event the syncer puts on a
	// routing resource whose entry it could not write.
	EventPullSecretInjectionFailed = "PullSecretInjectionFailed"

	// AnnotationDryRun is a JSON map container name -> {"image", "by", "reason"}: what the
	// webhook would have done to the container if the dry-run resources enforced.
	AnnotationDryRun = "kuik.enix.io/dry-run"

	// EventImagePullMissedRouting is the reason of the Warning event the syncer puts on a pod
	// that fails to pull an image a routing resource could route to an available candidate
	// now, and on that resource.
	EventImagePullMissedRouting = "ImagePullMissedRouting"
	// EventStuckPodRecreated is the reason of the Normal event the syncer puts on a routing
	// resource with recreateStuckPods when it deletes such a pod so that its controller
	// recreates it.
	EventStuckPodRecreated = "StuckPodRecreated"

	// EventImageKept is the reason of the Normal event the keeper puts on an ImageMirror when
	// it copied an image into the mirror.
	EventImageKept = "ImageKept"
	// EventKeepFailed is the reason of the Warning event the keeper puts on an ImageMirror
	// when it could not keep an image (status.keep.failures says why).
	EventKeepFailed = "KeepFailed"
)
