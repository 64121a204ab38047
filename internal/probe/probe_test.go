package probe_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
)

func TestProbeClassifiesRegistryAnswers(t *testing.T) {
	open := testutil.NewRegistry(t, "", "")
	openRef := open.Push(t, "acme/app:v1")
	private := testutil.NewRegistry(t, "puller", "s3cret")
	privateRef := private.Push(t, "acme/app:v1")
	limited := testutil.NewRegistry(t, "", "")
	limitedRef := limited.Push(t, "acme/app:v1")
	limited.SetBehavior(testutil.RateLimit)
	failing := testutil.NewRegistry(t, "", "")
	failing.SetBehavior(testutil.Fail)
	closed := closedAddress(t)

	good := probe.Credential{Username: "puller", Password: "s3cret"}
	tests := map[string]struct {
		target probe.Target
		want   probe.Result
	}{
		"existing image on an open registry is available":   {probe.Target{Reference: openRef}, probe.Available},
		"missing tag is not found":                          {probe.Target{Reference: open.Host + "/acme/app:v2"}, probe.NotFound},
		"missing repository is not found":                   {probe.Target{Reference: open.Host + "/acme/nope:v1"}, probe.NotFound},
		"private registry without credential is refused":    {probe.Target{Reference: privateRef}, probe.InvalidAuth},
		"private registry with a wrong password is refused": {probe.Target{Reference: privateRef, Credential: probe.Credential{Username: "puller", Password: "nope"}}, probe.InvalidAuth},
		"private registry with its credential is available": {probe.Target{Reference: privateRef, Credential: good}, probe.Available},
		"rate-limited registry is over quota":               {probe.Target{Reference: limitedRef}, probe.QuotaExceeded},
		"registry answering 503 is unreachable":             {probe.Target{Reference: failing.Host + "/acme/app:v1"}, probe.Unreachable},
		"nothing listening is unreachable":                  {probe.Target{Reference: closed + "/acme/app:v1"}, probe.Unreachable},
		"reference that does not parse is invalid":          {probe.Target{Reference: "UPPER/case::"}, probe.Invalid},
	}
	p := probe.New(probe.Options{Timeout: 2 * time.Second})
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := p.Probe(t.Context(), tc.target); got != tc.want {
				t.Errorf("Probe(%s) = %s, want %s", tc.target.Reference, got, tc.want)
			}
		})
	}
}

// First must not wait for the probes before the winner one after the other: all candidates are
// probed at once, so a list of hanging registries costs one timeout. The registry holds every
// request until three have arrived at the same time, which only concurrent probes achieve.
func TestFirstProbesCandidatesConcurrently(t *testing.T) {
	slow := testutil.NewRegistry(t, "", "")
	slow.SetBehavior(testutil.Hang)
	fast := testutil.NewRegistry(t, "", "")
	fastRef := fast.Push(t, "acme/app:v1")

	p := probe.New(probe.Options{Timeout: 5 * time.Second})
	targets := []probe.Target{
		{Reference: slow.Host + "/a/app:v1"},
		{Reference: slow.Host + "/b/app:v1"},
		{Reference: slow.Host + "/c/app:v1"},
		{Reference: fastRef},
	}
	got := make(chan int, 1)
	go func() { got <- p.First(t.Context(), targets) }()
	if !slow.WaitHung(3, 4*time.Second) {
		t.Fatalf("only %d of 3 slow probes were in flight together: probes are not concurrent", slow.Hung())
	}
	// Releasing the hung requests makes them fail; the fast candidate wins in list order.
	slow.Close()
	if i := <-got; i != 3 {
		t.Errorf("First = %d, want 3", i)
	}
}

func TestFirstPrefersListOrderOverSpeed(t *testing.T) {
	r := testutil.NewRegistry(t, "", "")
	a := r.Push(t, "acme/a:v1")
	b := r.Push(t, "acme/b:v1")
	p := probe.New(probe.Options{})
	tests := map[string]struct {
		targets []probe.Target
		want    int
	}{
		"first available wins":             {[]probe.Target{{Reference: a}, {Reference: b}}, 0},
		"unavailable first is passed over": {[]probe.Target{{Reference: r.Host + "/acme/none:v1"}, {Reference: b}}, 1},
		"nothing available":                {[]probe.Target{{Reference: r.Host + "/acme/none:v1"}}, -1},
		"empty list":                       {nil, -1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := p.First(t.Context(), tc.targets); got != tc.want {
				t.Errorf("First = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestIdenticalConcurrentProbesCollapseAndResultsAreCached(t *testing.T) {
	r := testutil.NewRegistry(t, "", "")
	ref := r.Push(t, "acme/app:v1")
	before := r.ManifestRequests()

	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := probe.New(probe.Options{TTL: 10 * time.Second, Now: clock})

	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := p.Probe(context.Background(), probe.Target{Reference: ref}); got != probe.Available {
				t.Errorf("Probe = %s", got)
			}
		}()
	}
	wg.Wait()
	if n := r.ManifestRequests() - before; n != 1 {
		t.Errorf("50 concurrent identical probes made %d manifest requests, want 1", n)
	}

	// Another credential is another cache entry.
	p.Probe(t.Context(), probe.Target{Reference: ref, Credential: probe.Credential{Username: "u", Password: "p"}})
	if n := r.ManifestRequests() - before; n != 2 {
		t.Errorf("a probe with another credential made %d requests in all, want 2", n)
	}

	mu.Lock()
	now = now.Add(9 * time.Second)
	mu.Unlock()
	p.Probe(t.Context(), probe.Target{Reference: ref})
	if n := r.ManifestRequests() - before; n != 2 {
		t.Errorf("a probe within the TTL went to the registry (%d requests in all)", n)
	}

	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	p.Probe(t.Context(), probe.Target{Reference: ref})
	if n := r.ManifestRequests() - before; n != 3 {
		t.Errorf("a probe after the TTL made %d requests in all, want 3", n)
	}
}

func TestProbeGivesUpAtTheTimeout(t *testing.T) {
	slow := testutil.NewRegistry(t, "", "")
	slow.SetBehavior(testutil.Hang)
	p := probe.New(probe.Options{Timeout: 200 * time.Millisecond})
	if got := p.Probe(t.Context(), probe.Target{Reference: slow.Host + "/acme/app:v1"}); got != probe.Unreachable {
		t.Errorf("Probe of a hanging registry = %s, want Unreachable", got)
	}
}

func closedAddress(t *testing.T) string {
	t.Helper()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(ports[0])
}
