package probe

import (
	"context"
	"sort"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of [RefreshOptions].
const (
	// DefaultRefreshIdle: an entry nobody read for this long is no longer refreshed.
	DefaultRefreshIdle = 2 * time.Minute
	// DefaultRefreshesPerSecond bounds the rate of refresh probes, all registries together.
	DefaultRefreshesPerSecond = 20
	// DefaultRefreshesPerRegistry bounds the refresh probes in flight to one registry host.
	DefaultRefreshesPerRegistry = 2
)

// RefreshOptions bound [Prober.RunRefresher]. Refresh probes never take room from the probes
// admissions wait on: they have in-flight bounds of their own.
type RefreshOptions struct {
	// Idle: an entry is refreshed only if a caller that decides (not a trial) read it within
	// Idle (default DefaultRefreshIdle).
	Idle time.Duration
	// PerSecond bounds the refresh probes started each second (default
	// DefaultRefreshesPerSecond), with a burst of as many.
	PerSecond float64
	// PerRegistry bounds the refresh probes in flight to one registry host (default
	// DefaultRefreshesPerRegistry).
	PerRegistry int
	// MaxInFlight bounds the refresh probes in flight in all (default a quarter of the
	// Prober's MaxInFlight, at least 1).
	MaxInFlight int
	// Refreshed, when set, is called for every refresh probe started, with its target's
	// Registry label.
	Refreshed func(registry string)
}

func (o RefreshOptions) withDefaults(maxInFlight int) RefreshOptions {
	if o.Idle <= 0 {
		o.Idle = DefaultRefreshIdle
	}
	if o.PerSecond <= 0 {
		o.PerSecond = DefaultRefreshesPerSecond
	}
	if o.PerRegistry <= 0 {
		o.PerRegistry = DefaultRefreshesPerRegistry
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = max(1, maxInFlight/4)
	}
	return o
}

// refreshTick is how often the refresher looks at the cache: a twentieth of the TTL, within
// [50ms, 1s].
func (p *Prober) refreshTick() time.Duration {
	return min(max(p.opts.TTL/20, 50*time.Millisecond), time.Second)
}

// refreshAhead is how long before an entry lapses its refresh starts: the probe timeout and
// two ticks, so that even a probe that times out lands before the entry lapses; at most
// the TTL.
func (p *Prober) refreshAhead() time.Duration {
	return min(p.opts.Timeout+2*p.refreshTick(), p.opts.TTL)
}

// RunRefresher probes again, in the background and before they lapse, the cached results a
// deciding caller read within RefreshOptions.Idle, so that such callers read a fresh answer
// and almost never wait on a probe: with a registry that hangs, an admission costs a cache
// read, not the probe timeout, and a registry that answers again is seen within one refresh.
// Results that never change (Invalid) are not refreshed. It returns when ctx ends.
func (p *Prober) RunRefresher(ctx context.Context) error {
	limiter := rate.NewLimiter(rate.Limit(p.opts.Refresh.PerSecond), max(1, int(p.opts.Refresh.PerSecond)))
	tick := time.NewTicker(p.refreshTick())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, registry := range p.refresh(ctx, limiter) {
				if p.opts.Refresh.Refreshed != nil {
					p.opts.Refresh.Refreshed(registry)
				}
			}
		}
	}
}

// due is an entry to refresh.
type due struct {
	key     string
	expires time.Time
	target  Target
	host    string
}

// refresh starts the refresh probes due now, those lapsing first first, within the bounds,
// and returns the Registry labels of those it started.
func (p *Prober) refresh(ctx context.Context, limiter *rate.Limiter) (started []string) {
	now := p.opts.Now()
	horizon := now.Add(p.refreshAhead())
	idle := now.Add(-p.opts.Refresh.Idle)

	p.mu.Lock()
	defer p.mu.Unlock()
	var todo []due
	for k, c := range p.cache {
		if !c.decisive || c.result == Invalid || c.expires.After(horizon) || !now.Before(c.expires) || c.used.Before(idle) {
			continue
		}
		if _, ok := p.flights[k]; ok {
			continue
		}
		todo = append(todo, due{key: k, expires: c.expires, target: c.target})
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].expires.Before(todo[j].expires) })
	for _, d := range todo {
		if p.refreshes >= p.opts.Refresh.MaxInFlight {
			return started
		}
		d.host = Registry(d.target.Reference)
		if p.perRegistry[d.host] >= p.opts.Refresh.PerRegistry {
			continue
		}
		if !limiter.AllowN(now, 1) {
			return started
		}
		t := d.target
		t.Trial = false
		f := &flight{done: make(chan struct{}), refresh: true, host: d.host}
		c := p.cache[d.key]
		p.launchLocked(ctx, d.key, t, f, c)
		started = append(started, t.Registry)
	}
	return started
}
