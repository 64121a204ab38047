package probe

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// Result is what a probe found.
type Result string

const (
	// Available: the registry answered the manifest HEAD with success.
	Available Result = "Available"
	// NotFound: the registry answered that the manifest does not exist (404).
	NotFound Result = "NotFound"
	// Unreachable: no answer in time, a network error or a server error (5xx).
	Unreachable Result = "Unreachable"
	// InvalidAuth: the registry refused the credential, or asked for one (401, 403).
	InvalidAuth Result = "InvalidAuth"
	// QuotaExceeded: the registry rate-limited the probe (429).
	QuotaExceeded Result = "QuotaExceeded"
	// Invalid: the reference does not parse; never worth retrying.
	Invalid Result = "Invalid"
	// Skipped: no probe was sent, because the caller's deadline had passed or MaxInFlight
	// probes were already running. Never cached.
	Skipped Result = "Skipped"
)

// Reasons a probe is skipped, as reported to Options.Skip.
const (
	SkipDeadline = "deadline"
	SkipLimit    = "limit"
	// SkipTrialLimit: a trial (dry-run) probe at the trials' own bound; it never held back a
	// probe that decides.
	SkipTrialLimit = "trial-limit"
)

// Credential is a registry credential; the zero value is anonymous.
type Credential struct {
	Username, Password string
}

// Target is one thing to probe.
type Target struct {
	Reference  string
	Insecure   bool
	Credential Credential
	// Registry labels the probe's metrics. Callers set it to a value from a bounded set (a
	// registry a routing resource declares, or a catch-all), never to a host a pod author
	// chose; it is not part of the cache key.
	Registry string
	// Trial: the probe only tells what a dry run would do. A trial probe that starts a flight
	// counts against a bound of its own (MaxInFlight again), so dry runs never leave the
	// probes that decide without room; it shares the cache and the flights of identical
	// targets like any other. Not part of the cache key.
	Trial bool
}

// key identifies a target in the cache without keeping the secret in clear.
func (t Target) key() string {
	insecure := "s|"
	if t.Insecure {
		insecure = "i|"
	}
	if t.Credential == (Credential{}) {
		return insecure + "anonymous|" + t.Reference
	}
	h := sha256.Sum256([]byte(t.Credential.Username + "\x00" + t.Credential.Password))
	return insecure + hex.EncodeToString(h[:8]) + "|" + t.Reference
}

// Registry is the registry host of a reference; "" when it does not parse.
func Registry(reference string) string {
	ref, err := name.ParseReference(reference)
	if err != nil {
		return ""
	}
	return ref.Context().RegistryStr()
}

// Observer is told about every probe that went to a registry (not cache hits), with the
// target's Registry label.
type Observer func(registry string, result Result, took time.Duration)
