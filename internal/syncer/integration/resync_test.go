package integration_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// applyGate watches the syncer's server-side applies of the Secrets of one namespace and, once
// armed, holds the answer to the next apply of one of them (the API server has applied it) until
// released: the syncer's decision of that pair is then in progress, at a point of the test's
// choosing.
type applyGate struct {
	ns, target string
	resyncs    *atomic.Int32

	mu       sync.Mutex
	armed    bool
	released bool
	// resyncsAt is, for each Secret, how many resyncs the syncer had logged at each of its
	// applies.
	resyncsAt map[string][]int32
	// resyncsAtApply is, for each apply of target sent after the release, how many resyncs
	// the syncer had logged then.
	resyncsAtApply []int32
	held, release  chan struct{}
	releaseOnce    sync.Once
}

func (g *applyGate) wrap(rt http.RoundTripper) http.RoundTripper {
	prefix := "/api/v1/namespaces/" + g.ns + "/secrets/"
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		name, ok := strings.CutPrefix(req.URL.Path, prefix)
		if !ok || req.Method != http.MethodPatch || req.Header.Get("Content-Type") != string(types.ApplyPatchType) {
			return rt.RoundTrip(req)
		}
		g.mu.Lock()
		g.resyncsAt[name] = append(g.resyncsAt[name], g.resyncs.Load())
		hold := name == g.target && g.armed
		g.armed = g.armed && !hold
		if name == g.target && g.released {
			g.resyncsAtApply = append(g.resyncsAtApply, g.resyncs.Load())
		}
		g.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if hold {
			close(g.held)
			<-g.release
		}
		return resp, err
	})
}

// appliedAfter reports whether the Secret was applied after the syncer logged more than n
// resyncs.
func (g *applyGate) appliedAfter(name string, n int32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.resyncsAt[name], func(r int32) bool { return r > n })
}

func (g *applyGate) open() {
	g.releaseOnce.Do(func() {
		g.mu.Lock()
		g.released = true
		g.mu.Unlock()
		close(g.release)
	})
}

// A forced resync that arrives while a pair is being decided is not lost: the pair is decided
// again right after, and applied whatever its hash says. Here the decision of pair one is held
// in its apply while a resync passes (seen by pair two, whose only applies after the start are
// forced ones) and while someone deletes pair one's Secret; the resync must restore it at once,
// not one resync period later.
func TestResyncDuringADecisionIsNotLost(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, map[string]string{"scope": n})
	for _, r := range []string{"one", "two"} {
		putSecret(t, e, pullSecret(n+"-"+r, map[string]string{"quay.io": r + ":v1"}))
		ia := testutil.NewImageAlternative(n + "-" + r).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
			Repository("quay.io/acme/" + r).SecretRef(n + "-" + r).Build()
		create(t, e, &ia)
	}
	one := routing.PullSecretName(routing.KindImageAlternative, n+"-one")
	two := routing.PullSecretName(routing.KindImageAlternative, n+"-two")

	var resyncs atomic.Int32
	gate := &applyGate{ns: ns, target: one, resyncs: &resyncs, resyncsAt: map[string][]int32{}, held: make(chan struct{}), release: make(chan struct{})}
	cfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	cfg.Wrap(gate.wrap)
	opts := syncerConfig()
	opts.ResyncPeriod = 3 * time.Second
	startSyncerWith(t, opts, cfg, func(line string) {
		if strings.Contains(line, `"msg"="resync"`) {
			resyncs.Add(1)
		}
	})
	t.Cleanup(gate.open) // before the syncer stops (cleanups run last first)
	secretHolds(t, e, ns, one, map[string]string{"quay.io/acme/one": "one:v1"})
	secretHolds(t, e, ns, two, map[string]string{"quay.io/acme/two": "two:v1"})

	// Pair one's next decision (its credential rotates) is held once the API server applied it.
	gate.mu.Lock()
	gate.armed = true
	gate.mu.Unlock()
	putSecret(t, e, pullSecret(n+"-one", map[string]string{"quay.io": "one:v2"}))
	select {
	case <-gate.held:
	case <-time.After(pollTimeout):
		t.Fatal("pair one was not applied after its credential rotated")
	}
	// A resync passes meanwhile: it flags every known pair before it queues any, so pair two's
	// (forced) apply after it shows pair one is flagged too.
	atHold := resyncs.Load()
	eventually(t, "a resync forces pair two", func(context.Context) error {
		if !gate.appliedAfter(two, atHold) {
			return errors.New("no resync yet")
		}
		return nil
	})
	// Someone deletes pair one's Secret; then the held decision ends.
	if err := e.cs.CoreV1().Secrets(ns).Delete(t.Context(), one, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	atRelease := resyncs.Load()
	gate.open()

	secretHolds(t, e, ns, one, map[string]string{"quay.io/acme/one": "one:v2"})
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if len(gate.resyncsAtApply) == 0 || gate.resyncsAtApply[0] != atRelease {
		t.Errorf("pair one applied after the release at resyncs %v, want its first apply before resync %d: the resync that came during its decision was lost",
			gate.resyncsAtApply, atRelease+1)
	}
}
