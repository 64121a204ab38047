package routing_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	digest    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	otherHash = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// mustIndex builds an index from resources that are all expected to be valid.
func mustIndex(t testing.TB, alternatives []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) *routing.Index {
	t.Helper()
	ix, errs := routing.NewIndex(alternatives, mirrors)
	if len(errs) > 0 {
		t.Fatalf("NewIndex: %v", errs)
	}
	return ix
}

// summary shows a list as "<source> <reference>" lines, which is what most tests are about.
func summary(cs []routing.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Source.String()+" "+c.Reference)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func src(kind routing.Kind, name string) routing.Source {
	return routing.Source{Kind: kind, Name: name}
}

func metaName(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name}
}
