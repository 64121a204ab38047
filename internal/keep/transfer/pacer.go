package transfer

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PacerConfig sets a Pacer's budget; zero fields take the defaults.
type PacerConfig struct {
	// Rate is the manifest GETs per second allowed per host (default 10).
	Rate float64
	// Burst is how many manifest GETs a host's bucket holds (default 20).
	Burst int
	// Reserve is the fraction of an announced ratelimit-limit left unspent (default 0.5).
	Reserve float64
	// Freeze is how long a 429 without Retry-After or ratelimit-reset freezes a host (default 1m).
	Freeze time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Sleep waits d or until ctx is done (default a timer).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Pacer budgets manifest GETs per source host: a token bucket, a reserve below the announced
// ratelimit-remaining, and a freeze after a 429. Its Transport wraps the source transport.
type Pacer struct {
	cfg   PacerConfig
	mu    sync.Mutex
	hosts map[string]*hostBudget
}

// hostBudget is one host's state.
type hostBudget struct {
	tokens float64
	filled time.Time
	// limit and window come from ratelimit-limit; remaining from ratelimit-remaining at seen,
	// minus the manifest GETs sent since.
	limit     int
	window    time.Duration
	remaining int
	seen      time.Time
	known     bool
	// pending counts manifest GETs reserved by Wait and not yet sent.
	pending int
	frozen  time.Time
}

// QuotaError is a host frozen after a 429, or spent down to its reserve, until Until.
type QuotaError struct {
	Host  string
	Until time.Time
	// Frozen is true after a 429, false for a reserve reached.
	Frozen bool
}

func (e *QuotaError) Error() string {
	if e.Frozen {
		return fmt.Sprintf("%s answered 429: frozen until %s", e.Host, e.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s budget at its reserve until %s", e.Host, e.Until.UTC().Format(time.RFC3339))
}

// NewPacer returns a Pacer with cfg's zero fields set to the defaults.
func NewPacer(cfg PacerConfig) *Pacer {
	if cfg.Rate <= 0 {
		cfg.Rate = 10
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 20
	}
	if cfg.Reserve <= 0 || cfg.Reserve >= 1 {
		cfg.Reserve = 0.5
	}
	if cfg.Freeze <= 0 {
		cfg.Freeze = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return &Pacer{cfg: cfg, hosts: map[string]*hostBudget{}}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// host returns h's budget; p.mu is held.
func (p *Pacer) host(h string, now time.Time) *hostBudget {
	b, ok := p.hosts[h]
	if !ok {
		b = &hostBudget{tokens: float64(p.cfg.Burst), filled: now}
		p.hosts[h] = b
	}
	return b
}

// Reservation is n manifest GETs granted by Wait. Bind its context to the requests that spend
// it; Release returns what was not spent.
type Reservation struct {
	p    *Pacer
	host string
	mu   sync.Mutex
	left int
}

type reservationKey struct{}

// Bind returns ctx carrying r, so the Transport counts the manifest GETs it sends against r.
func (r *Reservation) Bind(ctx context.Context) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, reservationKey{}, r)
}

// Release gives back the manifest GETs of r not sent.
func (r *Reservation) Release() {
	if r == nil {
		return
	}
	r.mu.Lock()
	left := r.left
	r.left = 0
	r.mu.Unlock()
	r.p.mu.Lock()
	b := r.p.host(r.host, r.p.cfg.Now())
	b.pending = max(0, b.pending-left)
	r.p.mu.Unlock()
}

// spend counts one manifest GET against r; it reports whether r had one left.
func (r *Reservation) spend() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.left == 0 {
		return false
	}
	r.left--
	return true
}

// Wait grants n manifest GETs on host: it returns a *QuotaError at once when the host is
// frozen or n would take the announced remaining below the reserve, and otherwise waits for
// the host's token bucket.
func (p *Pacer) Wait(ctx context.Context, host string, n int) (*Reservation, error) {
	if n <= 0 {
		return &Reservation{p: p, host: host}, nil
	}
	p.mu.Lock()
	now := p.cfg.Now()
	b := p.host(host, now)
	if now.Before(b.frozen) {
		p.mu.Unlock()
		return nil, &QuotaError{Host: host, Until: b.frozen, Frozen: true}
	}
	if b.known && b.limit > 0 {
		reserve := int(math.Ceil(p.cfg.Reserve * float64(b.limit)))
		avail := p.estimate(b, now) - b.pending
		if avail-n < reserve {
			// A rolling window gives back limit/window GETs per unit of time.
			deficit := reserve + n - avail
			until := now.Add(time.Duration(float64(deficit) * float64(b.window) / float64(b.limit)))
			p.mu.Unlock()
			return nil, &QuotaError{Host: host, Until: until}
		}
	}
	b.tokens = math.Min(float64(p.cfg.Burst), b.tokens+now.Sub(b.filled).Seconds()*p.cfg.Rate)
	b.filled = now
	b.tokens -= float64(n)
	b.pending += n
	delay := time.Duration(0)
	if b.tokens < 0 {
		delay = time.Duration(-b.tokens / p.cfg.Rate * float64(time.Second))
	}
	p.mu.Unlock()
	r := &Reservation{p: p, host: host, left: n}
	if delay > 0 {
		if err := p.cfg.Sleep(ctx, delay); err != nil {
			r.Release()
			return nil, err
		}
	}
	return r, nil
}

// estimate is the remaining GETs of b now, refilled at limit per window since last seen.
func (p *Pacer) estimate(b *hostBudget, now time.Time) int {
	rem := b.remaining
	if b.window > 0 && b.limit > 0 {
		rem += int(now.Sub(b.seen).Seconds() * float64(b.limit) / b.window.Seconds())
	}
	return min(rem, b.limit)
}

// Remaining reports host's estimated remaining manifest GETs, and whether it announced any.
func (p *Pacer) Remaining(host string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	b := p.host(host, now)
	if !b.known {
		return 0, false
	}
	if b.limit == 0 {
		return b.remaining, true
	}
	return p.estimate(b, now), true
}

// FrozenUntil reports until when host is frozen by a 429 (zero when it is not).
func (p *Pacer) FrozenUntil(host string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	if b := p.host(host, now); now.Before(b.frozen) {
		return b.frozen
	}
	return time.Time{}
}

// Transport wraps inner: requests to a frozen host fail with a *QuotaError without being
// sent, manifest GETs are counted, and answers update the host's budget (ratelimit headers,
// a 429 freezes the host).
func (p *Pacer) Transport(inner http.RoundTripper) http.RoundTripper {
	return &pacedTransport{p: p, inner: inner}
}

type pacedTransport struct {
	p     *Pacer
	inner http.RoundTripper
}

func (t *pacedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, host := t.p, req.URL.Host
	manifestGET := req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/manifests/")
	p.mu.Lock()
	now := p.cfg.Now()
	b := p.host(host, now)
	if now.Before(b.frozen) {
		until := b.frozen
		p.mu.Unlock()
		return nil, &QuotaError{Host: host, Until: until, Frozen: true}
	}
	if manifestGET {
		b.remaining--
		if r, ok := req.Context().Value(reservationKey{}).(*Reservation); ok && r.host == host && r.spend() {
			b.pending = max(0, b.pending-1)
		}
	}
	p.mu.Unlock()
	resp, err := t.inner.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	p.observe(host, resp)
	return resp, nil
}

// observe updates host's budget from an answer.
func (p *Pacer) observe(host string, resp *http.Response) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	b := p.host(host, now)
	if limit, window, ok := parseRateLimit(resp.Header.Get("Ratelimit-Limit")); ok {
		b.limit, b.window = limit, window
	}
	if rem, _, ok := parseRateLimit(resp.Header.Get("Ratelimit-Remaining")); ok {
		b.remaining, b.seen, b.known = rem, now, true
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		b.frozen = now.Add(p.cfg.Freeze)
		if d, ok := retryAfter(resp.Header, now); ok {
			b.frozen = now.Add(d)
		}
		b.remaining, b.seen, b.known = 0, now, true
	}
}

// parseRateLimit parses Docker Hub's "100;w=21600": a count and an optional window in seconds.
func parseRateLimit(v string) (int, time.Duration, bool) {
	if v == "" {
		return 0, 0, false
	}
	parts := strings.Split(v, ";")
	n, err := strconv.Atoi(strings.TrimSpace(parts[0]))
	if err != nil || n < 0 {
		return 0, 0, false
	}
	var window time.Duration
	for _, p := range parts[1:] {
		if w, ok := strings.CutPrefix(strings.TrimSpace(p), "w="); ok {
			if s, err := strconv.Atoi(w); err == nil && s > 0 {
				window = time.Duration(s) * time.Second
			}
		}
	}
	return n, window, true
}

// retryAfter reads Retry-After (seconds or an HTTP date), else ratelimit-reset (seconds).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(0, t.Sub(now)), true
		}
	}
	if s, _, ok := parseRateLimit(h.Get("Ratelimit-Reset")); ok {
		return time.Duration(s) * time.Second, true
	}
	return 0, false
}
