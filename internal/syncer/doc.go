// Package syncer is the secret-syncer: it keeps, for each routing resource (ImageAlternative,
// ImageMirror) and each namespace that needs it, one kubernetes.io/dockerconfigjson Secret
// kuik-inject-<kind>-<name> holding the credentials the kubelet needs to pull the images the
// webhook rewrote pods to.
//
// # Gather → decide → act
//
// Gather: informers with narrow caches ([CacheOptions]): the routing resources, Namespaces as
// metadata, only the Pods labelled kuik.enix.io/rewritten=true (trimmed by [TransformPod] to
// what is read), and the Secrets of the cluster resource namespace only. No Secret is ever read
// outside that namespace.
//
// Decide: pure functions, shared by the controller and the render command ([Render]):
//
//   - [FromImageAlternative] / [FromImageMirror] read a resource: entries, their auths key
//     (the path as written; the normalized path for a Docker Hub short form the kubelet
//     would misread), and which entry an image was pulled from (structurally, by path segment);
//   - [Resolve] finds each injecting entry's credential in its secretRef Secret, by the
//     kubelet's own matching rules (credentials.DockerConfig.Lookup), each Secret read once; an
//     entry that cannot be resolved is left out with a reason ([LeftOut]);
//   - [DecidePair] decides one (resource, namespace) pair: under Always, every injecting entry in
//     every namespace the namespaceSelector selects; under OnFailure, the entries that serve the
//     live pods the resource rewrote, plus those used within the retention ([Retain], clock
//     injected);
//   - [DesiredSecret], [ApplyConfiguration] and [Hash] build the Secret and its apply request;
//     [DesiredStatus] the resource's status.
//
// Act ([Controller]): a work queue keyed by (kind, name, namespace), debounced so that the
// events of one pair within a short window make one apply; server-side apply with field
// manager kuik-secret-syncer; an in-memory hash per pair skips applies that would change
// nothing; a periodic resync re-applies every pair regardless of the hash, which restores a
// Secret someone deleted or edited (the API server turns an identical apply into a no-op); a
// start applies every pair once. The syncer never deletes a Secret: a pair that needs nothing
// any more gets {"auths":{}}, and deleting the resource garbage-collects its Secrets through
// their ownerReference. Status (Ready condition, observedGeneration, entries, namespaces) is
// written through the status subresource only when it changes, and one
// PullSecretInjectionFailed Warning event is emitted per cause.
//
// [NewManager] wires it into a controller-runtime manager with leader election, metrics and
// health probes. The RBAC it needs is the chart's (charts/kuik/templates/syncer-rbac.yaml); the
// integration tests run it under exactly that.
//
// The package never talks to a registry.
package syncer
