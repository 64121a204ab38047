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
package probe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
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

// Defaults of [Options].
const (
	// DefaultTimeout bounds one probe, and so one admission: the webhook's admission budget is
	// DefaultTimeout + AdmissionMargin, and the chart's timeoutSeconds one second more.
	DefaultTimeout = 2 * time.Second
	// DefaultTTL is how long a result is reused.
	DefaultTTL = 10 * time.Second
	// DefaultMaxInFlight bounds the probes running at once.
	DefaultMaxInFlight = 256
	// DefaultMaxConnsPerHost bounds the connections to one registry.
	DefaultMaxConnsPerHost = 16
)

// Options configure a Prober.
type Options struct {
	// Timeout bounds one probe (default DefaultTimeout).
	Timeout time.Duration
	// TTL is how long a result is reused (default DefaultTTL).
	TTL time.Duration
	// MaxInFlight bounds the probes running at once (default DefaultMaxInFlight), and
	// separately the trial ones.
	MaxInFlight int
	// MaxConnsPerHost bounds the connections to one registry, per scheme (default
	// DefaultMaxConnsPerHost); applied to the default transport only.
	MaxConnsPerHost int
	// Transport carries the HTTP requests (default: a clone of go-containerregistry's with
	// MaxConnsPerHost set).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Observe, when set, is called after every registry round.
	Observe Observer
	// Skip, when set, is called for every probe not started, with SkipDeadline or SkipLimit.
	Skip func(reason string)
}

// Prober probes registries with collapsing and caching.
type Prober struct {
	opts Options

	mu      sync.Mutex
	cache   map[string]cached
	flights map[string]*flight
	// trials is the number of flights started by trial targets.
	trials int
}

type cached struct {
	result  Result
	digest  string
	expires time.Time
}

// flight is a probe on its way; result and digest are set before done is closed.
type flight struct {
	done   chan struct{}
	result Result
	digest string
	trial  bool // started by a trial target: counted in Prober.trials
}

// New returns a Prober.
func New(opts Options) *Prober {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxConnsPerHost <= 0 {
		opts.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if opts.Transport == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.MaxConnsPerHost = opts.MaxConnsPerHost
		opts.Transport = t
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Prober{opts: opts, cache: map[string]cached{}, flights: map[string]*flight{}}
}

// InFlight is the number of probes running now.
func (p *Prober) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.flights)
}

// Probe returns the result for one target, from the cache when fresh.
func (p *Prober) Probe(ctx context.Context, t Target) Result {
	r, _ := p.ProbeDigest(ctx, t)
	return r
}

// ProbeDigest is Probe and the manifest digest the registry answered with ("" unless
// Available).
func (p *Prober) ProbeDigest(ctx context.Context, t Target) (Result, string) {
	r, f := p.start(ctx, t, t.key())
	return wait(ctx, r, f)
}

// start returns the target's cached result, or the flight that will give it: a running one for
// the same key, or a new one. It starts nothing past ctx's deadline or beyond MaxInFlight.
func (p *Prober) start(ctx context.Context, t Target, k string) (answer, *flight) {
	p.mu.Lock()
	if c, ok := p.lookupLocked(k); ok {
		p.mu.Unlock()
		return answer{c.result, c.digest}, nil
	}
	if f, ok := p.flights[k]; ok {
		p.mu.Unlock()
		return answer{}, f
	}
	reason := ""
	switch {
	case ctx.Err() != nil:
		reason = SkipDeadline
	case t.Trial && p.trials >= p.opts.MaxInFlight:
		reason = SkipTrialLimit
	case !t.Trial && len(p.flights)-p.trials >= p.opts.MaxInFlight:
		reason = SkipLimit
	}
	if reason != "" {
		p.mu.Unlock()
		if p.opts.Skip != nil {
			p.opts.Skip(reason)
		}
		return answer{result: Skipped}, nil
	}
	f := &flight{done: make(chan struct{}), trial: t.Trial}
	p.flights[k] = f
	if f.trial {
		p.trials++
	}
	p.mu.Unlock()

	// The probe runs detached from the caller's context so that one caller giving up does not
	// fail the others waiting on the same flight; it is bounded by the probe timeout instead.
	go func() {
		begin := p.opts.Now()
		r, digest := p.safeHead(context.WithoutCancel(ctx), t)
		if p.opts.Observe != nil {
			p.opts.Observe(t.Registry, r, p.opts.Now().Sub(begin))
		}
		p.mu.Lock()
		p.cache[k] = cached{result: r, digest: digest, expires: p.opts.Now().Add(p.opts.TTL)}
		delete(p.flights, k)
		if f.trial {
			p.trials--
		}
		p.mu.Unlock()
		f.result, f.digest = r, digest
		close(f.done)
	}()
	return answer{}, f
}

// answer is a result and its digest.
type answer struct {
	result Result
	digest string
}

// wait returns a, or the flight's answer once it lands; Unreachable when ctx ends first.
func wait(ctx context.Context, a answer, f *flight) (Result, string) {
	if f == nil {
		return a.result, a.digest
	}
	select {
	case <-f.done: // landed: its result, even if ctx ended meanwhile
		return f.result, f.digest
	default:
	}
	select {
	case <-f.done:
		return f.result, f.digest
	case <-ctx.Done():
		return Unreachable, ""
	}
}

func (p *Prober) lookup(k string) (cached, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookupLocked(k)
}

