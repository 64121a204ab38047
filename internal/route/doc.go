// Package route is kuik's routing decision for a pod, shared by the webhook's admission and the
// secret-syncer's missed pulls, so both decide alike.
//
// Route takes a pod, its namespace's labels, the routing index and a Chooser. It lists each
// container's candidates, resolves every list in one probe round, rewrites the images and
// records why in kuik's annotations on the pod. It appends the kuik-inject-* pull secret of
// each winning entry that injects.
//
// Files:
//
//   - route.go: Route: containers → candidates → one probe round → decisions
//   - decision.go: Decision, DryRunDecision, Scope, Chooser; decide, pin, the dry-run diff
//   - records.go: the pod records: read, verify, write; RewrittenContainers for the syncer
//   - chooser.go: ProbeChooser: probes with the credential the kubelet will have
//   - print.go: PrintCandidates, the webhook's candidates subcommand
//
// Pod records are kuik.enix.io/original-images, rewritten-by, reason and dry-run. A record
// counts only where kuik could have written it (verify); others are dropped. The webhook and
// the secret-syncer read them with the same reader.
//
// ProbeChooser probes each candidate with the credential the kubelet will have for it: a
// secretRef entry's from its Secret, a provider entry's from the kuik-provider-* Secret the
// secret-syncer keeps for it (credentialprovider.SecretName). It never runs a credential
// plugin. It reads only the nodes' credential-provider configuration, so that an original the
// nodes' providers cover is not routed away on a 401 it would not get on the node.
//
// The package does no admission I/O: it imports neither the webhook nor the syncer
// (imports_test.go keeps each process out of the other's packages).
package route
