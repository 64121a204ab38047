package missedpulls

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The decision's probes are bounded by Options.ProbeTimeout (the syncer's --probe-timeout, which
// the chart sets from the webhook's value), not by a timeout of the syncer's own: with an hour
// configured, every request to the registry has more than probe.DefaultTimeout left before its
// deadline; with nothing configured, at most that. Nothing here waits for a deadline.
func TestDecisionProbesAreBoundedByTheConfiguredTimeout(t *testing.T) {
	for name, tc := range map[string]struct {
		timeout time.Duration
		longer  bool
	}{
		"an hour configured: past the default":     {timeout: time.Hour, longer: true},
		"nothing configured: probe.DefaultTimeout": {timeout: 0, longer: false},
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var left []time.Duration
			registry := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				d, ok := req.Context().Deadline()
				if !ok {
					t.Errorf("%s %s has no deadline", req.Method, req.URL)
					d = time.Now()
				}
				mu.Lock()
				left = append(left, time.Until(d))
				mu.Unlock()
				return &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
			})
			// A clientset that reaches nothing: the decision's probes talk to registry only.
			cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
			w := New(Options{ProbeTimeout: tc.timeout, ProbeTransport: registry}, nil, cs, nil)
			lists := [][]routing.Candidate{{
				{Reference: "registry.example.com/acme/app:v1", Entry: -1},
				{Reference: "mirror.example.com/acme/app:v1", Source: routing.Source{Kind: routing.KindImageAlternative, Name: "acme"},
					Policy: v1alpha1.RewritePolicyOnFailure, Entry: 1},
			}}
			if got := w.chooser.Choose(t.Context(), lists, false); len(got) != 1 {
				t.Fatalf("%d choices for one list", len(got))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(left) == 0 {
				t.Fatal("no probe reached the registry")
			}
			for _, l := range left {
				if (l > probe.DefaultTimeout) != tc.longer {
					t.Errorf("a probe had %s left before its deadline; want more than probe.DefaultTimeout (%s): %v", l, probe.DefaultTimeout, tc.longer)
				}
			}
		})
	}
}
