package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func TestRegisterRuntimeAddsHeapMetricsOnceAndToleratesASecondCall(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if err := RegisterRuntime(reg); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
	}
	for _, want := range []string{"go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"} {
		if !found[want] {
			t.Errorf("%s is not registered", want)
		}
	}
}

func TestRegisterRuntimeAfterControllerRuntimesCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	// What controller-runtime's controller package registers.
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
	)
	if err := RegisterRuntime(reg); err != nil {
		t.Fatal(err)
	}
}