func (p *Prober) lookupLocked(k string) (cached, bool) {
	c, ok := p.cache[k]
	if !ok {
		return cached{}, false
	}
	if !p.opts.Now().Before(c.expires) {
		delete(p.cache, k)
		return cached{}, false
	}
	return c, true
}

// Sweep drops expired results; call it periodically so the cache does not keep references that
// are no longer asked for.
func (p *Prober) Sweep() {
	now := p.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.cache {
		if !now.Before(c.expires) {
			delete(p.cache, k)
		}
	}
}

// Accept says whether a result makes candidate i of list l the list's choice. nil accepts
// Available only.
type Accept func(l, i int, r Result) bool

// Resolve probes every target of every list concurrently, each distinct target once, and
// returns for each list the index of its first accepted target in list order, or -1. A list
// stops at a Skipped target: what comes after it is not chosen over a candidate nobody probed. A list
// whose answer the cache already holds (every target before the first accepted one cached)
// starts no probe, so a warm rollout costs no goroutine. However many lists, the wait is one
// probe timeout at most.
func (p *Prober) Resolve(ctx context.Context, lists [][]Target, accept Accept) []int {
	choices := p.ResolveChoices(ctx, lists, accept)
	out := make([]int, len(choices))
	for l, c := range choices {
		out[l] = c.Index
	}
	return out
}

// Choice is what [Prober.ResolveChoices] found for one list.
type Choice struct {
	// Index is the chosen target's, -1 for none.
	Index int
	// Digest is the manifest digest the registry answered for it ("" for none, or when it was
	// accepted without being Available).
	Digest string
}

// ResolveChoices is Resolve, with the manifest digest of each chosen target: the digest of
// the very answer that chose it, so a tag that moves meanwhile cannot pair one answer's choice
// with another's digest.
func (p *Prober) ResolveChoices(ctx context.Context, lists [][]Target, accept Accept) []Choice {
	if accept == nil {
		accept = func(_, _ int, r Result) bool { return r == Available }
	}
	out := make([]Choice, len(lists))
	keys := make([][]string, len(lists))
	pending := false
	for l, targets := range lists {
		out[l].Index = -1
		keys[l] = make([]string, len(targets))
		resolved := false
		for i, t := range targets {
			keys[l][i] = t.key()
			if resolved {
				continue
			}
			c, ok := p.lookup(keys[l][i])
			if !ok {
				pending, out[l].Index = true, -2 // to be probed
				resolved = true
				continue
			}
			if accept(l, i, c.result) {
				out[l], resolved = Choice{Index: i, Digest: c.digest}, true
			}
		}
	}
	if !pending {
		return out
	}
	type slot struct {
		a answer
		f *flight
	}
	slots := map[string]slot{}
	for l, targets := range lists {
		if out[l].Index != -2 {
			continue
		}
		for i, t := range targets {
			if _, ok := slots[keys[l][i]]; !ok {
				a, f := p.start(ctx, t, keys[l][i])
				slots[keys[l][i]] = slot{a, f}
			}
		}
	}
	for l := range lists {
		if out[l].Index != -2 {
			continue
		}
		out[l].Index = -1
		for i := range lists[l] {
			s := slots[keys[l][i]]
			r, digest := wait(ctx, s.a, s.f)
			if r == Skipped {
				// Nobody knows whether this candidate is available: never route past it
				// (a flood of other pods must not move this one off a healthy original).
				break
			}
			if accept(l, i, r) {
				out[l] = Choice{Index: i, Digest: digest}
				break
			}
		}
	}
	return out
}

// First probes every target concurrently and returns the index of the first available one in
// list order, or -1.
func (p *Prober) First(ctx context.Context, targets []Target) int {
	return p.Resolve(ctx, [][]Target{targets}, nil)[0]
}

// safeHead is head run where no caller's recover reaches: a panic (a registry answer the
// client library chokes on; an original's registry is the pod author's to choose) counts as
// Unreachable instead of ending the process, and the flight still lands.
func (p *Prober) safeHead(ctx context.Context, t Target) (r Result, digest string) {
	defer func() {
		if recover() != nil {
			r, digest = Unreachable, ""
		}
	}()
	return p.head(ctx, t)
}

// head sends the manifest HEAD. go-containerregistry refuses an answer without a valid
// Docker-Content-Digest, and one for a digest reference whose digest differs from the one asked
// for, so an Available answer always comes with the digest it names.
func (p *Prober) head(ctx context.Context, t Target) (Result, string) {
	var opts []name.Option
	if t.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(t.Reference, opts...)
	if err != nil {
		return Invalid, ""
	}
	auth := authn.Anonymous
	if t.Credential != (Credential{}) {
		auth = authn.FromConfig(authn.AuthConfig{Username: t.Credential.Username, Password: t.Credential.Password})
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	desc, err := remote.Head(ref,
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithTransport(p.opts.Transport),
		remote.WithUserAgent("kuik-webhook"),
		// One attempt: the probe timeout is the whole budget, and the cache does the rest.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	)
	if err != nil {
		return classify(err), ""
	}
	return Available, desc.Digest.String()
}

func classify(err error) Result {
	if err == nil {
		return Available
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return NotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			return InvalidAuth
		case http.StatusTooManyRequests:
			return QuotaExceeded
		}
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return NotFound
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return InvalidAuth
			case transport.TooManyRequestsErrorCode:
				return QuotaExceeded
			}
		}
		return Unreachable
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return Unreachable
	}
	return Unreachable
}
