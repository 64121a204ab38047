package keeper

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/keep"
)

func TestQueuePick(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	it := func(host, dest string, p keep.Priority) *item {
		return &item{host: host, label: host, want: keep.Want{Mirror: "m", Destination: dest, Priority: p}}
	}
	for name, tc := range map[string]struct {
		items  []*item
		parked map[string]time.Time
		// setup changes the items before they are queued, after once they are.
		setup func([]*item)
		after func(*queue, []*item)
		want  []string
	}{
		"the highest priority first, whatever the host": {
			items: []*item{it("a", "a1", keep.PriorityTemplate), it("b", "b1", keep.PriorityLive), it("c", "c1", keep.PriorityRouted)},
			want:  []string{"c1", "b1", "a1"},
		},
		"round-robin among hosts at one priority, FIFO within a host": {
			items: []*item{it("a", "a1", keep.PriorityLive), it("a", "a2", keep.PriorityLive), it("a", "a3", keep.PriorityLive), it("b", "b1", keep.PriorityLive), it("c", "c1", keep.PriorityLive)},
			want:  []string{"a1", "b1", "c1", "a2", "a3"},
		},
		"a parked host waits, the others go on": {
			items:  []*item{it("a", "a1", keep.PriorityRouted), it("b", "b1", keep.PriorityLive)},
			parked: map[string]time.Time{"a": now.Add(time.Minute)},
			want:   []string{"b1"},
		},
		"a host parked in the past is served": {
			items:  []*item{it("a", "a1", keep.PriorityRouted)},
			parked: map[string]time.Time{"a": now.Add(-time.Second)},
			want:   []string{"a1"},
		},
		"an item in backoff is not picked; a dropped one is skipped": {
			items: []*item{it("a", "a1", keep.PriorityLive), it("a", "a2", keep.PriorityLive), it("b", "b1", keep.PriorityLive)},
			setup: func(its []*item) { its[0].notBefore = now.Add(time.Minute); its[2].dropped = true },
			want:  []string{"a2"},
		},
		"a queued item whose priority rose is served at the new one, once": {
			items: []*item{it("a", "a1", keep.PriorityTemplate), it("a", "a2", keep.PriorityLive), it("a", "a3", keep.PriorityTemplate)},
			after: func(q *queue, its []*item) {
				its[2].want.Priority = keep.PriorityRouted
				q.reprioritize(its[2], now)
			},
			want: []string{"a3", "a2", "a1"},
		},
		"an item is queued once": {
			items: []*item{it("a", "a1", keep.PriorityLive), it("a", "a1", keep.PriorityLive)},
			setup: func(its []*item) { its[1] = its[0] },
			want:  []string{"a1"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(tc.items)
			}
			q := newQueue()
			for h, until := range tc.parked {
				q.park(h, until)
			}
			for _, i := range tc.items {
				q.push(i, now)
			}
			if tc.after != nil {
				tc.after(&q, tc.items)
			}
			q.promote(now)
			var got []string
			for i := q.pick(now); i != nil; i = q.pick(now) {
				got = append(got, i.want.Destination)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("picked (-want +got):\n%s", d)
			}
			// The depth counts what is still queued (in backoff, parked, or dropped unpopped).
			waiting := map[string]int{}
			for _, i := range tc.items {
				if i.queued {
					waiting[i.label]++
				}
			}
			for h, n := range q.depth {
				if n != waiting[h] {
					t.Errorf("queue depth of %s is %d, %d items queued", h, n, waiting[h])
				}
			}
		})
	}
}

func TestQueuePromoteAndDepth(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := newQueue()
	a := &item{host: "a", label: "a", notBefore: now.Add(time.Minute), want: keep.Want{Destination: "a1", Priority: keep.PriorityLive}}
	q.push(a, now)
	if got := q.pick(now); got != nil {
		t.Fatalf("picked %s in backoff", got.want.Destination)
	}
	if next := q.promote(now); !next.Equal(a.notBefore) {
		t.Fatalf("next wake %s, want %s", next, a.notBefore)
	}
	if q.depth["a"] != 1 {
		t.Fatalf("depth %d while delayed, want 1", q.depth["a"])
	}
	later := now.Add(2 * time.Minute)
	q.promote(later)
	if got := q.pick(later); got != a {
		t.Fatalf("picked %v after the backoff, want a1", got)
	}
	if q.depth["a"] != 0 || a.queued {
		t.Fatalf("depth %d, queued %v after the pick", q.depth["a"], a.queued)
	}
}

func TestBackoffDoublesUpToItsMaximum(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, backoff(n, 30*time.Second, 30*time.Minute))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if !slices.Equal(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}

func TestClockDoubtWhenWallAndMonotonicClocksDisagree(t *testing.T) {
	wall := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mono := wall
	k := NewKeeper(Options{}, Deps{})
	k.mono = func() time.Time { return mono }
	steps := []struct {
		wall, mono time.Duration
		doubt      bool
	}{
		{0, 0, false}, // the first sweep has nothing to compare with
		{time.Hour, time.Hour, false},
		{time.Hour + 30*time.Second, time.Hour, false},
		{48 * time.Hour, time.Hour, true}, // the wall clock jumped ahead
		{time.Hour, time.Hour, false},
		{-time.Hour, time.Hour, true}, // it went back
	}
	for i, s := range steps {
		wall, mono = wall.Add(s.wall), mono.Add(s.mono)
		if got := k.clockDoubt(wall); got != s.doubt {
			t.Fatalf("step %d: doubt %v, want %v", i, got, s.doubt)
		}
	}
}
