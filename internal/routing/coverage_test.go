package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestCoverage(t *testing.T) {
	alts := []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("b").Repository("nginx").Repository("quay.io/acme/nginx").Build(),
		testutil.NewImageAlternative("a").Repository("docker.io/library/nginx").Repository("ghcr.io/acme/app").Build(),
		testutil.NewImageAlternative("groups").Group("library/").Group("Quay.IO/acme").Build(),
		testutil.NewImageAlternative("trial").Repository("registry.local:5000/trial").DryRun().Build(),
		testutil.NewImageAlternative("invalid").Repository("quay.io/acme/app:v1").Build(),
	}
	mirrors := []v1alpha1.ImageMirror{
		testutil.NewImageMirror("z", "mirror.local/z/").Exclude("bitnami/**", "*/**:debug").Build(),
		testutil.NewImageMirror("none", "mirror.local/none/").Policy(v1alpha1.RewritePolicyNone).Build(),
		testutil.NewImageMirror("dry", "mirror.local:5000/").DryRun().Build(),
	}
	ix, errs := routing.NewIndex(alts, mirrors)
	if len(errs) != 1 {
		t.Fatalf("NewIndex errors = %v, want the invalid resource only", errs)
	}
	want := routing.Coverage{
		Repositories: []string{"docker.io/library/nginx", "ghcr.io/acme/app", "quay.io/acme/nginx", "registry.local:5000/trial"},
		Groups:       []string{"Quay.IO/acme", "docker.io/library"},
		Mirrors: []routing.MirrorCoverage{
			{Name: "dry", Destination: "mirror.local:5000"},
			{Name: "z", Destination: "mirror.local/z", ExcludeImages: []routing.ExcludeGlob{
				{Name: "docker.io/bitnami/**"},
				{Name: "*/**", Tag: "debug", HasTag: true},
			}},
		},
	}
	if diff := cmp.Diff(want, ix.Coverage()); diff != "" {
		t.Errorf("Coverage (-want +got):\n%s", diff)
	}
	if got := (*routing.Index)(nil).Coverage(); !cmp.Equal(got, routing.Coverage{}) {
		t.Errorf("nil index: Coverage = %+v, want none", got)
	}
}
