package syncer

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The credential written for an entry is the one the kubelet would use for every image the
// entry serves, looked up for the same path the webhook probes with (routing's LookupPath): a
// key written with the mirror's or the group's trailing slash is found, and a key for one
// repository below a group is not taken for the whole group.
func TestResolveLooksUpTheEntrysLookupPath(t *testing.T) {
	slash := dockerSecret("slash", map[string]string{
		"registry.local:5000/mirror/": "mirror:pw",
		"quay.io/acme/":               "group:pw",
		"quay.io/acme/x":              "one-repo:pw",
	})
	tests := map[string]struct {
		res         *Resource
		wantCreds   map[string]string
		wantLeftOut []string
	}{
		"a mirror key with the trailing slash": {
			res:       mustMirror(t, testutil.NewImageMirror("m", "registry.local:5000/mirror/").SecretRef("slash")),
			wantCreds: map[string]string{"registry.local:5000/mirror": "mirror:pw"},
		},
		"a group key with the trailing slash, not the one repository's": {
			res:       mustAlternative(t, testutil.NewImageAlternative("a").Group("quay.io/acme/").SecretRef("slash")),
			wantCreds: map[string]string{"quay.io/acme/": "group:pw"},
		},
		"a repository entry still takes its most specific key": {
			res:       mustAlternative(t, testutil.NewImageAlternative("a").Repository("quay.io/acme/x").SecretRef("slash")),
			wantCreds: map[string]string{"quay.io/acme/x": "one-repo:pw"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Resolve(tc.res, lookupIn(slash), nil)
			creds := map[string]string{}
			for k, a := range got.Credentials {
				creds[k] = a.Username + ":" + a.Password
			}
			if diff := cmp.Diff(tc.wantCreds, creds); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
			if len(got.LeftOut) > 0 {
				t.Errorf("left out: %v", got.LeftOut)
			}
		})
	}
}

// The syncer and the webhook agree on the lookup path of every entry form.
func TestEntryLookupPathIsRoutings(t *testing.T) {
	for _, alt := range []v1alpha1.Alternative{{Repository: "quay.io/acme/foo"}, {RepositoryGroup: "quay.io/team/"}} {
		obj := &v1alpha1.ImageAlternative{Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{alt}}}
		r, err := FromImageAlternative(obj)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Entries[0].LookupPath, routing.AlternativeLookupPath(&alt); got != want {
			t.Errorf("%+v: lookup path %q, want routing's %q", alt, got, want)
		}
	}
	d := v1alpha1.MirrorDestination{Path: "registry.tld/mirror/"}
	r, err := FromImageMirror(&v1alpha1.ImageMirror{Spec: v1alpha1.ImageMirrorSpec{Destination: d}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Entries[0].LookupPath, "registry.tld/mirror/"; got != want {
		t.Errorf("mirror lookup path %q, want %q", got, want)
	}
}
