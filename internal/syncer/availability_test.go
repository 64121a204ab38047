package syncer

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func checkTarget(host, path string) CheckTarget {
	return CheckTarget{Repository: host + "/" + path, Reference: host + "/" + path + ":v1", Host: host}
}

// A pass writes what gave no answer, keeps its since across passes, drops it once it
// answers; a repository not checked yet in this run keeps the entry the status holds (a new
// leader's first moments), one checked and answering does not.
func TestAvailabilityPassFindsWhatGivesNoAnswer(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	good := testutil.NewRegistry(t, "", "")
	good.Push(t, "acme/app:v1")
	now := t0
	a := newAvailability(AvailabilityOptions{Interval: time.Minute, PerSecond: 100, Timeout: 200 * time.Millisecond}, func() time.Time { return now })
	rk := ResourceKey{Kind: routing.KindImageAlternative, Name: "alt"}
	hang, ok := checkTarget(hanging.Host, "acme/app"), checkTarget(good.Host, "acme/app")
	carried := v1alpha1.UnavailableRepository{Repository: "carried.example/acme/app", Reason: v1alpha1.UnavailableTimeout, Since: metav1.NewTime(t0.Add(-time.Hour)), CheckedAt: metav1.NewTime(t0.Add(-time.Minute))}
	stale := v1alpha1.UnavailableRepository{Repository: ok.Repository, Reason: v1alpha1.UnavailableTimeout, Since: metav1.NewTime(t0.Add(-time.Hour)), CheckedAt: metav1.NewTime(t0.Add(-time.Minute))}
	current := []v1alpha1.UnavailableRepository{carried, stale}

	if _, known := a.desired(rk, current); known {
		t.Fatal("a resource whose fallbacks this run has not computed is written")
	}
	sibling := checkTarget(hanging.Host, "acme/other")
	a.set(rk, []CheckTarget{hang, sibling, ok, {Repository: carried.Repository, Reference: carried.Repository + ":v1", Host: "carried.example"}})
	a.paused["carried.example"] = now.Add(time.Hour) // never checked in this test
	a.pass(t.Context())
	got, _ := a.desired(rk, current)
	want := []v1alpha1.UnavailableRepository{
		{Repository: hang.Repository, Reason: v1alpha1.UnavailableTimeout, Since: metav1.NewTime(t0), CheckedAt: metav1.NewTime(t0)},
		{Repository: sibling.Repository, Reason: v1alpha1.UnavailableTimeout, Since: metav1.NewTime(t0), CheckedAt: metav1.NewTime(t0)},
		carried,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	// A host that gave no answer costs a pass one request, not one per repository.
	if n := hanging.Hung(); n != 1 {
		t.Errorf("%d requests to the hanging host in a pass, want 1", n)
	}

	// Not due: no check. Due: checked again, since kept.
	requests := hanging.Hung()
	now = t0.Add(30 * time.Second)
	a.pass(t.Context())
	if hanging.Hung() != requests {
		t.Errorf("a repository checked %s ago was checked again (interval 1m)", now.Sub(t0))
	}
	now = t0.Add(time.Minute)
	a.pass(t.Context())
	if hanging.Hung() == requests {
		t.Error("a repository due was not checked")
	}
	got, _ = a.desired(rk, nil)
	if len(got) != 2 || !got[0].Since.Equal(&metav1.Time{Time: t0}) || !got[0].CheckedAt.Equal(&metav1.Time{Time: now}) {
		t.Errorf("second pass: %+v, want since %s, checkedAt %s", got, t0, now)
	}

	// It answers again: gone.
	hanging.SetBehavior(testutil.Serve)
	now = t0.Add(2 * time.Minute)
	a.pass(t.Context())
	if got, _ := a.desired(rk, nil); len(got) != 0 {
		t.Errorf("after an answer: %+v, want nothing", got)
	}
}

// checkedAt alone is rewritten only once it is rewriteCheckedAfter old.
func TestSameUnavailableRewritesCheckedAtSeldom(t *testing.T) {
	entry := func(checked time.Duration) []v1alpha1.UnavailableRepository {
		return []v1alpha1.UnavailableRepository{{Repository: "r", Reason: v1alpha1.UnavailableTimeout, Since: metav1.NewTime(t0), CheckedAt: metav1.NewTime(t0.Add(checked))}}
	}
	if !sameUnavailable(entry(0), entry(rewriteCheckedAfter-time.Second)) {
		t.Error("a newer checkedAt within rewriteCheckedAfter is rewritten")
	}
	if sameUnavailable(entry(0), entry(rewriteCheckedAfter)) {
		t.Error("a checkedAt rewriteCheckedAfter old is not rewritten")
	}
	other := entry(0)
	other[0].Reason = v1alpha1.UnavailableUnreachable
	if sameUnavailable(entry(0), other) || sameUnavailable(entry(0), nil) || !sameUnavailable(nil, nil) {
		t.Error("a change of reason or of the list is not written, or an empty list is")
	}
}

// A registry reporting its rate limit nearly reached pauses its host's checks, though it
// answered; a 429 does too; neither is ever written.
func TestAvailabilityPausesAHostNearItsRateLimit(t *testing.T) {
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("RateLimit-Remaining", "3;w=21600")
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	limited := testutil.NewRegistry(t, "", "")
	limited.SetBehavior(testutil.RateLimit)
	now := t0
	a := newAvailability(AvailabilityOptions{Interval: time.Minute, PerSecond: 100, Timeout: time.Second}, func() time.Time { return now })
	rk := ResourceKey{Kind: routing.KindImageMirror, Name: "m"}
	host := strings.TrimPrefix(srv.URL, "http://")
	a.set(rk, []CheckTarget{checkTarget(host, "acme/app"), checkTarget(limited.Host, "acme/app")})
	a.pass(t.Context())
	if got, _ := a.desired(rk, nil); len(got) != 0 {
		t.Fatalf("answers written as unavailable: %+v", got)
	}
	if !a.isPaused(host) || !a.isPaused(limited.Host) {
		t.Fatalf("paused hosts %v, want both", a.paused)
	}
	seen := requests
	now = t0.Add(2 * time.Minute)
	a.pass(t.Context())
	if requests != seen {
		t.Errorf("a paused host was checked")
	}
	now = t0.Add(rateLimitPause + time.Minute)
	a.pass(t.Context())
	if requests == seen {
		t.Errorf("the pause did not end after %s", rateLimitPause)
	}
}

func TestNearLimit(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": true, "9;w=21600": true, "10;w=21600": false, "100": false, "junk": false} {
		if got := nearLimit(v); got != want {
			t.Errorf("nearLimit(%q) = %v, want %v", v, got, want)
		}
	}
}
