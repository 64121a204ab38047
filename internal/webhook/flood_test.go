package webhook_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A flood of pods whose images name hosts nobody declared, under a catch-all mirror, while
// every registry hangs: the probes in flight, the connections, the goroutines and the metric
// label values all stay bounded, and everything drains once the probes time out.
func TestAFloodOfInventedHostsStaysBounded(t *testing.T) {
	silent := testutil.NewSilentRegistry(t)
	transport := &http.Transport{
		// Every registry, whatever its name, is the silent listener.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, silent.Host)
		},
		MaxConnsPerHost: 2,
	}
	const maxInFlight = 16
	var mu sync.Mutex
	registries := map[string]bool{}
	var skipped atomic.Int64
	prober := probe.New(probe.Options{
		Timeout:     500 * time.Millisecond,
		MaxInFlight: maxInFlight,
		Transport:   transport,
		Observe: func(registry string, _ probe.Result, _ time.Duration) {
			mu.Lock()
			registries[registry] = true
			mu.Unlock()
		},
		Skip: func(string) { skipped.Add(1) },
	})
	ix, errs := routing.NewIndex(nil, []v1alpha1.ImageMirror{mirror("everything", v1alpha1.RewritePolicyOnFailure, "mirror.local/m/")})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var index atomic.Pointer[routing.Index]
	index.Store(ix)
	chooser := &route.ProbeChooser{Prober: prober}
	m := &webhook.PodMutator{
		Index:      &index,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}

	baseline := runtime.NumGoroutine()
	stopPeak := testutil.Peak(runtime.NumGoroutine)

	const pods = 300
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), webhook.AdmissionBudget(500*time.Millisecond))
			defer cancel()
			p := pod(corev1.Container{Name: "c", Image: fmt.Sprintf("h%d.example/acme/app:v1", i)})
			if resp := m.Handle(ctx, createRequest(t, p)); !resp.Allowed {
				t.Errorf("pod %d denied", i)
			}
		}()
	}
	wg.Wait()
	peak := stopPeak()

	t.Logf("goroutines peaked at %d (baseline %d, %d admissions); connections at %d; %d probes skipped", peak, baseline, pods, silent.MaxOpen(), skipped.Load())
	// The flood's own goroutines (one per admission) are the test's; beyond them, the prober
	// adds at most its flights and their connections' goroutines.
	if extra := peak - baseline - pods; extra > maxInFlight*8 {
		t.Errorf("goroutines peaked at %d over the %d admissions and the baseline of %d, want at most %d", extra, pods, baseline, maxInFlight*8)
	}
	// Two schemes per probe in flight, and the listener's lag noticing closed connections;
	// unbounded, the flood opens one pair per pod (600).
	if n := silent.MaxOpen(); n > 4*maxInFlight {
		t.Errorf("%d connections were open at once, want at most %d", n, 4*maxInFlight)
	}
	if skipped.Load() == 0 {
		t.Error("no probe was skipped: the flood never reached the in-flight bound, the test proves nothing")
	}
	mu.Lock()
	for r := range registries {
		if r != "mirror.local" && r != route.OtherRegistry {
			t.Errorf("a probe was counted under registry %q, which no routing resource declares", r)
		}
	}
	mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for prober.InFlight() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := prober.InFlight(); n != 0 {
		t.Errorf("%d probes still in flight after the flood", n)
	}
}
