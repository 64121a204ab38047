package probe_test

import (
	"testing"
	"time"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testutil"
)

// When the in-flight bound is reached (another tenant's flood of invented hosts, or an outage),
// a healthy original is Skipped, not probed, and a list resolves to an alternative the cache
// holds: routing past it would move the pod away from a healthy original. A Skipped candidate
// ends the list: the container stays as it is (unknown is not unavailable).
func TestASkippedHealthyOriginalIsNotRoutedAwayFrom(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	upstream := testutil.NewRegistry(t, "", "")
	original := upstream.Push(t, "acme/app:v1")
	mirror := testutil.NewRegistry(t, "", "")
	alt := mirror.Push(t, "acme/app:v1")
	p := probe.New(probe.Options{Timeout: 3 * time.Second, MaxInFlight: 1})
	if got := p.Probe(t.Context(), probe.Target{Reference: alt}); got != probe.Available {
		t.Fatalf("alternative: %s", got)
	}
	go p.Probe(t.Context(), probe.Target{Reference: hanging.Host + "/flood/x:v1"})
	if !hanging.WaitHung(1, 2*time.Second) {
		t.Fatal("the flood probe never reached the hanging registry")
	}
	if got := p.Resolve(t.Context(), [][]probe.Target{{{Reference: original}, {Reference: alt}}}, nil); got[0] != -1 {
		t.Errorf("Resolve = %d: want -1 (left on its original): a healthy original that was not probed lost to the cached alternative", got[0])
	}
}
