package probe_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/testutil"
)

// The digest of a choice is the one of the answer that chose it: a fresh probe's, the cached
// answer's while it lasts even when the tag has moved since, the new one's after the TTL; a
// reference with tag and digest is probed by its digest and keeps it whatever the tag names.
func TestResolveChoicesGivesTheDigestOfTheChoosingAnswer(t *testing.T) {
	r := testutil.NewRegistry(t, "", "")
	first, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := first.Digest()
	d2, _ := second.Digest()
	ref := r.PushImage(t, "acme/app:v1", first)

	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p := probe.New(probe.Options{TTL: 10 * time.Second, Now: clock})
	resolve := func() probe.Choice {
		t.Helper()
		return p.ResolveChoices(t.Context(), [][]probe.Target{{{Reference: r.Host + "/acme/gone:v1"}, {Reference: ref}}}, nil)[0]
	}
	if got := resolve(); got != (probe.Choice{Index: 1, Digest: d1.String()}) {
		t.Errorf("fresh probe: %+v, want index 1 at %s", got, d1)
	}

	r.PushImage(t, "acme/app:v1", second) // the tag moves
	if got := resolve(); got != (probe.Choice{Index: 1, Digest: d1.String()}) {
		t.Errorf("within the TTL: %+v, want the cached answer's %s", got, d1)
	}
	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	if got := resolve(); got != (probe.Choice{Index: 1, Digest: d2.String()}) {
		t.Errorf("after the TTL: %+v, want the new answer's %s", got, d2)
	}

	pinned := ref + "@" + d1.String()
	if got := p.ResolveChoices(t.Context(), [][]probe.Target{{{Reference: pinned}}}, nil)[0]; got != (probe.Choice{Index: 0, Digest: d1.String()}) {
		t.Errorf("tag and digest: %+v, want the digest probed, %s, although the tag names %s", got, d1, d2)
	}
}

// A registry answering a HEAD by digest with another digest is not available: the pod would
// pull something other than what it names.
func TestARegistryAnsweringAnotherDigestIsNotAvailable(t *testing.T) {
	const asked = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const answered = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/manifests/") {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", "100")
			w.Header().Set("Docker-Content-Digest", answered)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	p := probe.New(probe.Options{Timeout: 2 * time.Second})
	got := p.ResolveChoices(t.Context(), [][]probe.Target{
		{{Reference: host + "/acme/app@" + asked}},
		{{Reference: host + "/acme/app:v1@" + asked}},
		{{Reference: host + "/acme/app:v1"}}, // the control: by tag, the answer's digest
	}, nil)
	want := []probe.Choice{{Index: -1}, {Index: -1}, {Index: 0, Digest: answered}}
	for l := range want {
		if got[l] != want[l] {
			t.Errorf("list %d: %+v, want %+v", l, got[l], want[l])
		}
	}
}

// Trial probes (dry runs) have an in-flight bound of their own: with it full, a probe that
// decides still starts, and another trial probe does not.
func TestTrialProbesHaveABoundOfTheirOwn(t *testing.T) {
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)
	open := testutil.NewRegistry(t, "", "")
	ref := open.Push(t, "acme/app:v1")
	var skipped []string
	p := probe.New(probe.Options{Timeout: 20 * time.Second, MaxInFlight: 1, Skip: func(reason string) { skipped = append(skipped, reason) }})
	go p.Probe(t.Context(), probe.Target{Reference: hanging.Host + "/trial/x:v1", Trial: true})
	if !hanging.WaitHung(1, 5*time.Second) {
		t.Fatal("the trial probe never reached the hanging registry")
	}
	if got := p.Probe(t.Context(), probe.Target{Reference: ref}); got != probe.Available {
		t.Errorf("a deciding probe with the trial bound full: %s, want Available", got)
	}
	if got := p.Probe(t.Context(), probe.Target{Reference: hanging.Host + "/trial/y:v1", Trial: true}); got != probe.Skipped {
		t.Errorf("a second trial probe: %s, want Skipped", got)
	}
	// Counted apart, so an alert on the deciding probes' bound does not fire for a trial.
	if len(skipped) != 1 || skipped[0] != probe.SkipTrialLimit {
		t.Errorf("skip reasons %q, want one %q", skipped, probe.SkipTrialLimit)
	}
}
