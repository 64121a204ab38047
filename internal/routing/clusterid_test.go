package routing_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestValidateClusterID(t *testing.T) {
	for _, id := range []string{"a", "eu-west-1", "prod2", strings.Repeat("a", 32)} {
		if err := routing.ValidateClusterID(id); err != nil {
			t.Errorf("ValidateClusterID(%q) = %v, want nil", id, err)
		}
	}
	// "kuik-" would let one cluster's suffix end another's (-kuik-b ends -kuik-a-kuik-b).
	for _, id := range []string{"", "A", "a_b", "-a", "a-", "a.b", strings.Repeat("a", 33), "a-kuik-b", "kuik-b"} {
		if err := routing.ValidateClusterID(id); err == nil {
			t.Errorf("ValidateClusterID(%q) = nil, want an error", id)
		}
	}
}

func TestClusterTag(t *testing.T) {
	tag125 := strings.Repeat("t", 128-len("-kuik-c"))
	tests := []struct {
		tag, id, want string
		err           error
	}{
		{tag: "1.27", id: "", want: "1.27"},
		{tag: "1.27", id: "c", want: "1.27-kuik-c"},
		{tag: "latest", id: "eu-west-1", want: "latest-kuik-eu-west-1"},
		{tag: "", id: "c", want: ""}, // digest only: no tag, shared by every cluster
		{tag: tag125, id: "c", want: tag125 + "-kuik-c"},
		{tag: tag125 + "x", id: "c", err: routing.ErrClusterTagTooLong},
	}
	for _, tc := range tests {
		got, err := routing.ClusterTag(tc.tag, tc.id)
		switch {
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("ClusterTag(%q, %q) = %q, %v; want %v", tc.tag, tc.id, got, err, tc.err)
		case tc.err == nil && (err != nil || got != tc.want):
			t.Errorf("ClusterTag(%q, %q) = %q, %v; want %q", tc.tag, tc.id, got, err, tc.want)
		case tc.err == nil && tc.id != "" && tc.tag != "" && !routing.IsClusterTag(got, tc.id):
			t.Errorf("IsClusterTag(%q, %q) = false for ClusterTag's own tag", got, tc.id)
		}
	}
	if _, err := routing.ClusterTag("v1", "Bad_ID"); err == nil {
		t.Error("ClusterTag with an invalid cluster ID: no error")
	}
}

func TestIsClusterTag(t *testing.T) {
	tests := []struct {
		tag, id string
		want    bool
	}{
		{"1.27-kuik-a", "a", true},
		{"1.27-kuik-a", "b", false},
		{"1.27", "a", false},
		{"1.27-kuik-a", "", false},
		{"1.27", "", false},
		{"-kuik-a", "a", false}, // no image tag before the suffix
		{"1.27-kuik-xa", "a", false},
		{"1.27kuik-a", "a", false},
		{"1.27-kuik-a-kuik-b", "b", true},
		{"1.27-kuik-a-kuik-b", "a", false},
	}
	for _, tc := range tests {
		if got := routing.IsClusterTag(tc.tag, tc.id); got != tc.want {
			t.Errorf("IsClusterTag(%q, %q) = %v, want %v", tc.tag, tc.id, got, tc.want)
		}
	}
}

