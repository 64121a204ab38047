package probe

import (
	"context"
	"slices"
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
	r := p.newRefresher()
	defer r.giveBack()
	tick := time.NewTicker(p.refreshTick())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, registry := range r.step(ctx) {
				if p.opts.Refresh.Refreshed != nil {
					p.opts.Refresh.Refreshed(registry)
				}
			}
		}
	}
}

// refreshBatch bounds the entries the refresher examines under one hold of the Prober's lock:
// an admission's cache read waits on a batch at most, never on a pass over the cache.
const refreshBatch = 256

// dueRecord: the result stored for key lapses at expires. It is stale once the entry is gone
// or stored again (with another expires).
type dueRecord struct {
	key     string
	expires time.Time
}

// dueHeap is a binary min-heap of records by expires.
type dueHeap []dueRecord

func (h *dueHeap) push(d dueRecord) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		up := (i - 1) / 2
		if !s[i].expires.Before(s[up].expires) {
			break
		}
		s[i], s[up] = s[up], s[i]
		i = up
	}
}

func (h *dueHeap) pop() dueRecord {
	s := *h
	top, last := s[0], len(s)-1
	s[0], s[last] = s[last], dueRecord{}
	s = s[:last]
	for i := 0; ; {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(s) && s[c].expires.Before(s[least].expires) {
				least = c
			}
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return top
}

// pushDueLocked records that k's result, stored at now, lapses at expires. It drops two
// lapsed records at most on the way, so that without a refresher p.due keeps about one
// record per live entry, and no store costs more than a few heap steps.
func (p *Prober) pushDueLocked(k string, expires, now time.Time) {
	for range 2 {
		if len(p.due) == 0 || now.Before(p.due[0].expires) {
			break
		}
		p.due.pop()
	}
	p.due.push(dueRecord{key: k, expires: expires})
}

// refresher is RunRefresher's state.
type refresher struct {
	p       *Prober
	limiter *rate.Limiter
	// soon holds the records taken from p.due that lapse within refreshAhead, by expires: the
	// entries to refresh, or to look at again next tick (read by nobody deciding lately, or
	// their registry at PerRegistry).
	soon []dueRecord
	// taken is take's buffer: what grows soon grows it outside the lock.
	taken []dueRecord
	// onHold, when set (tests, benchmarks), is told after every hold of the Prober's lock
	// how many entries it examined and how long it held the lock.
	onHold func(examined int, held time.Duration)
}

func (p *Prober) newRefresher() *refresher {
	perSecond := p.opts.Refresh.PerSecond
	return &refresher{
		p:       p,
		limiter: rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond))),
		taken:   make([]dueRecord, 0, refreshBatch),
	}
}

// step starts the refresh probes due now, those lapsing first first, within the bounds, and
// returns the Registry labels of those it started. It holds the Prober's lock for
// refreshBatch entries at most at a time, and parses nothing under it.
func (r *refresher) step(ctx context.Context) (started []string) {
	now := r.p.opts.Now()
	horizon := now.Add(r.p.refreshAhead())
	took := false
	for more := true; more; {
		r.locked(func() int {
			var n int
			n, more = r.take(now, horizon)
			took = took || n > 0
			return n
		})
		r.soon = append(r.soon, r.taken...)
	}
	if took {
		slices.SortFunc(r.soon, func(a, b dueRecord) int { return a.expires.Compare(b.expires) })
	}
	kept, rest := 0, r.soon
	for len(rest) > 0 {
		batch := rest[:min(len(rest), refreshBatch)]
		rest = rest[len(batch):]
		keep, more := 0, true
		r.locked(func() int {
			keep, more = r.start(ctx, now, batch, &started)
			return len(batch)
		})
		kept += copy(r.soon[kept:], batch[:keep])
		if !more {
			kept += copy(r.soon[kept:], rest)
			break
		}
	}
	clear(r.soon[kept:])
	r.soon = r.soon[:kept]
	return started
}

// giveBack returns r.soon to p.due, for a refresher started later.
func (r *refresher) giveBack() {
	for len(r.soon) > 0 {
		batch := r.soon[len(r.soon)-min(len(r.soon), refreshBatch):]
		r.locked(func() int {
			for _, d := range batch {
				r.p.due.push(d)
			}
			return len(batch)
		})
		r.soon = r.soon[:len(r.soon)-len(batch)]
	}
}

// locked runs f under the Prober's lock; f returns how many entries it examined.
func (r *refresher) locked(f func() int) {
	r.p.mu.Lock()
	var begin time.Time
	if r.onHold != nil {
		begin = time.Now()
	}
	n := f()
	var held time.Duration
	if r.onHold != nil {
		held = time.Since(begin)
	}
	r.p.mu.Unlock()
	if r.onHold != nil {
		r.onHold(n, held)
	}
}

// take moves to r.taken the records of p.due lapsing by horizon, refreshBatch at most, and
// drops those already lapsed; it returns how many it took from p.due, and whether more may be
// due. Called with the lock held.
func (r *refresher) take(now, horizon time.Time) (int, bool) {
	p := r.p
	r.taken = r.taken[:0]
	for n := range refreshBatch {
		if len(p.due) == 0 || p.due[0].expires.After(horizon) {
			return n, false
		}
		if d := p.due.pop(); now.Before(d.expires) {
			r.taken = append(r.taken, d)
		}
	}
	return refreshBatch, true
}

// start starts the refreshes of batch the bounds allow, in order, and moves the records to
// look at again next tick to the front of batch; it returns their number, and false when a
// bound on all refreshes (MaxInFlight, the rate) stopped it. Called with the lock held.
func (r *refresher) start(ctx context.Context, now time.Time, batch []dueRecord, started *[]string) (int, bool) {
	p := r.p
	idle := now.Add(-p.opts.Refresh.Idle)
	kept := 0
	for i, d := range batch {
		if p.refreshes >= p.opts.Refresh.MaxInFlight {
			return kept + copy(batch[kept:], batch[i:]), false
		}
		c, ok := p.cache[d.key]
		if !ok || !c.expires.Equal(d.expires) || !now.Before(c.expires) || c.result == Invalid {
			continue // gone, stored again since (a record of its own), lapsed, or never changing
		}
		if _, ok := p.flights[d.key]; ok {
			continue // being probed: stored again when it lands
		}
		if !c.decisive || c.used.Before(idle) || p.perRegistry[c.host] >= p.opts.Refresh.PerRegistry {
			batch[kept] = d // not now; maybe before it lapses
			kept++
			continue
		}
		if !r.limiter.AllowN(now, 1) {
			return kept + copy(batch[kept:], batch[i:]), false
		}
		t := c.target
		t.Trial = false
		f := &flight{done: make(chan struct{}), refresh: true, host: c.host}
		p.launchLocked(ctx, d.key, t, f, c)
		*started = append(*started, t.Registry)
	}
	return kept, true
}
