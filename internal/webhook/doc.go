// Package webhook is kuik's admission side: a mutating handler that routes each container of a
// pod to the first available candidate image, and a validating handler for routing resources.
//
// The handlers are thin adapters around internal/route, which holds the decision. PodMutator
// decodes the pod, calls route.Route with a route.ProbeChooser, checks the result against the
// API server's and the secret-syncer's bounds, and answers with the JSON patch. It admits the
// pod unchanged on any internal error: the webhook never blocks a pod.
//
// Files:
//
//   - mutate.go: PodMutator: decode, route, bounds, metrics and logs
//   - patch.go: the JSON patch from the pod before to the routed pod
//   - validate.go: RoutingValidator
//   - server.go: Run: the manager, informers, prober, index builder and handlers
//   - timeout.go: the admission budget applied to a handler's context
//   - logger.go: requestLogger, each admission request's logger, its values encoded only
//     when a line is logged
//
// RoutingValidator checks, with SubjectAccessReviews, that a routing resource's author may use
// every credential it references: get on a secretRef Secret, use on a provider (injecting or not)
// (credentialproviders.kuik.enix.io), create on serviceaccounts/token for a serviceAccountRef.
package webhook
