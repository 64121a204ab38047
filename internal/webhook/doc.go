// Package webhook is kuik's admission side: a mutating handler that routes each container of a
// pod to the first available candidate image, and a validating handler for routing resources.
//
// The handlers are thin adapters. Route is the decision: given a pod, the namespace's labels,
// the routing index and a Chooser (the registry probes), it rewrites images, records why in
// annotations and appends the kuik-inject-* pull secret of the winning entry. The handlers
// only decode, call Route, and answer with the JSON patch, and they admit the pod unchanged on
// any internal error: the webhook never blocks a pod.
package webhook
