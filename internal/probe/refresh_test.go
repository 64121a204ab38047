package probe_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testutil"
)

// done is a context that has ended: a probe through it answers from the cache or not at all
// (Skipped), so it tells whether a caller would have waited on a registry.
func done() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func runRefresher(t *testing.T, p *probe.Prober) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = p.RunRefresher(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
}

// An entry callers keep reading is probed again before it lapses: over several TTLs, no read
// ever finds it gone (a read through an ended context would then be Skipped).
func TestRefreshAheadKeepsAnEntryInUseFresh(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1")}
	p := probe.New(probe.Options{Timeout: 200 * time.Millisecond, TTL: 500 * time.Millisecond})
	if r := p.Probe(t.Context(), target); r != probe.Available {
		t.Fatalf("first probe: %s", r)
	}
	runRefresher(t, p)
	before := reg.ManifestRequests()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if r := p.Probe(done(), target); r != probe.Available {
			t.Fatalf("a read %s after the first probe found %s: the entry lapsed", time.Since(end.Add(-2*time.Second)).Round(time.Millisecond), r)
		}
	}
	if n := reg.ManifestRequests() - before; n < 2 {
		t.Errorf("%d refresh probes over four TTLs, want several", n)
	}
}

// A registry that answers again is seen by the next refresh: no caller has to wait on a probe
// to learn it.
func TestRefreshSeesARegistryThatAnswersAgain(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1")}
	reg.SetBehavior(testutil.Fail)
	p := probe.New(probe.Options{Timeout: 200 * time.Millisecond, TTL: 500 * time.Millisecond})
	if r := p.Probe(t.Context(), target); r != probe.Unreachable {
		t.Fatalf("first probe of a failing registry: %s", r)
	}
	runRefresher(t, p)
	reg.SetBehavior(testutil.Serve)
	var last probe.Result
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		last = p.Probe(done(), target)
		if last == probe.Skipped {
			t.Fatal("a read found the entry lapsed")
		}
		return last == probe.Available, nil
	})
	if err != nil {
		t.Fatalf("the recovered registry was never seen: last read %s", last)
	}
}

// Nobody reads an entry for Idle: it is refreshed no more, and lapses.
func TestRefreshStopsForEntriesNobodyReads(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1")}
	p := probe.New(probe.Options{Timeout: 100 * time.Millisecond, TTL: 300 * time.Millisecond, Refresh: probe.RefreshOptions{Idle: 400 * time.Millisecond}})
	if r := p.Probe(t.Context(), target); r != probe.Available {
		t.Fatalf("first probe: %s", r)
	}
	runRefresher(t, p)
	time.Sleep(1500 * time.Millisecond) // idle for well over Idle and the TTL
	settled := reg.ManifestRequests()
	time.Sleep(time.Second)
	if n := reg.ManifestRequests() - settled; n != 0 {
		t.Errorf("%d refresh probes of an entry nobody read for over a second (Idle 400ms)", n)
	}
	if r := p.Probe(done(), target); r != probe.Skipped {
		t.Errorf("an idle entry is still cached (%s): it should have lapsed", r)
	}
}

// Trial (dry-run) readers alone never keep an entry refreshed.
func TestRefreshIgnoresTrialReaders(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1"), Trial: true}
	p := probe.New(probe.Options{Timeout: 100 * time.Millisecond, TTL: 300 * time.Millisecond})
	if r := p.Probe(t.Context(), target); r != probe.Available {
		t.Fatalf("first probe: %s", r)
	}
	runRefresher(t, p)
	before := reg.ManifestRequests()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.Probe(done(), target)
	}
	if n := reg.ManifestRequests() - before; n != 0 {
		t.Errorf("%d refresh probes for an entry only trials read", n)
	}
}

// maxConcurrent is a transport that counts the requests in flight and keeps their maximum.
type maxConcurrent struct {
	next      http.RoundTripper
	mu        sync.Mutex
	now, most int
}

func (m *maxConcurrent) RoundTrip(req *http.Request) (*http.Response, error) {
	m.mu.Lock()
	m.now++
	m.most = max(m.most, m.now)
	m.mu.Unlock()
	defer func() { m.mu.Lock(); m.now--; m.mu.Unlock() }()
	return m.next.RoundTrip(req)
}

func (m *maxConcurrent) reset() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	most := m.most
	m.most = m.now
	return most
}

