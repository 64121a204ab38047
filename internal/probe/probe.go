// Package probe tells whether an image can be pulled from a registry right now, with a manifest
// HEAD as the OCI distribution spec defines it (go-containerregistry speaks the protocol:
// ping, token exchange, HEAD).
//
// A Prober collapses identical concurrent probes into one call and caches every result for a
// short TTL keyed by (reference, insecure, credential), so a 50-replica rollout costs one probe
// per candidate. First probes a whole candidate list concurrently and resolves to the first
// available in list order, so the worst case is one probe timeout, not a sum.
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
	"golang.org/x/sync/singleflight"
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

// Registry is the registry host of a reference, for metrics labels; "" when it does not parse.
func Registry(reference string) string {
	ref, err := name.ParseReference(reference)
	if err != nil {
		return ""
	}
	return ref.Context().RegistryStr()
}

// Observer is told about every probe that went to a registry (not cache hits).
type Observer func(registry string, result Result, took time.Duration)

// Options configure a Prober.
type Options struct {
	// Timeout bounds one probe (default 2s).
	Timeout time.Duration
	// TTL is how long a result is reused (default 10s).
	TTL time.Duration
	// Transport carries the HTTP requests (default: go-containerregistry's).
	Transport http.RoundTripper
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Observe, when set, is called after every registry round.
	Observe Observer
}

// Prober probes registries with collapsing and caching.
type Prober struct {
	opts  Options
	group singleflight.Group

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	result  Result
	expires time.Time
}

// New returns a Prober.
func New(opts Options) *Prober {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.Transport == nil {
		opts.Transport = remote.DefaultTransport
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Prober{opts: opts, cache: map[string]cached{}}
}

// Probe returns the result for one target, from the cache when fresh.
func (p *Prober) Probe(ctx context.Context, t Target) Result {
	k := t.key()
	if r, ok := p.lookup(k); ok {
		return r
	}
	// The probe runs detached from the caller's context so that one caller giving up does not
	// fail the others waiting on the same flight; it is bounded by the probe timeout instead.
	ch := p.group.DoChan(k, func() (any, error) {
		if r, ok := p.lookup(k); ok {
			return r, nil
		}
		start := p.opts.Now()
		r := p.head(context.WithoutCancel(ctx), t)
		if p.opts.Observe != nil {
			p.opts.Observe(Registry(t.Reference), r, p.opts.Now().Sub(start))
		}
		p.mu.Lock()
		p.cache[k] = cached{result: r, expires: p.opts.Now().Add(p.opts.TTL)}
		p.mu.Unlock()
		return r, nil
	})
	select {
	case res := <-ch:
		return res.Val.(Result)
	case <-ctx.Done():
		return Unreachable
	}
}

func (p *Prober) lookup(k string) (Result, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.cache[k]
	if !ok {
		return "", false
	}
	if !p.opts.Now().Before(c.expires) {
		delete(p.cache, k)
		return "", false
	}
	return c.result, true
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

// First probes every target concurrently and returns the index of the first available one in
// list order, or -1, with each target's result ("" for targets whose result was not needed
// before the answer was known).
func (p *Prober) First(ctx context.Context, targets []Target) (int, []Result) {
	results := make([]Result, len(targets))
	// The steady state of a rollout: every result needed is cached, no goroutine is worth it.
	for i, t := range targets {
		r, ok := p.lookup(t.key())
		if !ok {
			break
		}
		results[i] = r
		if r == Available {
			return i, results
		}
	}
	done := make([]chan Result, len(targets))
	for i, t := range targets {
		done[i] = make(chan Result, 1)
		go func() { done[i] <- p.Probe(ctx, t) }()
	}
	for i := range targets {
		results[i] = <-done[i]
		if results[i] == Available {
			return i, results
		}
	}
	return -1, results
}

func (p *Prober) head(ctx context.Context, t Target) Result {
	var opts []name.Option
	if t.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(t.Reference, opts...)
	if err != nil {
		return Invalid
	}
	auth := authn.Anonymous
	if t.Credential != (Credential{}) {
		auth = authn.FromConfig(authn.AuthConfig{Username: t.Credential.Username, Password: t.Credential.Password})
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	_, err = remote.Head(ref,
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithTransport(p.opts.Transport),
		remote.WithUserAgent("kuik-webhook"),
		// One attempt: the probe timeout is the whole budget, and the cache does the rest.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	)
	return classify(err)
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
