package probe_test

import (
	"net/http"
	"testing"

	"github.com/enix/kuik/internal/probe"
)

type panickingTransport struct{}

func (panickingTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("boom") }

// A probe runs in a goroutine of its own, outside the admission handler's recover: a panic
// there (a registry answer the client library chokes on; the registry of an original is the
// pod author's to choose) must not take the webhook down, nor leave its flight, and its slot
// of MaxInFlight, behind.
func TestAPanickingProbeIsUnreachableAndFreesItsSlot(t *testing.T) {
	p := probe.New(probe.Options{Transport: panickingTransport{}, MaxInFlight: 1})
	for range 2 {
		if got := p.Probe(t.Context(), probe.Target{Reference: "registry.example/acme/app:v1"}); got != probe.Unreachable {
			t.Errorf("Probe = %s, want Unreachable", got)
		}
	}
	if got := p.Probe(t.Context(), probe.Target{Reference: "registry.example/acme/other:v1"}); got == probe.Skipped {
		t.Error("the panicked probe still holds its in-flight slot")
	}
	if n := p.InFlight(); n != 0 {
		t.Errorf("%d probes in flight after they all ended", n)
	}
}
