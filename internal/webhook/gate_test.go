package webhook

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func alternative(uid types.UID, gen int64, repo string, sent *metav1.Condition) v1alpha1.ImageAlternative {
	ia := testutil.NewImageAlternative("app").Repository(repo).Repository("mirror.example/app").Build()
	ia.UID, ia.Generation = uid, gen
	if sent != nil {
		ia.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen}, *sent}
	}
	return ia
}

func sentAt(gen int64, status metav1.ConditionStatus) *metav1.Condition {
	return &metav1.Condition{Type: v1alpha1.ConditionPodsSent, Status: status, ObservedGeneration: gen, Reason: "Filtered"}
}

// The gate passes a resource at a generation marked PodsSent, the latest marked generation it
// saw of the same object while a newer one waits, and nothing for a new object not marked.
func TestGatePassesOnlyGenerationsMarkedPodsSent(t *testing.T) {
	g := newGate()
	steps := []struct {
		name        string
		listed      v1alpha1.ImageAlternative
		wantRepo    string // "" for left out
		wantWaiting int
	}{
		{"new, not marked", alternative("u1", 1, "a.example/app", nil), "", 1},
		{"marked at an older generation", alternative("u1", 2, "a.example/app", sentAt(1, metav1.ConditionTrue)), "", 1},
		{"marked False", alternative("u1", 2, "a.example/app", sentAt(2, metav1.ConditionFalse)), "", 1},
		{"marked", alternative("u1", 2, "a.example/app", sentAt(2, metav1.ConditionTrue)), "a.example/app", 0},
		{"edited, not marked: the marked generation", alternative("u1", 3, "b.example/app", sentAt(2, metav1.ConditionTrue)), "a.example/app", 1},
		{"edited and marked", alternative("u1", 3, "b.example/app", sentAt(3, metav1.ConditionTrue)), "b.example/app", 0},
		{"made again under its name, not marked", alternative("u2", 1, "c.example/app", nil), "", 1},
		{"the new one marked", alternative("u2", 1, "c.example/app", sentAt(1, metav1.ConditionTrue)), "c.example/app", 0},
	}
	for _, s := range steps {
		alts, _, waiting := g.filter([]v1alpha1.ImageAlternative{s.listed}, nil)
		got := ""
		if len(alts) == 1 {
			got = alts[0].Spec.Alternatives[0].Repository
		} else if len(alts) > 1 {
			t.Fatalf("%s: %d resources out of one", s.name, len(alts))
		}
		if got != s.wantRepo || waiting != s.wantWaiting {
			t.Errorf("%s: passed %q, %d waiting; want %q, %d", s.name, got, waiting, s.wantRepo, s.wantWaiting)
		}
	}

	// Deleted: forgotten, so an object listed again under that name and UID is not passed at
	// the old generation.
	g.filter(nil, nil)
	if alts, _, _ := g.filter([]v1alpha1.ImageAlternative{alternative("u2", 2, "d.example/app", nil)}, nil); len(alts) != 0 {
		t.Errorf("after a deletion, an unmarked resource was passed: %+v", alts[0].Spec)
	}
}

// Mirrors go through the same gate, apart from the alternatives of the same name.
func TestGateKeepsMirrorsApartFromAlternatives(t *testing.T) {
	g := newGate()
	ia := alternative("u1", 1, "a.example/app", sentAt(1, metav1.ConditionTrue))
	im := testutil.NewImageMirror("app", "mirror.example/all/").Build()
	im.UID, im.Generation = "u9", 1
	alts, mirrors, waiting := g.filter([]v1alpha1.ImageAlternative{ia}, []v1alpha1.ImageMirror{im})
	if len(alts) != 1 || len(mirrors) != 0 || waiting != 1 {
		t.Fatalf("got %d alternatives, %d mirrors, %d waiting; want 1, 0, 1", len(alts), len(mirrors), waiting)
	}
	im.Status.Conditions = []metav1.Condition{*sentAt(1, metav1.ConditionTrue)}
	if _, mirrors, waiting = g.filter([]v1alpha1.ImageAlternative{ia}, []v1alpha1.ImageMirror{im}); len(mirrors) != 1 || waiting != 0 {
		t.Fatalf("marked mirror: got %d mirrors, %d waiting; want 1, 0", len(mirrors), waiting)
	}
}
