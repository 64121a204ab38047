package probe_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testutil"
)

// A host that hangs costs the probe timeout once: the next decision on it, for another image,
// takes the next candidate after the hinted wait, before a deadline shorter than the probe
// timeout. Once the host answers again, its candidate is chosen as before: a hint never
// routes past a candidate that answers within the hinted wait.
func TestHintedHostCostsTheHintedWaitNotTheTimeout(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	good := testutil.NewRegistry(t, "", "")
	alt := probe.Target{Reference: good.Push(t, "acme/app:v1")}
	third := probe.Target{Reference: hanging.Push(t, "acme/third:v1")}
	hanging.SetBehavior(testutil.Hang)
	var passed atomic.Int64
	p := probe.New(probe.Options{Timeout: time.Second, Hints: probe.HintOptions{Wait: 100 * time.Millisecond, PassedOver: func(string) { passed.Add(1) }}})

	if got := p.First(t.Context(), []probe.Target{{Reference: hanging.Host + "/acme/app:v1"}, alt}); got != 1 {
		t.Fatalf("first decision: %d, want the alternative", got)
	}
	if passed.Load() != 0 {
		t.Fatal("the first decision on a host never seen was hinted")
	}
	if _, ok := p.Hinted()[hanging.Host]; !ok {
		t.Fatalf("hinted hosts %v, want %s", p.Hinted(), hanging.Host)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	if got := p.First(ctx, []probe.Target{{Reference: hanging.Host + "/acme/other:v1"}, alt}); got != 1 {
		t.Fatalf("hinted decision: %d, want the alternative", got)
	}
	if ctx.Err() != nil {
		t.Error("the hinted decision waited until the caller's deadline (700ms, the probe timeout is 1s)")
	}
	if passed.Load() != 1 {
		t.Errorf("%d candidates passed over at the hinted wait, want 1", passed.Load())
	}

	hanging.SetBehavior(testutil.Serve)
	if got := p.First(t.Context(), []probe.Target{third, alt}); got != 0 {
		t.Errorf("a hinted host that answers again: decision %d, want its candidate (0)", got)
	}
	if _, ok := p.Hinted()[hanging.Host]; ok {
		t.Error("the host answered, and is still hinted")
	}
}

// A 429, a 401 and a 503 are answers: never a hint. (A pull-through cache may answer 5xx
// for one repository a pod author chose: that must not hint the host for every tenant.)
func TestRateLimitAuthAndServerErrorsAreNeverHints(t *testing.T) {
	limited := testutil.NewRegistry(t, "", "")
	limited.SetBehavior(testutil.RateLimit)
	failing := testutil.NewRegistry(t, "", "")
	failing.SetBehavior(testutil.Fail)
	private := testutil.NewRegistry(t, "u", "p")
	good := testutil.NewRegistry(t, "", "")
	alt := probe.Target{Reference: good.Push(t, "acme/app:v1")}
	p := probe.New(probe.Options{Timeout: time.Second, Hints: probe.HintOptions{Wait: 100 * time.Millisecond}})
	for _, original := range []string{limited.Host + "/acme/app:v1", failing.Host + "/acme/app:v1", private.Push(t, "acme/app:v1")} {
		if got := p.First(t.Context(), []probe.Target{{Reference: original}, alt}); got != 1 {
			t.Fatalf("%s: decision %d, want the alternative", original, got)
		}
	}
	if h := p.Hinted(); len(h) != 0 {
		t.Errorf("hinted hosts %v after a 429, a 503 and a 401, want none", h)
	}
}

// A hint lapses after MaxAge.
func TestHintsLapse(t *testing.T) {
	p := probe.New(probe.Options{Hints: probe.HintOptions{Wait: 100 * time.Millisecond, MaxAge: 200 * time.Millisecond}})
	if r := p.Probe(t.Context(), probe.Target{Reference: testutil.DeadAddr(t) + "/acme/app:v1"}); r != probe.Unreachable {
		t.Fatalf("probe of a failing registry: %s", r)
	}
	if len(p.Hinted()) != 1 {
		t.Fatalf("hinted hosts %v, want the failing one", p.Hinted())
	}
	time.Sleep(300 * time.Millisecond)
	if h := p.Hinted(); len(h) != 0 {
		t.Errorf("hinted hosts %v past MaxAge, want none", h)
	}
}

// The hinted wait is one per decision: ten containers whose candidates are all on a hinted
// host cost one hinted wait, not ten.
func TestHintedWaitIsOnePerDecision(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	good := testutil.NewRegistry(t, "", "")
	alt := probe.Target{Reference: good.Push(t, "acme/app:v1")}
	p := probe.New(probe.Options{Timeout: 2 * time.Second, Hints: probe.HintOptions{Wait: 100 * time.Millisecond}})
	if got := p.First(t.Context(), []probe.Target{{Reference: hanging.Host + "/acme/learn:v1"}, alt}); got != 1 {
		t.Fatalf("learning decision: %d", got)
	}
	var lists [][]probe.Target
	for i := range 10 {
		lists = append(lists, []probe.Target{{Reference: fmt.Sprintf("%s/acme/c%d:v1", hanging.Host, i)}, alt})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	got := p.Resolve(ctx, lists, nil)
	for l, i := range got {
		if i != 1 {
			t.Errorf("list %d: %d, want the alternative", l, i)
		}
	}
	if ctx.Err() != nil {
		t.Error("ten hinted lists waited past 600ms: the hinted wait (100ms) adds up per list")
	}
}

// A candidate passed over at the hinted wait, then one Skipped (MaxInFlight reached, here by
// the first one's own probe): the list waits for the passed-over candidate after all, and
// takes it when it answers within the deadline, rather than leaving the pod with no choice.
// The Skipped candidate still ends the list when it does not answer: nothing after it, even
// cached and available, is chosen.
func TestAPassedOverCandidateIsWaitedForBeforeASkippedOne(t *testing.T) {
	slow := testutil.NewRegistry(t, "", "")
	slowRef := slow.Push(t, "acme/slow:v1")
	front := testutil.NewFront(t, slow)
	// Through the front, acme/slow's manifest answers after 400ms, acme/dead's never.
	front.Intercept(func(_ http.ResponseWriter, req *http.Request) bool {
		switch {
		case strings.Contains(req.URL.Path, "/acme/slow/manifests/"):
			time.Sleep(400 * time.Millisecond)
			return false
		case strings.Contains(req.URL.Path, "/acme/dead/manifests/"):
			<-req.Context().Done()
			return true
		}
		return false
	})
	good := testutil.NewRegistry(t, "", "")
	cachedAlt := probe.Target{Reference: good.Push(t, "acme/alt:v1")}
	var passed atomic.Int64
	p := probe.New(probe.Options{Timeout: time.Second, MaxInFlight: 1, Hints: probe.HintOptions{Wait: 100 * time.Millisecond, PassedOver: func(string) { passed.Add(1) }}})
	if r := p.Probe(t.Context(), cachedAlt); r != probe.Available {
		t.Fatalf("alternative: %s", r)
	}

	tests := map[string]struct {
		list []probe.Target
		want int
	}{
		"a passed-over candidate answering within the deadline is chosen": {
			list: []probe.Target{{Reference: strings.Replace(slowRef, slow.Host, front.Host, 1)}, {Reference: good.Host + "/acme/skipped:v1"}},
			want: 0,
		},
		"a passed-over candidate that never answers leaves the Skipped one ending the list": {
			list: []probe.Target{{Reference: front.Host + "/acme/dead:v1"}, {Reference: good.Host + "/acme/skipped:v2"}, cachedAlt},
			want: -1,
		},
	}
	learn := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Any answer clears the hint: each case learns it anew.
			learn++
			if r := p.Probe(t.Context(), probe.Target{Reference: fmt.Sprintf("%s/acme/dead:learn%d", front.Host, learn)}); r != probe.Unreachable {
				t.Fatalf("probe of the hanging repository: %s", r)
			}
			passed.Store(0)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			if got := p.First(ctx, tc.list); got != tc.want {
				t.Errorf("First = %d, want %d", got, tc.want)
			}
			if n := passed.Load(); n != 1 {
				t.Errorf("%d candidates passed over at the hinted wait, want 1 (the first)", n)
			}
		})
	}
}
