package probe_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testutil"
)

// Resolve probes the lists of all containers at once: three containers, each with a hanging
// upstream first (it accepts the connection and never answers) and an available alternative
// after it, have their three hanging probes in flight together, and all three resolve to the
// alternative.
func TestResolveProbesEveryListAtOnce(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	good := testutil.NewRegistry(t, "", "")
	var lists [][]probe.Target
	for _, c := range []string{"init", "app", "sidecar"} {
		lists = append(lists, []probe.Target{
			{Reference: hanging.Host + "/acme/" + c + ":v1"},
			{Reference: good.Push(t, "acme/"+c+":v1")},
		})
	}
	p := probe.New(probe.Options{Timeout: 3 * time.Second})
	got := make(chan []int, 1)
	go func() { got <- p.Resolve(t.Context(), lists, nil) }()
	if !hanging.WaitHung(3, 2500*time.Millisecond) {
		t.Fatalf("only %d of 3 hanging probes were in flight together: lists are probed one after another", hanging.Hung())
	}
	if diff := cmp.Diff([]int{1, 1, 1}, <-got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
}

func TestResolveHonoursAcceptAndListOrder(t *testing.T) {
	open := testutil.NewRegistry(t, "", "")
	a := open.Push(t, "acme/a:v1")
	private := testutil.NewRegistry(t, "u", "p")
	priv := private.Push(t, "acme/p:v1")
	p := probe.New(probe.Options{})
	lists := [][]probe.Target{
		{{Reference: priv}, {Reference: a}},                        // refused first, open second
		{{Reference: open.Host + "/acme/none:v1"}, {Reference: a}}, // missing first
		{{Reference: open.Host + "/acme/none:v1"}},                 // nothing
		nil,
	}
	if diff := cmp.Diff([]int{1, 1, -1, -1}, p.Resolve(t.Context(), lists, nil)); diff != "" {
		t.Errorf("Resolve with the default accept (-want +got):\n%s", diff)
	}
	acceptAuth := func(l, i int, r probe.Result) bool {
		return r == probe.Available || (l == 0 && i == 0 && r == probe.InvalidAuth)
	}
	if diff := cmp.Diff([]int{0, 1, -1, -1}, p.Resolve(t.Context(), lists, acceptAuth)); diff != "" {
		t.Errorf("Resolve accepting a refusal of list 0's first (-want +got):\n%s", diff)
	}
}

// No probe starts once the caller's deadline has passed: a late caller gets Skipped and the
// registry sees nothing.
func TestNoProbeStartsPastTheCallersDeadline(t *testing.T) {
	r := testutil.NewRegistry(t, "", "")
	ref := r.Push(t, "acme/app:v1")
	before := r.ManifestRequests()
	var skipped []string
	p := probe.New(probe.Options{Skip: func(reason string) { skipped = append(skipped, reason) }})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got := p.Probe(ctx, probe.Target{Reference: ref}); got != probe.Skipped {
		t.Errorf("Probe after the deadline = %s, want Skipped", got)
	}
	if got := p.First(ctx, []probe.Target{{Reference: ref}, {Reference: ref + "x"}}); got != -1 {
		t.Errorf("First after the deadline = %d, want -1", got)
	}
	if n := r.ManifestRequests() - before; n != 0 {
		t.Errorf("%d manifest requests were sent after the caller's deadline", n)
	}
	if diff := cmp.Diff([]string{probe.SkipDeadline, probe.SkipDeadline, probe.SkipDeadline}, skipped); diff != "" {
		t.Errorf("skip reasons (-want +got):\n%s", diff)
	}
	// A skip is not cached: a caller with time left probes for real.
	if got := p.Probe(t.Context(), probe.Target{Reference: ref}); got != probe.Available {
		t.Errorf("Probe with time left = %s, want Available", got)
	}
}

// However many distinct targets are asked for at once, at most MaxInFlight probes run, the
// others are skipped and counted, and no more connections than MaxConnsPerHost reach one
// registry.
func TestProbesInFlightAndConnectionsAreBounded(t *testing.T) {
	silent := testutil.NewSilentRegistry(t)
	var limited atomic.Int64
	p := probe.New(probe.Options{
		Timeout:         2 * time.Second,
		MaxInFlight:     8,
		MaxConnsPerHost: 3,
		Skip: func(reason string) {
			if reason == probe.SkipLimit {
				limited.Add(1)
			}
		},
	})
	stopPeak := testutil.Peak(p.InFlight)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Probe(t.Context(), probe.Target{Reference: fmt.Sprintf("%s/acme/app%d:v1", silent.Host, i)})
		}()
	}
	wg.Wait()
	maxInFlight := stopPeak()
	if n := maxInFlight; n > 8 {
		t.Errorf("%d probes were in flight at once, want at most 8", n)
	}
	if n := limited.Load(); n < 40-8 {
		t.Errorf("%d probes were skipped for the limit, want at least %d", n, 40-8)
	}
	// The transport bounds connections per scheme and protocol (go-containerregistry pings a
	// localhost registry over https and http at once), and the listener notices a closed
	// connection a moment after the client: a small multiple of the bound, where 40 unbounded
	// probes open 80.
	if n := silent.MaxOpen(); n > 4*3 {
		t.Errorf("%d connections were open at once to one registry, want at most a few times 3", n)
	}
	if silent.Accepted() == 0 {
		t.Error("no probe reached the registry at all")
	}
	// Once the probes time out, the in-flight count returns to zero.
	deadline := time.Now().Add(5 * time.Second)
	for p.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.InFlight(); n != 0 {
		t.Errorf("%d probes still in flight after their timeout", n)
	}
}
