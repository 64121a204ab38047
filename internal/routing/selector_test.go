package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestCandidatesSelectors(t *testing.T) {
	web := map[string]string{"app": "web"}
	prod := map[string]string{"env": "prod"}
	routed := []string{"original quay.io/acme/foo:v1", "ImageAlternative/a registry.local/acme/foo:v1"}
	mirrored := []string{"original quay.io/acme/foo:v1", "ImageMirror/m mirror.local/quay.io/acme/foo:v1"}
	notRouted := []string{"original quay.io/acme/foo:v1"}
	alt := func() *testutil.ImageAlternativeBuilder {
		return testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Repository("registry.local/acme/foo")
	}
	unavailableOriginal := func() *testutil.ImageAlternativeBuilder {
		return testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Unavailable().Repository("registry.local/acme/foo")
	}
	withExpression := alt().Build()
	withExpression.Spec.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"batch"}},
	}}
	emptySelectors := alt().Build()
	emptySelectors.Spec.PodSelector = &metav1.LabelSelector{}
	emptySelectors.Spec.NamespaceSelector = &metav1.LabelSelector{}

	tests := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		mirrors      []v1alpha1.ImageMirror
		pod, ns      labels.Set
		want         []string
	}{
		"pod selector routes a selected pod": {
			alternatives: []v1alpha1.ImageAlternative{alt().PodSelector(web).Build()},
			pod:          labels.Set{"app": "web", "other": "x"},
			want:         routed,
		},
		"pod selector leaves another pod alone": {
			alternatives: []v1alpha1.ImageAlternative{alt().PodSelector(web).Build()},
			pod:          labels.Set{"app": "db"},
			want:         notRouted,
		},
		"pod selector leaves a pod without labels alone": {
			alternatives: []v1alpha1.ImageAlternative{alt().PodSelector(web).Build()},
			want:         notRouted,
		},
		"namespace selector routes a pod of a selected namespace": {
			alternatives: []v1alpha1.ImageAlternative{alt().NamespaceSelector(prod).Build()},
			ns:           labels.Set{"env": "prod"},
			want:         routed,
		},
		"namespace selector leaves a pod of another namespace alone": {
			alternatives: []v1alpha1.ImageAlternative{alt().NamespaceSelector(prod).Build()},
			pod:          labels.Set{"env": "prod"},
			ns:           labels.Set{"env": "dev"},
			want:         notRouted,
		},
		"both selectors must match": {
			alternatives: []v1alpha1.ImageAlternative{alt().PodSelector(web).NamespaceSelector(prod).Build()},
			pod:          labels.Set{"app": "web"},
			ns:           labels.Set{"env": "dev"},
			want:         notRouted,
		},
		"match expressions are honoured": {
			alternatives: []v1alpha1.ImageAlternative{withExpression},
			pod:          labels.Set{"tier": "batch"},
			want:         notRouted,
		},
		"match expressions select what they do not exclude": {
			alternatives: []v1alpha1.ImageAlternative{withExpression},
			pod:          labels.Set{"tier": "front"},
			want:         routed,
		},
		"empty selectors select every pod": {
			alternatives: []v1alpha1.ImageAlternative{emptySelectors},
			pod:          labels.Set{"app": "anything"},
			want:         routed,
		},
		"an unselected resource does not drop an original it declares unavailable": {
			alternatives: []v1alpha1.ImageAlternative{unavailableOriginal().PodSelector(web).Build()},
			pod:          labels.Set{"app": "db"},
			want:         notRouted,
		},
		"mirror pod selector routes a selected pod": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "mirror.local").PodSelector(web).Build()},
			pod:     labels.Set{"app": "web"},
			want:    mirrored,
		},
		"mirror pod selector leaves another pod alone": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "mirror.local").PodSelector(web).Build()},
			pod:     labels.Set{"app": "db"},
			want:    notRouted,
		},
		"mirror namespace selector leaves another namespace alone": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "mirror.local").NamespaceSelector(prod).Build()},
			ns:      labels.Set{"env": "dev"},
			want:    notRouted,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, tc.alternatives, tc.mirrors)
			got, err := ix.Candidates("quay.io/acme/foo:v1", tc.pod, tc.ns)
			if err != nil {
				t.Fatalf("Candidates: %v", err)
			}
			if diff := cmp.Diff(tc.want, summary(got)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}
