package keep

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/enix/kuik/internal/routing"
)

// Inventory is what kuik wrote into the mirrors: the state garbage collection needs, which
// must survive restarts (persisted by the caller, written before the first push).
type Inventory struct {
	Tags []Tag `json:"tags,omitempty"`
	// LastSweep is the time of the last sweep that ran; a clock before it is in doubt.
	LastSweep time.Time `json:"lastSweep,omitzero"`
}

// Tag is a tag kuik wrote in a destination repository.
type Tag struct {
	Mirror string `json:"mirror"`
	// Repository is the normalized destination repository, Tag the tag in it.
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	// Digest is what kuik pushed under the tag, when known.
	Digest string `json:"digest,omitempty"`
	// Origin is the image the tag is a copy of, for the self-heal of a retained tag.
	Origin string `json:"origin,omitempty"`
	// UnusedSince is the first sweep that found the tag unused; zero while in use.
	UnusedSince time.Time `json:"unusedSince,omitzero"`
}

func (t *Tag) key() [3]string { return [3]string{t.Mirror, t.Repository, t.Tag} }

// TagOf is the inventory entry for a Want's destination; false for a destination with no tag
// (a digest-only origin), which garbage collection never deletes.
func TagOf(w *Want) (Tag, bool) {
	repo, tag, ok := splitTag(w.Destination)
	if !ok {
		return Tag{}, false
	}
	return Tag{Mirror: w.Mirror, Repository: repo, Tag: tag, Digest: w.Digest, Origin: w.Origin}, true
}

// Retained are the Wants of the inventoried tags that plan does not want any more but that stay
// within their mirror's retention at now, at PriorityTemplate, so that a retained tag deleted
// behind kuik's back is copied back. A tag with no recorded Origin, or of a mirror not in
// mirrors, is left out. Sorted like Plan.Keep.
func Retained(inv Inventory, plan *Plan, mirrors []Mirror, now time.Time) []Want {
	var out []Want
	for i := range inv.Tags {
		t := &inv.Tags[i]
		j := slices.IndexFunc(mirrors, func(m Mirror) bool { return m.Name == t.Mirror })
		if j < 0 || t.Origin == "" {
			continue
		}
		ref := t.Repository + ":" + t.Tag
		if _, wanted := plan.Used.wanted[ref]; wanted {
			continue
		}
		why := "retained"
		if !t.UnusedSince.IsZero() {
			if now.Sub(t.UnusedSince) >= mirrors[j].retention() {
				continue
			}
			why = "retained, unused since " + t.UnusedSince.UTC().Format(time.RFC3339)
		}
		out = append(out, Want{Mirror: t.Mirror, Origin: t.Origin, Digest: t.Digest, Destination: ref, Priority: PriorityTemplate, Why: why})
	}
	slices.SortFunc(out, func(a, b Want) int {
		return cmp.Or(strings.Compare(a.Mirror, b.Mirror), strings.Compare(a.Destination, b.Destination))
	})
	return out
}

// With returns the inventory with t added, or with the digest of the same tag updated; changed
// is false when it already held exactly that. An existing UnusedSince is kept: only a sweep
// clears it.
func (inv Inventory) With(t Tag) (out Inventory, changed bool) {
	t.UnusedSince = time.Time{}
	i := slices.IndexFunc(inv.Tags, func(o Tag) bool { return o.key() == t.key() })
	if i >= 0 && (t.Digest == "" || inv.Tags[i].Digest == t.Digest) {
		return inv, false
	}
	out = Inventory{Tags: slices.Clone(inv.Tags), LastSweep: inv.LastSweep}
	if i >= 0 {
		out.Tags[i].Digest = t.Digest
		return out, true
	}
	out.Tags = append(out.Tags, t)
	return out, true
}

// Without returns the inventory without the deleted tags (call it once the registry confirmed).
func (inv Inventory) Without(deleted []Tag) Inventory {
	out := Inventory{LastSweep: inv.LastSweep}
	for _, t := range inv.Tags {
		if !slices.ContainsFunc(deleted, func(d Tag) bool { return d.key() == t.key() }) {
			out.Tags = append(out.Tags, t)
		}
	}
	return out
}

// Safety is what the caller knows about the completeness of its inputs.
type Safety struct {
	// Synced: every cache the Plan was computed from has synced.
	Synced bool
	// ListFailed: a list failed since the last sweep (an informer relist, a registry tags/list).
	ListFailed bool
	// ClockDoubt: the caller doubts its clock (e.g. it disagrees with the API server's).
	ClockDoubt bool
	// ClusterID, when set, is this cluster's: a tag without its suffix ([routing.IsClusterTag])
	// is another cluster's, or from before the ID was set, and the sweep leaves it untouched
	// even if the Inventory holds it. The Plan must come from an index WithClusterID(ClusterID).
	ClusterID string
}

