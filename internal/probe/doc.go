// Package probe tells whether an image can be pulled from a registry right now, with a manifest
// HEAD as the OCI distribution spec defines it (go-containerregistry speaks the protocol:
// ping, token exchange, HEAD).
//
// A Prober collapses identical concurrent probes into one call and caches every result for a
// short TTL keyed by (reference, insecure, credential), so a 50-replica rollout costs one probe
// per candidate. [Prober.Resolve] probes the candidate lists of every container of a pod at
// once and resolves each list to its first available candidate, so the worst case of a whole
// pod is one probe timeout, not a sum.
//
// A Prober is bounded whatever its callers ask: at most MaxInFlight probes run at once (a
// probe that would exceed it is not started and reports [Skipped]), and as many again for
// dry runs ([Target.Trial]), which never take the others' bound; at most MaxConnsPerHost
// connections go to one registry, and no probe starts once its caller's deadline has passed.
// Probes that were started outlive their caller by at most the probe timeout.
//
// # Where things are
//
//	target.go    what a probe takes and finds: Target, Credential, Result, Registry
//	probe.go     the Prober: its options, the cache, the collapsing of concurrent probes
//	resolve.go   Resolve, ResolveChoices and First: the candidate lists of a pod, probed at once
//	head.go      the manifest HEAD against a registry, and what its errors mean
package probe
