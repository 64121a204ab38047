package webhook_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	kuiktest "github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// With a cluster ID, the index the webhook builds from the API server routes a covered pod to
// this cluster's tag in the mirror (real API server, real prober, real registry); the mirror's
// unsuffixed tag, another cluster's or none, is not what it probes.
func TestClusterIDRoutesToTheClusterTag(t *testing.T) {
	w := setup(t)
	reg := kuiktest.NewRegistry(t, "", "")
	reg.Push(t, "kuik/docker.io/library/nginx:1.27") // unsuffixed: not this cluster's
	reg.Push(t, "kuik/docker.io/library/nginx:1.27-kuik-eu-1")
	// Selected by a label no other test's pods carry: the shared webhook routes nothing with it.
	im := kuiktest.NewImageMirror("cluster-id", reg.Host+"/kuik/").Policy(v1alpha1.RewritePolicyAlways).
		PodSelector(map[string]string{"kuik-test": "cluster-id"}).Build()
	w.create(t, &im)

	ix, err := webhook.BuildIndex(t.Context(), w.c, "eu-1", nil, func(map[string]time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	if ix.ClusterID() != "eu-1" {
		t.Fatalf("the index's cluster ID is %q, want eu-1", ix.ClusterID())
	}
	plain, err := webhook.BuildIndex(t.Context(), w.c, "", nil, func(map[string]time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	podLabels := labels.Set{"kuik-test": "cluster-id"}
	cands, err := plain.Candidates("nginx:1.27", podLabels, nil)
	if err != nil || len(cands) == 0 || cands[0].Reference != reg.Host+"/kuik/docker.io/library/nginx:1.27" {
		t.Fatalf("without a cluster ID the first candidate is not the unsuffixed tag: %v %v", cands, err)
	}

	var index atomic.Pointer[routing.Index]
	index.Store(ix)
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{})}
	m := &webhook.PodMutator{
		Index:      &index,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}
	p := pod(corev1.Container{Name: "c", Image: "nginx:1.27"})
	p.Labels = podLabels
	got := admit(t, m, p)
	if want := reg.Host + "/kuik/docker.io/library/nginx:1.27-kuik-eu-1"; got.Spec.Containers[0].Image != want {
		t.Errorf("image %q (reason %q), want %q", got.Spec.Containers[0].Image, got.Annotations[v1alpha1.AnnotationReason], want)
	}
	// The record verifies under this cluster's naming: a reinvocation changes nothing.
	if again := admit(t, m, got); again.Spec.Containers[0].Image != got.Spec.Containers[0].Image {
		t.Errorf("reinvocation moved the container to %q", again.Spec.Containers[0].Image)
	}
}