// MirrorReferenceFor is the keeper's name for an image in a mirror for a cluster: exactly the
// candidate of an index WithClusterID, and an error when that index offers none.
func TestMirrorReferenceForIsTheClusterCandidate(t *testing.T) {
	longTag := strings.Repeat("t", 128-len("-kuik-c")+1)
	tests := []struct {
		image, id string
		want      string
		err       error
	}{
		{image: "nginx:1.27", id: "", want: "mirror.example/kuik/docker.io/library/nginx:1.27"},
		{image: "nginx:1.27", id: "c", want: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-c"},
		{image: "nginx", id: "c", want: "mirror.example/kuik/docker.io/library/nginx:latest-kuik-c"},
		{image: "nginx:1.27@" + digest, id: "c", want: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-c@" + digest},
		{image: "nginx@" + digest, id: "c", want: "mirror.example/kuik/docker.io/library/nginx@" + digest},
		{image: "quay.io/acme/foo:" + longTag, id: "", want: "mirror.example/kuik/quay.io/acme/foo:" + longTag},
		{image: "quay.io/acme/foo:" + longTag, id: "c", err: routing.ErrClusterTagTooLong},
		{image: "quay.io/acme/foo@" + digest, id: "c", want: "mirror.example/kuik/quay.io/acme/foo@" + digest},
		{image: "registry.local:5000/acme/foo:v1", id: "c", err: routing.ErrHostNotPathComponent},
		{image: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-c", id: "c", err: routing.ErrUnderMirror},
	}
	for _, tc := range tests {
		t.Run(tc.id+" "+tc.image, func(t *testing.T) {
			got, err := routing.MirrorReferenceFor("mirror.example/kuik", tc.image, tc.id)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Errorf("MirrorReferenceFor = %q, %v; want %v", got, err, tc.err)
			case tc.err == nil && (err != nil || got != tc.want):
				t.Errorf("MirrorReferenceFor = %q, %v; want %q", got, err, tc.want)
			}
			ix := mustIndex(t, nil, []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "mirror.example/kuik/").Build()}).WithClusterID(tc.id)
			cands, err := ix.Candidates(tc.image, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var fromMirror []string
			for _, c := range cands {
				if c.Source == src(routing.KindImageMirror, "m") {
					fromMirror = append(fromMirror, c.Reference)
				}
			}
			switch {
			case tc.err != nil && len(fromMirror) > 0:
				t.Errorf("the index offers %q, MirrorReferenceFor cannot name it", fromMirror)
			case tc.err == nil && (len(fromMirror) != 1 || fromMirror[0] != tc.want):
				t.Errorf("the index offers %q, want [%q]", fromMirror, tc.want)
			}
		})
	}
	if _, err := routing.MirrorReferenceFor("mirror.example/kuik", "nginx", "a-kuik-b"); err == nil {
		t.Error("MirrorReferenceFor with an invalid cluster ID: no error")
	}
}

// The cluster ID suffixes only mirror candidates: alternatives and the original are unchanged,
// and the dry-run index carries it too.
func TestWithClusterIDChangesOnlyMirrorTags(t *testing.T) {
	alt := testutil.NewImageAlternative("alt").Policy(v1alpha1.RewritePolicyOnFailure).
		Repository("docker.io/library/nginx").Repository("registry.local/nginx").Build()
	mirror := testutil.NewImageMirror("hub", "mirror.example/kuik/").Policy(v1alpha1.RewritePolicyAlways).Build()
	trial := testutil.NewImageMirror("trial", "trial.example/").DryRun().Build()
	ix := mustIndex(t, []v1alpha1.ImageAlternative{alt}, []v1alpha1.ImageMirror{mirror, trial})
	list := func(ix *routing.Index) []string {
		cands, err := ix.Candidates("nginx:1.27", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return summary(cands)
	}
	without := []string{
		"ImageMirror/hub mirror.example/kuik/docker.io/library/nginx:1.27",
		"original docker.io/library/nginx:1.27",
		"ImageAlternative/alt registry.local/nginx:1.27",
	}
	if diff := cmp.Diff(without, list(ix)); diff != "" {
		t.Errorf("without a cluster ID (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(without, list(ix.WithClusterID(""))); diff != "" {
		t.Errorf("with an empty cluster ID (-want +got):\n%s", diff)
	}
	with := []string{
		"ImageMirror/hub mirror.example/kuik/docker.io/library/nginx:1.27-kuik-c",
		"original docker.io/library/nginx:1.27",
		"ImageAlternative/alt registry.local/nginx:1.27",
	}
	cix := ix.WithClusterID("c")
	if diff := cmp.Diff(with, list(cix)); diff != "" {
		t.Errorf("with cluster ID c (-want +got):\n%s", diff)
	}
	if cix.ClusterID() != "c" || ix.ClusterID() != "" {
		t.Errorf("ClusterID = %q and %q, want c and empty", cix.ClusterID(), ix.ClusterID())
	}
	if cix.Len() != ix.Len() {
		t.Errorf("Len = %d, want %d", cix.Len(), ix.Len())
	}
	dry := list(cix.WithDryRun())
	if !cmp.Equal(dry[len(dry)-1], "ImageMirror/trial trial.example/docker.io/library/nginx:1.27-kuik-c") {
		t.Errorf("dry-run candidates with cluster ID c: %q", dry)
	}
	// The copy leaves the original index as it was.
	if diff := cmp.Diff(without, list(ix)); diff != "" {
		t.Errorf("the original index after WithClusterID (-want +got):\n%s", diff)
	}
}

// A record verifies only under the naming it was made with: cluster A's tag does not verify
// under B's, and a pinned (tagless) record is checked by repository as before.
func TestRecordedUnderClusterIDs(t *testing.T) {
	ix := mustIndex(t, nil, []v1alpha1.ImageMirror{testutil.NewImageMirror("hub", "mirror.example/kuik/").Build()})
	hub := src(routing.KindImageMirror, "hub")
	a, b := ix.WithClusterID("a"), ix.WithClusterID("b")
	const original = "nginx:1.27"
	tests := []struct {
		current        string
		noID, inA, inB bool // the record verifies without an ID, under A, under B
	}{
		{current: "mirror.example/kuik/docker.io/library/nginx:1.27", noID: true},
		{current: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-a", noID: true, inA: true},
		{current: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-a@" + digest, noID: true, inA: true},
		{current: "mirror.example/kuik/docker.io/library/nginx:1.27-kuik-b", noID: true, inB: true},
		{current: "mirror.example/kuik/docker.io/library/nginx:1.28-kuik-a", noID: true},
		{current: "mirror.example/kuik/docker.io/library/nginx@" + digest, noID: true, inA: true, inB: true},
		{current: "mirror.example/kuik/docker.io/library/redis:1.27-kuik-a"},
	}
	for _, tc := range tests {
		for _, c := range []struct {
			name string
			ix   *routing.Index
			want bool
		}{{"no ID", ix, tc.noID}, {"A", a, tc.inA}, {"B", b, tc.inB}} {
			got := c.ix.Recorded(original, tc.current, hub, nil, nil)
			if (len(got) > 0) != c.want {
				t.Errorf("%s: Recorded(%q, %q) = %v, want verified %v", c.name, original, tc.current, summary(got), c.want)
			}
		}
	}
	// A digest-only original has one name in every cluster.
	cur := "mirror.example/kuik/docker.io/library/nginx@" + digest
	for _, x := range []*routing.Index{ix, a, b} {
		if got := x.Recorded("nginx@"+digest, cur, hub, nil, nil); len(got) != 1 {
			t.Errorf("cluster %q: a digest-only record does not verify: %v", x.ClusterID(), summary(got))
		}
	}
}
