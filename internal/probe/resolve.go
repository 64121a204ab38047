package probe

import (
	"context"
	"time"
)

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
	n := 0
	for _, targets := range lists {
		n += len(targets)
	}
	all := make([]string, n) // one allocation for every list's keys
	keys := make([][]string, len(lists))
	pending := false
	for l, targets := range lists {
		out[l].Index = -1
		keys[l], all = all[:len(targets):len(targets)], all[len(targets):]
		resolved := false
		for i, t := range targets {
			keys[l][i] = t.key()
			if resolved {
				continue
			}
			c, ok := p.read(keys[l][i], t)
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
	var hintedUntil time.Time // the decision's one hinted wait
	for l := range lists {
		if out[l].Index == -2 {
			out[l] = p.choose(ctx, l, lists[l], keys[l], slots, accept, &hintedUntil)
		}
	}
	return out
}

// choose waits for list l's candidates in order and returns the first accepted. A candidate
// passed over at the hinted wait (passOver) is left for now; if a Skipped candidate comes
// after it, the list goes back to the first passed over and waits for each in order, passing
// over none: a hint may cost the hinted wait, never the choice waiting would give. A Skipped
// candidate ends the list: nobody knows whether it is available, so nothing after it is
// chosen (a flood of other pods must not move this one off a healthy original).
func (p *Prober) choose(ctx context.Context, l int, targets []Target, keys []string, slots map[string]slot, accept Accept, hintedUntil *time.Time) Choice {
	first, back := -1, false // the first candidate passed over; whether the list went back to it
	for i := 0; i < len(targets); i++ {
		s := slots[keys[i]]
		if !back && i < len(targets)-1 && s.f != nil && p.passOver(ctx, targets[i], s.f, hintedUntil) {
			// Its host was Unreachable lately and it did not answer within the hinted wait:
			// the next candidate in order. Its probe goes on and is cached.
			if first < 0 {
				first = i
			}
			continue
		}
		r, digest := wait(ctx, s.a, s.f)
		if r == Skipped {
			if first >= 0 && !back {
				i, back = first-1, true // the loop's i++ makes it first
				continue
			}
			return Choice{Index: -1}
		}
		if accept(l, i, r) {
			return Choice{Index: i, Digest: digest}
		}
	}
	return Choice{Index: -1}
}

// slot is what ResolveChoices started for one target: its answer, or the flight that will
// give it.
type slot struct {
	a answer
	f *flight
}

// First probes every target concurrently and returns the index of the first available one in
// list order, or -1.
func (p *Prober) First(ctx context.Context, targets []Target) int {
	return p.Resolve(ctx, [][]Target{targets}, nil)[0]
}
