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

// DryRunSource names a dry-run resource that applies to the image: alternatives first, in
// list order, then mirrors; nothing from the enforcing index.
func TestDryRunSourceNamesAnApplyingDryRunResource(t *testing.T) {
	enforcing := testutil.NewImageAlternative("a-enforcing").Policy(v1alpha1.RewritePolicyOnFailure).
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	retire := testutil.NewImageAlternative("c-retire").Policy(v1alpha1.RewritePolicyOnFailure).DryRun().
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	retire.Spec.Alternatives[0].Unavailable = true
	always := testutil.NewImageAlternative("d-always").Policy(v1alpha1.RewritePolicyAlways).DryRun().
		Repository("quay.io/acme/foo").Repository("registry.local/d/foo").Build()
	mirror := testutil.NewImageMirror("hub", "mirror.local/").Policy(v1alpha1.RewritePolicyAlways).DryRun().Build()
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{enforcing, retire, always}, []v1alpha1.ImageMirror{mirror})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, ok := ix.DryRunSource("quay.io/acme/foo:v1", nil, nil); ok {
		t.Error("the enforcing index names a dry-run resource")
	}
	for image, want := range map[string]routing.Source{
		// The Always band comes first in list order.
		"quay.io/acme/foo:v1": {Kind: routing.KindImageAlternative, Name: "d-always"},
		"quay.io/other/bar:1": {Kind: routing.KindImageMirror, Name: "hub"},
	} {
		if got, ok := ix.WithDryRun().DryRunSource(image, nil, nil); !ok || got != want {
			t.Errorf("DryRunSource(%s) = %v, %v; want %v", image, got, ok, want)
		}
	}
	if _, ok := ix.WithDryRun().DryRunSource("mirror.local/x/y:1", nil, nil); ok {
		t.Error("DryRunSource names a resource for an image none covers")
	}
}
