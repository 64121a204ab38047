package probe

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

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
	// Refresh bounds the refresh-ahead probes [Prober.RunRefresher] sends.
	Refresh RefreshOptions
	// Hints, when Hints.Wait is positive, shorten the wait on a registry host seen
	// Unreachable recently ([HintOptions]).
	Hints HintOptions
}

// Prober probes registries with collapsing and caching.
type Prober struct {
	opts Options

	mu      sync.Mutex
	cache   map[string]cached
	flights map[string]*flight
	// trials is the number of flights started by trial targets.
	trials int
	// refreshes is the number of refresh flights, and perRegistry theirs by registry host.
	refreshes   int
	perRegistry map[string]int
	// unreachable is when a probe last found each registry host Unreachable, cleared by any
	// answer from it (hints.go).
	unreachable map[string]time.Time
	// shared are the hints every replica reads ([Prober.SetSharedHints]).
	shared atomic.Pointer[map[string]time.Time]
	// due has a record of every result stored, by when it lapses: the refresher's way to the
	// entries lapsing soon without a pass over the cache (refresh.go).
	due dueHeap
}

type cached struct {
	result  Result
	digest  string
	expires time.Time
	// used is when a caller last read the entry or its flight; decisive that one of them was
	// not a trial; target what a refresh probes (the last decisive caller's). Only decisive
	// entries used within RefreshOptions.Idle are refreshed.
	used     time.Time
	decisive bool
	target   Target
	// host is target's registry host, parsed when the result was stored.
	host string
}

// flight is a probe on its way; result and digest are set before done is closed.
type flight struct {
	done   chan struct{}
	result Result
	digest string
	trial  bool // started by a trial target: counted in Prober.trials
	// refresh: started by the refresher, counted in Prober.refreshes and under host in
	// Prober.perRegistry, outside MaxInFlight.
	refresh bool
	host    string
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
	opts.Refresh = opts.Refresh.withDefaults(opts.MaxInFlight)
	opts.Hints = opts.Hints.withDefaults()
	return &Prober{opts: opts, cache: map[string]cached{}, flights: map[string]*flight{}, perRegistry: map[string]int{}, unreachable: map[string]time.Time{}}
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
		p.useLocked(k, c, t)
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
	case !t.Trial && len(p.flights)-p.trials-p.refreshes >= p.opts.MaxInFlight:
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
	p.launchLocked(ctx, k, t, f, cached{used: p.opts.Now(), decisive: !t.Trial, target: t})
	p.mu.Unlock()
	return answer{}, f
}

// useLocked records that a caller with target t read entry c of key k.
func (p *Prober) useLocked(k string, c cached, t Target) {
	if t.Trial {
		return // a dry run's read keeps nothing refreshed
	}
	c.used, c.decisive, c.target = p.opts.Now(), true, t
	p.cache[k] = c
}

// launchLocked registers flight f for key k and starts its probe of t; the result is cached
// with use's record of who used the entry. The probe runs detached from ctx so that one
// caller giving up does not fail the others waiting on the same flight; the probe timeout
// bounds it instead.
func (p *Prober) launchLocked(ctx context.Context, k string, t Target, f *flight, use cached) {
	p.flights[k] = f
	if f.trial {
		p.trials++
	}
	if f.refresh {
		p.refreshes++
		p.perRegistry[f.host]++
	}
	go func() {
		begin := p.opts.Now()
		r, digest, answered, _ := p.safeHead(context.WithoutCancel(ctx), t)
		if p.opts.Observe != nil {
			p.opts.Observe(t.Registry, r, p.opts.Now().Sub(begin))
		}
		host := f.host // a refresh's, parsed when it was chosen
		if host == "" {
			host = Registry(t.Reference)
		}
		p.mu.Lock()
		p.noteHostLocked(host, r, answered)
		if prev, ok := p.cache[k]; ok && prev.used.After(use.used) {
			use = prev // used again while the refresh ran
		}
		now := p.opts.Now()
		use.result, use.digest, use.expires, use.host = r, digest, now.Add(p.opts.TTL), host
		p.cache[k] = use
		p.pushDueLocked(k, use.expires, now)
		delete(p.flights, k)
		if f.trial {
			p.trials--
		}
		if f.refresh {
			p.refreshes--
			if p.perRegistry[f.host]--; p.perRegistry[f.host] <= 0 {
				delete(p.perRegistry, f.host)
			}
		}
		p.mu.Unlock()
		f.result, f.digest = r, digest
		close(f.done)
	}()
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

// read is the cached result of k for a caller with target t, recorded as a use (for the
// refresher).
func (p *Prober) read(k string, t Target) (cached, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.lookupLocked(k)
	if ok {
		p.useLocked(k, c, t)
	}
	return c, ok
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
	for h, at := range p.unreachable {
		if now.Sub(at) >= p.opts.Hints.MaxAge {
			delete(p.unreachable, h)
		}
	}
}