// Hold says why a sweep deleted nothing it would otherwise have.
type Hold string

const (
	HoldUnsynced   Hold = "Unsynced"
	HoldListFailed Hold = "ListFailed"
	// HoldClockDoubt: the caller doubts the clock, or it reads before the last sweep.
	HoldClockDoubt Hold = "ClockDoubt"
)

// MaxDeletePercent bounds the tags one sweep deletes: 10 % of the inventory, rounded down, and
// at least one when any is due, so that a mirror of fewer than 10 tags is collected too.
const MaxDeletePercent = 10

// Sweep is a garbage-collection decision.
type Sweep struct {
	// Inventory is the new inventory: UnusedSince stamped or cleared. Deleted tags are still in
	// it; drop them with [Inventory.Without] once the registry confirmed.
	Inventory Inventory
	// Changed: Inventory differs from the input (persist it).
	Changed bool
	// Delete are the tags to delete, by tag, oldest UnusedSince first.
	Delete []Tag
	// Due counts the tags past retention, deleted now or deferred by the 10 % bound; 0 while
	// the sweep is held for unsynced caches or a failed list.
	Due int
	// Held is empty when the sweep ran unhindered.
	Held Hold
}

// DecideSweep decides one garbage-collection sweep over inv at now. A tag is in use when
// plan.Used has it (a live pod runs it, a Want's destination, or an image a template names,
// for a mirror with CountTemplates): its UnusedSince is cleared. An unused tag is stamped once,
// at the first sweep that sees it unused, and deleted once its mirror's retention has passed
// since. Tags of a mirror not in mirrors (keep turned off, mirror gone) are left as they are.
//
// Safety valves: while unsynced or after a failed list only stamps are cleared (nothing is
// stamped, nothing deleted); under clock doubt (safety.ClockDoubt, or now before
// inv.LastSweep) nothing is deleted and new stamps take the later of now and LastSweep; at most
// [MaxDeletePercent] of the inventory is deleted per sweep. With safety.ClusterID set, only
// this cluster's tags are stamped, deleted and counted in that bound.
func DecideSweep(inv Inventory, plan *Plan, mirrors []Mirror, now time.Time, safety Safety) Sweep {
	held := Hold("")
	switch {
	case !safety.Synced:
		held = HoldUnsynced
	case safety.ListFailed:
		held = HoldListFailed
	case safety.ClockDoubt || now.Before(inv.LastSweep):
		held = HoldClockDoubt
	}
	stamp := now
	if inv.LastSweep.After(stamp) {
		stamp = inv.LastSweep
	}
	byName := make(map[string]*Mirror, len(mirrors))
	for i := range mirrors {
		byName[mirrors[i].Name] = &mirrors[i]
	}

	s := Sweep{Inventory: Inventory{Tags: slices.Clone(inv.Tags), LastSweep: inv.LastSweep}, Held: held}
	var due []int
	mine := 0 // the tags this cluster may delete: the bound's base
	for i := range s.Inventory.Tags {
		t := &s.Inventory.Tags[i]
		if safety.ClusterID != "" && !routing.IsClusterTag(t.Tag, safety.ClusterID) {
			continue
		}
		mine++
		m, ok := byName[t.Mirror]
		if !ok {
			continue
		}
		switch {
		case plan.Used.Has(t.Repository, t.Tag, t.Digest, m.CountTemplates):
			if !t.UnusedSince.IsZero() {
				t.UnusedSince, s.Changed = time.Time{}, true
			}
		case held == HoldUnsynced || held == HoldListFailed:
		case t.UnusedSince.IsZero():
			t.UnusedSince, s.Changed = stamp, true
		case now.Sub(t.UnusedSince) >= m.retention():
			due = append(due, i)
		}
	}
	s.Due = len(due)
	if held == HoldUnsynced || held == HoldListFailed {
		return s
	}
	// A doubted clock is not recorded: a time that jumped ahead, once persisted, would hold
	// every sweep until real time caught up with it.
	if held == "" && now.After(s.Inventory.LastSweep) {
		s.Inventory.LastSweep, s.Changed = now, true
	}
	if held != "" {
		return s
	}
	slices.SortFunc(due, func(a, b int) int {
		ta, tb := &s.Inventory.Tags[a], &s.Inventory.Tags[b]
		return cmp.Or(ta.UnusedSince.Compare(tb.UnusedSince), strings.Compare(ta.Mirror, tb.Mirror),
			strings.Compare(ta.Repository, tb.Repository), strings.Compare(ta.Tag, tb.Tag))
	})
	if limit := maxDeletes(mine); len(due) > limit {
		due = due[:limit]
	}
	for _, i := range due {
		s.Delete = append(s.Delete, s.Inventory.Tags[i])
	}
	return s
}

// maxDeletes is the bound of one sweep over an inventory of n tags.
func maxDeletes(n int) int {
	return max(1, n*MaxDeletePercent/100)
}
