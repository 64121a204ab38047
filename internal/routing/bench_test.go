package routing_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// benchIndex builds n ImageAlternatives of two entries each, one in ten of the group form and
// one in four with a pod selector, plus the few mirrors a cluster typically has.
func benchIndex(b *testing.B, n int) *routing.Index {
	alts := make([]v1alpha1.ImageAlternative, 0, n)
	for i := range n {
		name := fmt.Sprintf("alt-%05d", i)
		ab := testutil.NewImageAlternative(name)
		if i%10 == 0 {
			ab.Group(fmt.Sprintf("ghcr.io/team%d/", i)).Group(fmt.Sprintf("registry.local/ghcr/team%d/", i)).SecretRef("local")
		} else {
			ab.Repository(fmt.Sprintf("quay.io/org%d/app%d", i, i)).Repository(fmt.Sprintf("registry.local/org%d/app%d", i, i)).SecretRef("local")
		}
		if i%4 == 0 {
			ab.PodSelector(map[string]string{"app": "web"})
		}
		if i%2 == 0 {
			ab.Policy(v1alpha1.RewritePolicyAlways)
		}
		alts = append(alts, ab.Build())
	}
	mirrors := []v1alpha1.ImageMirror{
		testutil.NewImageMirror("cache", "mirror.local/cache/").Policy(v1alpha1.RewritePolicyAlways).
			Exclude("docker.io/library/**", "ghcr.io/huge/**", "**:dev").SecretRef("mirror").Build(),
		testutil.NewImageMirror("backup", "backup.local/").Exclude("docker.io/**").Build(),
		testutil.NewImageMirror("off", "off.local/").Policy(v1alpha1.RewritePolicyNone).Build(),
	}
	ix, errs := routing.NewIndex(alts, mirrors)
	if len(errs) > 0 {
		b.Fatalf("NewIndex: %v", errs)
	}
	return ix
}

func BenchmarkCandidates(b *testing.B) {
	pod := labels.Set{"app": "web", "pod-template-hash": "abc123"}
	ns := labels.Set{"kubernetes.io/metadata.name": "default"}
	for _, n := range []int{10, 1_000, 10_000} {
		ix := benchIndex(b, n)
		for _, lookup := range []struct{ name, image string }{
			// org5/app5 exists at every size; the mirrors apply as well.
			{"covered", "quay.io/org5/app5:v1.2.3"},
			{"covered-group", "ghcr.io/team0/tool@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			// Excluded by every mirror and matched by no alternative: the list is the original.
			{"uncovered", "nginx:1.27"},
		} {
			b.Run(fmt.Sprintf("resources=%d/%s", n, lookup.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ix.Candidates(lookup.image, pod, ns); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkNewIndex(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchIndex(b, n)
			}
		})
	}
}
