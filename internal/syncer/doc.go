// Package syncer is the secret-syncer: it keeps, for each routing resource (ImageAlternative,
// ImageMirror) and each namespace that needs it, one kubernetes.io/dockerconfigjson Secret
// kuik-inject-<kind>-<name> holding the credentials the kubelet needs to pull the images the
// webhook rewrote pods to.
//
// # Gather → decide → act
//
// Gather: informers with narrow caches ([CacheOptions]): the routing resources, Namespaces as
// metadata, only the Pods labelled kuik.enix.io/rewritten=true (trimmed by [TransformPod] to
// what is read, bounded per pod: a pod over routing's bounds is a stub), and the Secrets of the
// cluster resource namespace only. No Secret is ever read outside that namespace. Pod events
// queue only the resources that exist.
//
// Decide: pure functions, shared by the controller and the render command ([Render]):
//
//   - [FromImageAlternative] / [FromImageMirror] read a resource: entries, their auths key
//     (the path as written; the normalized path for a Docker Hub short form the kubelet
//     would misread), and which entry an image was pulled from (structurally, by path segment);
//   - [Resolve] finds each injecting entry's credential in its secretRef Secret, by the
//     kubelet's own matching rules (credentials.DockerConfig.Lookup), each Secret read once; an
//     entry that cannot be resolved is left out with a reason ([LeftOut]);
//   - [UsedEntries] tells which entries the live pods of a namespace really use. A pod's label
//     kuik.enix.io/rewritten and its annotations rewritten-by and original-images are claims
//     any pod author can write (at creation, or later: the webhook never sees updates), so a
//     container counts only when the resource it names could have routed it there: the
//     resource selects the namespace and the pod (their current labels), and has, for the
//     recorded original image, an injecting candidate whose reference is the container's
//     current image. The routing core decides (each [Resource] holds its own routing.Index,
//     and routing.Index.Candidates is the webhook's matching, selectors and order), so no
//     forged record brings an OnFailure credential into a namespace or for a pod the resource
//     does not route, nor one of an entry the pod could not have been routed to;
//   - [DecidePair] decides one (resource, namespace) pair: under Always, every injecting entry in
//     every namespace the namespaceSelector selects; under OnFailure, in a namespace the
//     namespaceSelector selects, the entries that serve the live pods the resource rewrote,
//     plus those used within the retention ([Retain], clock injected) — a namespace leaving the
//     selector loses them all at once;
//   - [DesiredSecret], [ApplyConfiguration] and [Hash] build the Secret and its apply request;
//     [DesiredStatus] the resource's status; [RetentionApplyConfiguration] and [ParseRetention] the
//     retention record of a resource.
//
// Act ([Controller]): a work queue keyed by (kind, name, namespace), debounced so that the events
// of one pair within a short window make one apply; server-side apply with field manager
// kuik-secret-syncer; an in-memory hash per pair skips applies that would change nothing; a
// periodic resync re-applies every pair regardless of the hash, which restores a Secret someone
// deleted or edited (the API server turns an identical apply into a no-op). A resync that arrives
// while a pair is being decided is not lost: the decision takes the pair's forced flag when it
// starts, so the resync's flag survives it and the work queue decides the pair once more right
// after. The pod, namespace, resource and secretRef informers re-decide the pairs they touch; a
// namespace's label change re-decides its OnFailure pairs too.
//
// Retention survives restarts and leader changes: the usage of each OnFailure resource's entries is
// kept in a retention record, a ConfigMap kuik-retain-<kind>-<name> in the cluster resource
// namespace owned by the resource, written (debounced, server-side apply) only when an entry starts
// or stops being used or expires, and at once before a resource's first Secret in a namespace the
// retention record does not name yet (a crash within the debounce then loses at most the latest
// change of use, never the namespace). A start lists the retention records from the API server
// before any decision: a retained entry keeps its time of last use, an entry kept as live counts as
// used at the start (its pods may have gone while no syncer ran), and the retention record's
// namespaces are decided even when no pod there needs the resource any more, so their retained
// entries still expire. The syncer never reads a Secret outside the cluster resource namespace; the
// retention records are what it knows of what it wrote.
//
// A start applies every pair once. The syncer never deletes a Secret: a pair that needs nothing any
// more gets {"auths":{}}, and deleting the resource garbage-collects its Secrets and its retention
// record through their ownerReference. Status (Ready condition, observedGeneration, entries,
// namespaces) is written through the status subresource only when it changes, and one
// PullSecretInjectionFailed Warning event (core/v1) is emitted per cause, in namespace "default"
// (the API server accepts the events of cluster-scoped objects nowhere else).
//
// Live fallbacks (fallbacks.go decides, fallbacks_controller.go writes): each resource's
// status.activeFallbacks (one item per (original, routedTo) repository pair, tag and digest
// dropped, with its number of live pods and the creation time of the oldest; the most pods
// first, at most 32), status.fallbacks (every pair) and status.fallbackPods (distinct live
// pods), and the kuik_secret_syncer_fallback_pods gauge. A record counts under the same check as
// for credentials (routing.Index.Recorded), for every entry, injecting or not; a dry-run
// resource or a mirror with policy None has none. They are recomputed per resource from the
// pod cache's rewritten-by index, not aggregated per event: a pod, namespace or resource event
// queues the resource after Config.FallbackDelay, the events meanwhile join it, so a resource
// costs at most one computation and one write per delay, and nothing per pod is kept beyond
// the cache. The write is a JSON merge patch of those three fields through the status
// subresource, only when they differ from what the cached object holds; the other status
// writer's merge patch is computed from the whole status and carries them over unchanged.
//
// [NewManager] wires it into a controller-runtime manager with leader election, metrics and
// health probes. The RBAC it needs is the chart's (charts/kuik/templates/syncer-rbac.yaml:
// Secrets create/patch everywhere but read only in the cluster resource namespace, the
// retention records and leader election there, events in "default" and there); the
// integration tests run it under exactly that.
//
// Provider entries (auth.provider) get their credential from the provider keeper: it runs the
// kubelet credential-provider plugins (internal/credentialprovider), renews each answer before
// it expires, and keeps the answers in memory for [Resolve] and in kuik-provider-* Secrets of
// the cluster resource namespace for the webhook's probes and the next start.
//
// # Where things are
//
//	resource.go, resolve.go       a routing resource as the syncer reads it; its credentials
//	pods.go                       the rewritten pods, and the entries they really use
//	pairdecision.go               DecidePair, and the pull Secret it builds
//	retention.go                  Retain, and the retention record's format
//	status.go                     the resource's status and events, computed and written
//	fallbacks.go                  the live fallbacks, computed
//	fallbacks_controller.go       the live fallbacks, written
//	providers.go                  provider entries: demands, static reasons, kept answers
//	providersecret.go             a kuik-provider-* Secret: what it holds, its layout
//	providerkeeper.go             the provider keeper: its state, its answers, its lifecycle
//	providerkeeper_plugins.go     the provider keeper's plugin runs and renewals
//	providerkeeper_secrets.go     the provider keeper's writes of kuik-provider-* Secrets
//	config.go                     the controller's Config and its defaults
//	controller.go                 the controller's state and lifecycle
//	enqueue.go                    what queues a pair, the resync feed and the debounce
//	handlers.go                   the informer event handlers
//	memo.go                       the per-resource view and credential resolution
//	apply.go                      the per-pair gather → decide → act, and the pair memory
//	retention_controller.go       the retention records: restored, debounced, written
//	cache.go                      the narrow informer caches and the pod transform
//	render.go                     the render command: the Secrets for a snapshot
//	run.go                        the manager: leader election, metrics, health probes
//	scope.go                      the pod webhook's matchConditions, kept in step (--match-conditions-of)
//
// The package never talks to a registry. With [Options].MissedPulls, [NewManager] also runs the
// missed-pull controller of internal/missedpulls on the leader, which does (it decides as the
// webhook would, with its probes) and needs the chart's syncer.missedPulls rights: events
// listed, watched and written everywhere, pods read by name, and pods deleted only with
// syncer.recreateStuckPods.enabled.
package syncer
