package webhook_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A dry run's probes never take the probes the enforcing resources need: while a dry-run
// resource's probes of a hanging registry fill the in-flight bound, another pod is still
// routed by the enforcing resource (real prober, real registries). The dry runs have a bound
// of their own: a third pod's dry-run probe is not started past it.
func TestDryRunProbesNeverTakeTheEnforcingProbeBound(t *testing.T) {
	reg := testutil.NewRegistry(t, "", "")
	reg.Push(t, "acme/app:v1")
	hanging := testutil.NewRegistry(t, "", "")
	hanging.SetBehavior(testutil.Hang)

	const maxInFlight = 2
	var skipped atomic.Int64
	prober := probe.New(probe.Options{
		Timeout:     30 * time.Second, // the hanging probes stay in flight until the registry closes
		MaxInFlight: maxInFlight,
		Skip:        func(string) { skipped.Add(1) },
	})
	enforce := alternative("enforce", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: reg.Host + "/acme/gone"},
		v1alpha1.Alternative{Repository: reg.Host + "/acme/app"})
	trial := dryRun(alternative("trial", v1alpha1.RewritePolicyAlways,
		v1alpha1.Alternative{Repository: hanging.Host + "/acme/slow"},
		v1alpha1.Alternative{Repository: hanging.Host + "/acme/slow-copy"}))
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{enforce, trial}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var index atomic.Pointer[routing.Index]
	index.Store(ix)
	chooser := &webhook.ProbeChooser{Prober: prober}
	m := &webhook.PodMutator{
		Index:      &index,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}

	// Pod A: only the dry-run resource covers its image; its dry-run list (slow-copy, then the
	// original) probes the hanging registry twice, which holds both probes.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Handle(ctx, createRequest(t, pod(corev1.Container{Name: "a", Image: hanging.Host + "/acme/slow:v1"})))
	}()
	t.Cleanup(func() { cancel(); <-done })
	if !hanging.WaitHung(maxInFlight, 30*time.Second) {
		t.Fatalf("the dry-run probes did not reach the hanging registry (%d held)", hanging.Hung())
	}

	// Pod B: the enforcing resource routes it off its missing original.
	got := admit(t, m, pod(corev1.Container{Name: "b", Image: reg.Host + "/acme/gone:v1"}))
	if want := reg.Host + "/acme/app:v1"; got.Spec.Containers[0].Image != want {
		t.Errorf("image %q (reason %s), want %q: the dry run's probes took the enforcing ones' bound (%d skipped)",
			got.Spec.Containers[0].Image, got.Annotations[v1alpha1.AnnotationReason], want, skipped.Load())
	}

	// Pod C: another dry-run probe of the hanging registry is not started past the dry runs'
	// own bound (a started one would still be in flight).
	skippedBefore := skipped.Load()
	admit(t, m, pod(corev1.Container{Name: "c", Image: hanging.Host + "/acme/slow:v2"}))
	if n := prober.InFlight(); n != maxInFlight {
		t.Errorf("%d probes in flight after pod C, want the dry run's %d: its bound does not hold", n, maxInFlight)
	}
	if skipped.Load() == skippedBefore {
		t.Error("pod C's dry-run probes were not skipped")
	}
}
