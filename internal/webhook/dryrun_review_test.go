package webhook_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	kuiktest "github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A dry run's probes never take the probes the enforcing resources need: while a dry-run
// resource's probes of a hanging registry fill the in-flight bound, another pod is still
// routed by the enforcing resource (real prober, real registries). The dry runs have a bound
// of their own: a third pod's dry-run probe is not started past it.
func TestDryRunProbesNeverTakeTheEnforcingProbeBound(t *testing.T) {
	reg := kuiktest.NewRegistry(t, "", "")
	reg.Push(t, "acme/app:v1")
	hanging := kuiktest.NewRegistry(t, "", "")
	hanging.SetBehavior(kuiktest.Hang)

	const maxInFlight = 2
	var skipped atomic.Int64
	prober := probe.New(probe.Options{
		Timeout:     30 * time.Second, // the hanging probes stay in flight until the registry closes
		MaxInFlight: maxInFlight,
		Skip:        func(string) { skipped.Add(1) },
	})
	enforce := kuiktest.Alternative("enforce", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: reg.Host + "/acme/gone"},
		v1alpha1.Alternative{Repository: reg.Host + "/acme/app"})
	trial := dryRun(kuiktest.Alternative("trial", v1alpha1.RewritePolicyAlways,
		v1alpha1.Alternative{Repository: hanging.Host + "/acme/slow"},
		v1alpha1.Alternative{Repository: hanging.Host + "/acme/slow-copy"}))
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{enforce, trial}, nil)
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

// A pinned candidate keeps the repository kuik wrote it with: one on Docker Hub stays
// docker.io/… (go-containerregistry would spell it index.docker.io/…, which admission
// policies and kuik's users matching docker.io/ would not recognise).
func TestPinDigestKeepsTheCandidatesRepository(t *testing.T) {
	for name, tc := range map[string]struct{ repository, image, want string }{
		"docker hub":         {"docker.io/acme/foo", "quay.io/acme/foo:v1", "docker.io/acme/foo"},
		"docker hub library": {"nginx", "quay.io/acme/nginx:1.27", "docker.io/library/nginx"},
		"a port":             {"registry.local:5000/acme/foo", "quay.io/acme/foo:v1", "registry.local:5000/acme/foo"},
	} {
		t.Run(name, func(t *testing.T) {
			ia := pinned(kuiktest.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
				v1alpha1.Alternative{Repository: strings.Split(tc.image, ":")[0]},
				v1alpha1.Alternative{Repository: tc.repository}))
			candidate := tc.want + ":" + strings.Split(tc.image, ":")[1]
			m := mutator(t, &availability{available: set(candidate)}, []v1alpha1.ImageAlternative{ia}, nil)
			got := admit(t, m, pod(corev1.Container{Name: "c", Image: tc.image}))
			if want := tc.want + "@" + digestOf(candidate); got.Spec.Containers[0].Image != want {
				t.Errorf("image %q, want %q", got.Spec.Containers[0].Image, want)
			}
			if again := admit(t, m, got); !cmp.Equal(got, again, cmpopts.EquateEmpty()) {
				t.Errorf("reinvocation changed the pinned pod:\n%s", cmp.Diff(got, again, cmpopts.EquateEmpty()))
			}
		})
	}
}

// A pinDigest candidate whose answer names no sha256 digest is not routed unpinned: the
// container keeps its image, with NoAlternatives, counted as no-digest.
func TestPinDigestWithoutADigestLeavesTheContainer(t *testing.T) {
	ia := pinned(kuiktest.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		v1alpha1.Alternative{Repository: "registry.local/acme/foo"}))
	for _, digest := range []string{"", "sha512:" + strings.Repeat("a", 128), "sha256:short", "sha256:" + strings.Repeat("A", 64)} {
		t.Run(digest, func(t *testing.T) {
			m := mutator(t, &availability{}, []v1alpha1.ImageAlternative{ia}, nil)
			m.Choose = func(_ context.Context, lists [][]routing.Candidate, _ bool) []route.Choice {
				out := make([]route.Choice, len(lists))
				for l, cands := range lists {
					out[l] = route.Choice{Index: len(cands) - 1, Digest: digest}
				}
				return out
			}
			c := metrics.DigestPins.WithLabelValues("no-digest")
			before := testutil.ToFloat64(c)
			got := admit(t, m, pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}))
			if got.Spec.Containers[0].Image != "quay.io/acme/foo:v1" {
				t.Errorf("image %q, want the original kept", got.Spec.Containers[0].Image)
			}
			if want := `{"c":"NoAlternatives"}`; got.Annotations[v1alpha1.AnnotationReason] != want {
				t.Errorf("reason %q, want %q", got.Annotations[v1alpha1.AnnotationReason], want)
			}
			if n := testutil.ToFloat64(c) - before; n != 1 {
				t.Errorf("no-digest counted %v times, want 1", n)
			}
		})
	}
}

// A dry-run resource that changes the decision without a candidate of its own (it retires the
// original, whose alternative an enforcing resource already offers) is the one the record and
// the metric name, not nobody.
func TestADryRunWithoutACandidateOfItsOwnIsNamed(t *testing.T) {
	enforcing := kuiktest.Alternative("a-enforcing", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		v1alpha1.Alternative{Repository: "registry.local/acme/foo"})
	retire := dryRun(kuiktest.Alternative("z-retire", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo", Unavailable: true},
		v1alpha1.Alternative{Repository: "registry.local/acme/foo"}))
	m := mutator(t, &availability{available: set("quay.io/acme/foo:v1", "registry.local/acme/foo:v1")}, []v1alpha1.ImageAlternative{enforcing, retire}, nil)
	c := metrics.DryRunDecisions.WithLabelValues("ImageAlternative", "z-retire", "OnFailure")
	before := testutil.ToFloat64(c)
	got := admit(t, m, pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}))
	if got.Spec.Containers[0].Image != "quay.io/acme/foo:v1" {
		t.Errorf("image %q: the dry run changed the enforcing decision", got.Spec.Containers[0].Image)
	}
	// It would run the enforcing resource's candidate, because of the dry-run resource.
	if want := `{"c":{"image":"registry.local/acme/foo:v1","by":"ImageAlternative/a-enforcing","reason":"OnFailure"}}`; got.Annotations[v1alpha1.AnnotationDryRun] != want {
		t.Errorf("%s %s, want %s", v1alpha1.AnnotationDryRun, got.Annotations[v1alpha1.AnnotationDryRun], want)
	}
	if n := testutil.ToFloat64(c) - before; n != 1 {
		t.Errorf("counted %v times under the dry-run resource, want 1", n)
	}
}
