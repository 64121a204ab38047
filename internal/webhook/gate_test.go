package webhook

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func alternative(uid types.UID, gen int64, repo string, sent *metav1.Condition) v1alpha1.ImageAlternative {
	return alternativeOf(uid, gen, []string{repo, "mirror.example/app"}, sent)
}

func alternativeOf(uid types.UID, gen int64, repos []string, sent *metav1.Condition) v1alpha1.ImageAlternative {
	b := testutil.NewImageAlternative("app")
	for _, r := range repos {
		b.Repository(r)
	}
	ia := b.Build()
	ia.UID, ia.Generation = uid, gen
	if sent != nil {
		ia.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen}, *sent}
	}
	return ia
}

func sentAt(gen int64, status metav1.ConditionStatus) *metav1.Condition {
	return &metav1.Condition{Type: v1alpha1.ConditionPodsSent, Status: status, ObservedGeneration: gen, Reason: "Filtered"}
}

// The gate passes a resource at a generation marked PodsSent. While a newer one waits: the
// newer if it covers no more than the marked one, the marked one if the newer only widens it,
// neither if it changed both ways; nothing for a new object not marked.
func TestGatePassesOnlyGenerationsTheConditionsCover(t *testing.T) {
	g := newGate()
	m := "mirror.example/app"
	steps := []struct {
		name        string
		listed      v1alpha1.ImageAlternative
		want        string // the passed spec's repositories, "" for left out
		wantWaiting int
	}{
		{"new, not marked", alternative("u1", 1, "a.example/app", nil), "", 1},
		{"marked at an older generation", alternative("u1", 2, "a.example/app", sentAt(1, metav1.ConditionTrue)), "", 1},
		{"marked False", alternative("u1", 2, "a.example/app", sentAt(2, metav1.ConditionFalse)), "", 1},
		{"marked", alternative("u1", 2, "a.example/app", sentAt(2, metav1.ConditionTrue)), "a.example/app " + m, 0},
		{"changed both ways, not marked: neither", alternative("u1", 3, "b.example/app", sentAt(2, metav1.ConditionTrue)), "", 1},
		{"changed and marked", alternative("u1", 3, "b.example/app", sentAt(3, metav1.ConditionTrue)), "b.example/app " + m, 0},
		{"widened, not marked: the marked one", alternativeOf("u1", 4, []string{"b.example/app", m, "c.example/app"}, sentAt(3, metav1.ConditionTrue)), "b.example/app " + m, 1},
		{"widened and marked", alternativeOf("u1", 4, []string{"b.example/app", m, "c.example/app"}, sentAt(4, metav1.ConditionTrue)), "b.example/app " + m + " c.example/app", 0},
		{"narrowed, not marked: the new one", alternativeOf("u1", 5, []string{"b.example/app", m}, sentAt(4, metav1.ConditionTrue)), "b.example/app " + m, 1},
		{"made again under its name, not marked", alternative("u2", 1, "c.example/app", nil), "", 1},
		{"the new one marked", alternative("u2", 1, "c.example/app", sentAt(1, metav1.ConditionTrue)), "c.example/app " + m, 0},
	}
	for _, s := range steps {
		alts, _, waiting := g.filter([]v1alpha1.ImageAlternative{s.listed}, nil)
		got := ""
		if len(alts) == 1 {
			var repos []string
			for _, a := range alts[0].Spec.Alternatives {
				repos = append(repos, a.Repository)
			}
			got = strings.Join(repos, " ")
		} else if len(alts) > 1 {
			t.Fatalf("%s: %d resources out of one", s.name, len(alts))
		}
		if got != s.want || waiting != s.wantWaiting {
			t.Errorf("%s: passed %q, %d waiting; want %q, %d", s.name, got, waiting, s.want, s.wantWaiting)
		}
	}

	// Deleted: forgotten, so an object listed again under that name and UID is not passed at
	// the old generation.
	g.filter(nil, nil)
	if alts, _, _ := g.filter([]v1alpha1.ImageAlternative{alternative("u2", 2, "d.example/app", nil)}, nil); len(alts) != 0 {
		t.Errorf("after a deletion, an unmarked resource was passed: %+v", alts[0].Spec)
	}
}

// An edit that makes a resource route nothing (rewritePolicy None) takes effect at once, even
// with no leader to mark it.
func TestGateStopsRoutingAtOnce(t *testing.T) {
	g := newGate()
	im := testutil.NewImageMirror("app", "mirror.example/all/").Build()
	im.UID, im.Generation = "u1", 1
	im.Status.Conditions = []metav1.Condition{*sentAt(1, metav1.ConditionTrue)}
	if _, mirrors, _ := g.filter(nil, []v1alpha1.ImageMirror{im}); len(mirrors) != 1 {
		t.Fatal("marked mirror left out")
	}
	im.Generation = 2
	im.Spec.RewritePolicy = v1alpha1.RewritePolicyNone
	_, mirrors, waiting := g.filter(nil, []v1alpha1.ImageMirror{im})
	if len(mirrors) != 1 || mirrors[0].Spec.RewritePolicy != v1alpha1.RewritePolicyNone || waiting != 1 {
		t.Errorf("rewritePolicy None, not marked: passed %+v (%d waiting), want the new spec", mirrors, waiting)
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
