package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The index enforces: dry-run resources are left out of its candidates and its records, and
// WithDryRun merges them in the order DESIGN §2 gives every resource.
func TestDryRunResourcesOnlyInWithDryRun(t *testing.T) {
	enforcing := testutil.NewImageAlternative("b-enforcing").Policy(v1alpha1.RewritePolicyOnFailure).
		Repository("quay.io/acme/foo").Repository("registry.local/b/foo").Build()
	trial := testutil.NewImageAlternative("a-trial").Policy(v1alpha1.RewritePolicyOnFailure).DryRun().
		Repository("quay.io/acme/foo").Repository("registry.local/a/foo").Build()
	mirror := testutil.NewImageMirror("hub", "mirror.local/").Policy(v1alpha1.RewritePolicyAlways).DryRun().PinDigest().Build()
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{enforcing, trial}, []v1alpha1.ImageMirror{mirror})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	refs := func(ix *routing.Index) []string {
		cands, err := ix.Candidates("quay.io/acme/foo:v1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cands {
			s := c.Reference
			if c.DryRun {
				s += " (dry run)"
			}
			if c.PinDigest {
				s += " (pin)"
			}
			out = append(out, s)
		}
		return out
	}
	if diff := cmp.Diff([]string{"quay.io/acme/foo:v1", "registry.local/b/foo:v1"}, refs(ix)); diff != "" {
		t.Errorf("enforcing candidates (-want +got):\n%s", diff)
	}
	if ix.Len() != 1 {
		t.Errorf("Len = %d, want the one enforcing resource", ix.Len())
	}
	want := []string{
		"mirror.local/quay.io/acme/foo:v1 (dry run) (pin)",
		"quay.io/acme/foo:v1",
		"registry.local/a/foo:v1 (dry run)",
		"registry.local/b/foo:v1",
	}
	if diff := cmp.Diff(want, refs(ix.WithDryRun())); diff != "" {
		t.Errorf("candidates with the dry runs (-want +got):\n%s", diff)
	}
	// A record naming a dry-run resource is not one kuik could have written.
	if got := ix.Recorded("quay.io/acme/foo:v1", "registry.local/a/foo:v1", routing.Source{Kind: routing.KindImageAlternative, Name: "a-trial"}, nil, nil); len(got) != 0 {
		t.Errorf("a record by a dry-run resource verifies: %v", got)
	}
	// No dry-run resource, no second index.
	plain, _ := routing.NewIndex([]v1alpha1.ImageAlternative{enforcing}, nil)
	if plain.WithDryRun() != nil {
		t.Error("WithDryRun is not nil without a dry-run resource")
	}
}
