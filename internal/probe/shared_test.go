package probe_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
)

// A repository the secret-syncer's leader found hanging is waited for at most the hinted wait
// by a replica that never probed its host; a shared hint older than MaxAge, or far in the
// future, is not; a hinted original that answers within the hinted wait is still chosen.
func TestSharedHintCostsTheHintedWaitOnAReplicaThatNeverProbedTheHost(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	good := testutil.NewRegistry(t, "", "")
	alt := probe.Target{Reference: good.Push(t, "acme/app:v1")}
	original := hanging.Push(t, "acme/app:v1")
	hanging.SetBehavior(testutil.Hang)
	now := time.Now()
	for _, tc := range []struct {
		name      string
		checkedAt time.Time
		passed    int64
	}{
		{"fresh", now.Add(-time.Minute), 1},
		{"older than MaxAge", now.Add(-6 * time.Minute), 0},
		{"far in the future", now.Add(6 * time.Minute), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var passed atomic.Int64
			p := probe.New(probe.Options{Timeout: time.Second, Hints: probe.HintOptions{
				Wait: 100 * time.Millisecond, MaxAge: 5 * time.Minute, PassedOver: func(string) { passed.Add(1) },
			}})
			p.SetSharedHints(map[string]time.Time{probe.RepositoryOf(original): tc.checkedAt})
			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			got := p.First(ctx, []probe.Target{{Reference: original}, alt})
			if passed.Load() != tc.passed {
				t.Errorf("%d candidates passed over, want %d", passed.Load(), tc.passed)
			}
			if tc.passed == 1 && got != 1 {
				t.Errorf("decision %d, want the alternative after the hinted wait", got)
			}
		})
	}

	// The hint names the repository, not the host: another repository of that host is
	// waited for as before.
	var passed atomic.Int64
	p := probe.New(probe.Options{Timeout: time.Second, Hints: probe.HintOptions{Wait: 100 * time.Millisecond, PassedOver: func(string) { passed.Add(1) }}})
	p.SetSharedHints(map[string]time.Time{probe.RepositoryOf(original): now})
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	p.First(ctx, []probe.Target{{Reference: hanging.Host + "/acme/other:v1"}, alt})
	if passed.Load() != 0 {
		t.Errorf("another repository of the host was passed over on a repository's hint")
	}

	// An original that answers is chosen though hinted.
	healthy := good.Push(t, "acme/healthy:v1")
	p = probe.New(probe.Options{Timeout: time.Second, Hints: probe.HintOptions{Wait: 100 * time.Millisecond}})
	p.SetSharedHints(map[string]time.Time{probe.RepositoryOf(healthy): now})
	if got := p.First(t.Context(), []probe.Target{{Reference: healthy}, alt}); got != 0 {
		t.Errorf("a hinted original that answers: decision %d, want it", got)
	}
}

// RepositoryOf names a normalized reference's repository as routing.Repository does, the
// names status.unavailable holds.
func TestRepositoryOfIsRoutingsRepository(t *testing.T) {
	for _, ref := range []string{
		"docker.io/library/nginx:latest",
		"docker.io/library/nginx:1.27@sha256:0000000000000000000000000000000000000000000000000000000000000000",
		"registry.example:5000/team/app:v1",
		"registry.example:5000/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
		"127.0.0.1:5000/a/b/c:v1",
	} {
		want, err := routing.Repository(ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := probe.RepositoryOf(ref); got != want {
			t.Errorf("RepositoryOf(%q) = %q, routing.Repository %q", ref, got, want)
		}
	}
}

// Check tells a registry that gave no HTTP answer from one that gave any: a 429, a 503, a
// 401 and a 404 are answers; a registry that holds the request is a timeout, a refused
// connection is not.
func TestCheckTellsNoAnswerFromAnyAnswer(t *testing.T) {
	serve := testutil.NewRegistry(t, "", "")
	present := serve.Push(t, "acme/app:v1")
	limited := testutil.NewRegistry(t, "", "")
	limited.SetBehavior(testutil.RateLimit)
	failing := testutil.NewRegistry(t, "", "")
	failing.SetBehavior(testutil.Fail)
	private := testutil.NewRegistry(t, "u", "p")
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	p := probe.New(probe.Options{Timeout: 300 * time.Millisecond})
	for _, tc := range []struct {
		ref                string
		answered, timedOut bool
	}{
		{present, true, false},
		{serve.Host + "/acme/missing:v1", true, false},
		{limited.Host + "/acme/app:v1", true, false},
		{failing.Host + "/acme/app:v1", true, false},
		{private.Host + "/acme/app:v1", true, false},
		{hanging.Host + "/acme/app:v1", false, true},
		{testutil.DeadAddr(t) + "/acme/app:v1", false, false},
	} {
		r, answered, timedOut := p.Check(t.Context(), probe.Target{Reference: tc.ref})
		if answered != tc.answered || timedOut != tc.timedOut {
			t.Errorf("%s: %s, answered %v, timed out %v; want %v, %v", tc.ref, r, answered, timedOut, tc.answered, tc.timedOut)
		}
	}
	if p.InFlight() != 0 || len(p.Hinted()) != 0 {
		t.Errorf("Check left %d flights and hints %v: it must stay outside the admissions' state", p.InFlight(), p.Hinted())
	}
}