// Twenty entries of a hanging registry in use: at most PerRegistry refreshes hang on it at
// once, at most PerSecond start a second (PerRegistry alone would let 2 start every
// timeout, about 13 in the 2 s), and none takes room from a deciding probe
// (MaxInFlight 1 here).
func TestRefreshIsBoundedPerRegistryAndPerSecond(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	good := testutil.NewRegistry(t, "", "")
	fresh := probe.Target{Reference: good.Push(t, "acme/fresh:v1")}
	var targets []probe.Target
	for i := range 20 {
		targets = append(targets, probe.Target{Reference: hanging.Push(t, "acme/app:v"+string(rune('a'+i)))})
	}
	tr := &maxConcurrent{next: remote.DefaultTransport}
	var refreshed atomic.Int64
	p := probe.New(probe.Options{
		Timeout: 300 * time.Millisecond, TTL: 600 * time.Millisecond, MaxInFlight: 64, Transport: tr,
		Refresh: probe.RefreshOptions{PerRegistry: 2, PerSecond: 2, Refreshed: func(string) { refreshed.Add(1) }},
	})
	for _, target := range targets {
		if r := p.Probe(t.Context(), target); r != probe.Available {
			t.Fatalf("first probe: %s", r)
		}
	}
	hanging.SetBehavior(testutil.Hang)
	tr.reset()
	runRefresher(t, p)
	start := time.Now()
	keepReading := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			for _, target := range targets {
				p.Probe(done(), target)
			}
		}
	}
	keepReading(2 * time.Second)
	elapsed := time.Since(start)
	if most := tr.reset(); most > 2 {
		t.Errorf("%d requests in flight to the hanging registry at once, want at most PerRegistry (2)", most)
	}
	if n, bound := refreshed.Load(), int64(2*elapsed.Seconds()+2+1); n > bound || n == 0 {
		t.Errorf("%d refreshes in %s, want some and at most %d (2 a second, burst 2)", n, elapsed.Round(time.Millisecond), bound)
	}

	// A deciding probe while refreshes hang: not Skipped, whatever MaxInFlight.
	q := probe.New(probe.Options{Timeout: 300 * time.Millisecond, TTL: 600 * time.Millisecond, MaxInFlight: 1, Refresh: probe.RefreshOptions{PerRegistry: 1}})
	hanging.SetBehavior(testutil.Serve)
	if r := q.Probe(t.Context(), targets[0]); r != probe.Available {
		t.Fatalf("first probe: %s", r)
	}
	hanging.SetBehavior(testutil.Hang)
	runRefresher(t, q)
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		q.Probe(done(), targets[0])
		return q.InFlight() == 1, nil
	}); err != nil {
		t.Fatal("no refresh went in flight")
	}
	if r := q.Probe(t.Context(), fresh); r != probe.Available {
		t.Errorf("a deciding probe while a refresh is in flight and MaxInFlight is 1: %s", r)
	}
}

// A list Resolve answers from the cache counts as a read: the refresher keeps it fresh past
// Idle, as long as decisions keep reading it.
func TestResolveReadsKeepAnEntryRefreshed(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1")}
	p := probe.New(probe.Options{Timeout: 100 * time.Millisecond, TTL: 300 * time.Millisecond, Refresh: probe.RefreshOptions{Idle: 400 * time.Millisecond}})
	if got := p.First(t.Context(), []probe.Target{target}); got != 0 {
		t.Fatalf("first decision: %d", got)
	}
	runRefresher(t, p)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := p.First(done(), []probe.Target{target}); got != 0 {
			t.Fatalf("a decision read past Idle found the entry lapsed (%d)", got)
		}
	}
}

// Dry-run reads of an entry a decision read once do not keep it refreshed past Idle.
func TestTrialReadsDoNotKeepADecisiveEntryRefreshed(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	target := probe.Target{Reference: reg.Push(t, "acme/app:v1")}
	trial := target
	trial.Trial = true
	p := probe.New(probe.Options{Timeout: 100 * time.Millisecond, TTL: 300 * time.Millisecond, Refresh: probe.RefreshOptions{Idle: 300 * time.Millisecond}})
	if r := p.Probe(t.Context(), target); r != probe.Available {
		t.Fatalf("first probe: %s", r)
	}
	runRefresher(t, p)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.Probe(done(), trial)
	}
	settled := reg.ManifestRequests()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.Probe(done(), trial)
	}
	if n := reg.ManifestRequests() - settled; n != 0 {
		t.Errorf("%d refreshes past Idle of an entry only dry runs read since", n)
	}
}
