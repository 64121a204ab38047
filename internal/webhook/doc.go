// Package webhook is kuik's admission side: a mutating handler that routes each container of a
// pod to the first available candidate image, and a validating handler for routing resources.
//
// The handlers are thin adapters. Route is the decision: given a pod, the namespace's labels,
// the routing index and a Chooser (the registry probes), it rewrites images, records why in
// annotations and appends the kuik-inject-* pull secret of the winning entry. The handlers
// only decode, call Route, and answer with the JSON patch, and they admit the pod unchanged on
// any internal error: the webhook never blocks a pod.
//
// ProbeChooser probes each candidate with the credential the kubelet will have for it: a
// secretRef entry's from its Secret, a provider entry's from the kuik-provider-* Secret the
// secret-syncer keeps for it (credentialprovider.SecretName). It never runs a credential
// plugin: it only reads the nodes' credential-provider configuration, so that an original the
// nodes' providers cover is not routed away on a 401 it would not get on the node.
//
// RoutingValidator checks, with SubjectAccessReviews, that a routing resource's author may use
// every credential it references: get on a secretRef Secret, use on a provider (injecting or not)
// (credentialproviders.kuik.enix.io), create on serviceaccounts/token for a serviceAccountRef.
package webhook
