// Package admitscope computes the matchConditions of kuik's mutating pod webhook from the
// routing resources: CEL expressions the API server evaluates before it calls the webhook, so
// that a pod no resource can cover is admitted without a call.
//
// [Conditions] is pure (no client, no clock). [Apply] server-side-applies its result on the
// MutatingWebhookConfiguration with its own field manager, owning matchConditions only; the
// secret-syncer's leader calls it (--match-conditions-of, chart value
// webhook.mutating.matchConditions) after each change of a routing resource and at each
// resync. A resource created or widened reaches the condition after that write: a pod
// created in between may be admitted unrouted (docs/guides/admission-scope.md, Limits).
//
// # What is sent
//
// The condition over-approximates the webhook's own decision (internal/route): a stale or
// coarse condition may only send more pods, never fewer. A request is sent when any of these
// holds:
//
//   - it is not a pod CREATE (the pods/ephemeralcontainers UPDATE the chart's rules send);
//   - the pod has a kuik.enix.io/ label or annotation (the webhook drops untrue records);
//   - the pod has more labels or annotations than kuik reads, more containers than the cost
//     budget allows, or an image longer than MaxImageBytes;
//   - an image of any container (init, regular, ephemeral) can be covered: its repository is
//     a repository entry, its parent path a repositoryGroup entry, or an ImageMirror may
//     name it (it is not under the mirror's destination and no excludeImages glob the
//     condition can express matches it).
//
// Selectors are ignored. Images are normalized in CEL as github.com/distribution/reference
// does (nginx is docker.io/library/nginx), then lowered: [canonicalName] is the Go twin of the
// CEL, and the entries are compared in that form.
//
// # When every pod is sent
//
// No condition is returned, and [Result.Reason] says why, when a mirror covers every image
// (no excludeImages the condition can express: the usual case), or when the expression would
// be over a bound ([Limits]): its size, or a cost budget that leaves room for fewer than
// MinContainers containers. The cost is estimated from cel-go's cost model (the API server
// stops an expression past 1,000,000 and fails it; with failurePolicy Ignore that would skip
// the webhook).
//
// # Where things are
//
//	conditions.go   Conditions, ForCoverage, Result, Reason, Limits: the expression and its bounds
//	canonical.go    canonicalName and its CEL twin: an image's normalized, lowered repository
//	glob.go         excludeImages globs as RE2 expressions that never match more than the glob
//	apply.go        Apply, ApplyOn: the conditions written on the webhook, their field manager;
//	                Holds: whether a configuration read has them
package admitscope
