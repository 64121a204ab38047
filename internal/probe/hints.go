package probe

import (
	"context"
	"strings"
	"time"
)

// Defaults of [HintOptions].
const (
	// DefaultHintedWait is how long a candidate whose host was Unreachable lately is waited
	// for before the next one in order is taken.
	DefaultHintedWait = 200 * time.Millisecond
	// DefaultHintMaxAge is how long a host seen Unreachable stays hinted.
	DefaultHintMaxAge = 5 * time.Minute
	// maxHintedHosts bounds the hinted hosts: pod authors choose the hosts of originals, so a
	// flood of invented ones evicts the oldest hints, never grows the map.
	maxHintedHosts = 4096
)

// HintOptions shorten an admission's wait on a registry that hangs. A host a probe got no
// HTTP answer from (no answer in time, a refused connection, a TLS or network error) is
// hinted for MaxAge, until any answer from it: every status is an answer (a 401, 404, 429, or
// a 5xx a pull-through cache gives for one repository), never a hint. A candidate on a hinted
// host, with candidates after it, is still probed, but waited for at most Wait: if it has
// not answered by then, the next candidate in order is taken for this decision, and its
// probe goes on and is cached. A hint can cost a decision at most Wait; it never routes
// past a candidate that answers within it.
//
// The secret-syncer's leader adds hints every replica shares ([Prober.SetSharedHints]): by
// repository, each as old as the leader's last check that found it unanswering, ignored past
// MaxAge. They are waited on the same way.
type HintOptions struct {
	// Wait is the hinted wait; zero or less turns hints off.
	Wait time.Duration
	// MaxAge is how long a host stays hinted (default DefaultHintMaxAge).
	MaxAge time.Duration
	// PassedOver, when set, is called for every candidate passed over at the hinted wait,
	// with its target's Registry label.
	PassedOver func(registry string)
}

func (o HintOptions) withDefaults() HintOptions {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultHintMaxAge
	}
	return o
}

// noteHostLocked records what a probe of host found.
func (p *Prober) noteHostLocked(host string, r Result, answered bool) {
	if host == "" || r == Invalid {
		return
	}
	switch {
	case !answered:
		if _, ok := p.unreachable[host]; !ok && len(p.unreachable) >= maxHintedHosts {
			oldest, at := "", time.Time{}
			for h, t := range p.unreachable {
				if oldest == "" || t.Before(at) {
					oldest, at = h, t
				}
			}
			delete(p.unreachable, oldest)
		}
		p.unreachable[host] = p.opts.Now()
	default:
		delete(p.unreachable, host)
	}
}

// hinted reports whether t's host was found Unreachable within MaxAge by this replica, or
// its repository by the secret-syncer's leader (the shared hints, checked within MaxAge).
func (p *Prober) hinted(t Target) bool {
	now := p.opts.Now()
	if shared := p.shared.Load(); shared != nil {
		if at, ok := (*shared)[RepositoryOf(t.Reference)]; ok && fresh(now, at, p.opts.Hints.MaxAge) {
			return true
		}
	}
	host := Registry(t.Reference)
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.unreachable[host]
	if !ok {
		return false
	}
	if now.Sub(at) >= p.opts.Hints.MaxAge {
		delete(p.unreachable, host)
		return false
	}
	return true
}

// fresh reports whether a hint checked at is younger than maxAge. A time ahead of now by
// more than maxAge (a clock far off, or a hand-written status) is not fresh: no hint lasts
// longer than maxAge past the moment it is read.
func fresh(now, at time.Time, maxAge time.Duration) bool {
	age := now.Sub(at)
	return age < maxAge && age > -maxAge
}

// SetSharedHints replaces the hints every webhook replica shares: for each repository (as
// [RepositoryOf] writes it), when the secret-syncer's leader last found it giving no answer
// (the routing resources' status.unavailable). The map is the Prober's from then on: the
// caller must not change it. A hint older than MaxAge is ignored.
func (p *Prober) SetSharedHints(hints map[string]time.Time) {
	if len(hints) == 0 {
		p.shared.Store(nil)
		return
	}
	p.shared.Store(&hints)
}

// RepositoryOf is a normalized reference's repository: without its tag and digest
// (docker.io/library/nginx:1.27@sha256:… gives docker.io/library/nginx).
func RepositoryOf(reference string) string {
	if i := strings.IndexByte(reference, '@'); i >= 0 {
		reference = reference[:i]
	}
	if i := strings.LastIndexByte(reference, ':'); i > strings.LastIndexByte(reference, '/') {
		reference = reference[:i]
	}
	return reference
}

// passOver reports whether the caller should take the next candidate instead of waiting on
// f: hints are on, t's host is hinted, and f has not landed within the hinted wait. The wait
// is one per decision, whatever its number of lists: deadline, zero until the first hinted
// wait, is when it ends.
func (p *Prober) passOver(ctx context.Context, t Target, f *flight, deadline *time.Time) bool {
	if p.opts.Hints.Wait <= 0 || !p.hinted(t) {
		return false
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(p.opts.Hints.Wait)
	}
	timer := time.NewTimer(max(time.Until(*deadline), 0))
	defer timer.Stop()
	select {
	case <-f.done:
		return false
	case <-ctx.Done():
		return false // wait answers Unreachable at once
	case <-timer.C:
	}
	if p.opts.Hints.PassedOver != nil {
		p.opts.Hints.PassedOver(t.Registry)
	}
	return true
}

// Hinted returns the registry hosts found Unreachable within MaxAge, and when.
func (p *Prober) Hinted() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.unreachable))
	now := p.opts.Now()
	for h, at := range p.unreachable {
		if now.Sub(at) < p.opts.Hints.MaxAge {
			out[h] = at
		}
	}
	return out
}
