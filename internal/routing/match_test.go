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

func TestCandidatesMatching(t *testing.T) {
	acme := testutil.NewImageAlternative("acme").
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	acmeGroup := testutil.NewImageAlternative("acme-group").
		Group("quay.io/acme/").Group("registry.local/acme").Build()

	tests := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		image        string
		want         []string
	}{
		"repository matches a tag and carries it over": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo:v1",
			want:         []string{"original quay.io/acme/foo:v1", "ImageAlternative/acme registry.local/acme/foo:v1"},
		},
		"repository matches an image without tag as latest": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo",
			want:         []string{"original quay.io/acme/foo:latest", "ImageAlternative/acme registry.local/acme/foo:latest"},
		},
		"repository matches a digest and carries it over": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo@" + digest,
			want:         []string{"original quay.io/acme/foo@" + digest, "ImageAlternative/acme registry.local/acme/foo@" + digest},
		},
		"repository matches a tag and digest and carries both over": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo:v1@" + digest,
			want:         []string{"original quay.io/acme/foo:v1@" + digest, "ImageAlternative/acme registry.local/acme/foo:v1@" + digest},
		},
		"repository matches from any of its entries": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "registry.local/acme/foo:v1",
			want:         []string{"original registry.local/acme/foo:v1", "ImageAlternative/acme quay.io/acme/foo:v1"},
		},
		"repository does not match a longer name sharing its prefix": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo-bar:v1",
			want:         []string{"original quay.io/acme/foo-bar:v1"},
		},
		"repository does not match a repository below it": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme/foo/bar:v1",
			want:         []string{"original quay.io/acme/foo/bar:v1"},
		},
		"repository does not match a repository above it": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "quay.io/acme:v1",
			want:         []string{"original quay.io/acme:v1"},
		},
		"repository does not match the same path on another host": {
			alternatives: []v1alpha1.ImageAlternative{acme},
			image:        "ghcr.io/acme/foo:v1",
			want:         []string{"original ghcr.io/acme/foo:v1"},
		},
		"group matches one level below and carries the name over": {
			alternatives: []v1alpha1.ImageAlternative{acmeGroup},
			image:        "quay.io/acme/x:v1",
			want:         []string{"original quay.io/acme/x:v1", "ImageAlternative/acme-group registry.local/acme/x:v1"},
		},
		"group written without a trailing slash matches the same": {
			alternatives: []v1alpha1.ImageAlternative{acmeGroup},
			image:        "registry.local/acme/x@" + digest,
			want:         []string{"original registry.local/acme/x@" + digest, "ImageAlternative/acme-group quay.io/acme/x@" + digest},
		},
		"group does not match two levels below": {
			alternatives: []v1alpha1.ImageAlternative{acmeGroup},
			image:        "quay.io/acme/x/y:v1",
			want:         []string{"original quay.io/acme/x/y:v1"},
		},
		"group does not match its own path": {
			alternatives: []v1alpha1.ImageAlternative{acmeGroup},
			image:        "quay.io/acme:v1",
			want:         []string{"original quay.io/acme:v1"},
		},
		"group does not match a sibling sharing its prefix": {
			alternatives: []v1alpha1.ImageAlternative{acmeGroup},
			image:        "quay.io/acme-corp/x:v1",
			want:         []string{"original quay.io/acme-corp/x:v1"},
		},
		"group on a bare host matches repositories right under it": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hosts").Group("quay.io/").Group("registry.local/quay/").Build()},
			image:        "quay.io/x:v1",
			want:         []string{"original quay.io/x:v1", "ImageAlternative/hosts registry.local/quay/x:v1"},
		},
		"docker hub short name matches a normalized entry": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Repository("docker.io/library/nginx").Repository("mirror.local/nginx").Build()},
			image:        "nginx",
			want:         []string{"original docker.io/library/nginx:latest", "ImageAlternative/hub mirror.local/nginx:latest"},
		},
		"docker hub short entry matches a normalized image": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Repository("nginx").Repository("mirror.local/nginx").Build()},
			image:        "docker.io/library/nginx:1.25",
			want:         []string{"original docker.io/library/nginx:1.25", "ImageAlternative/hub mirror.local/nginx:1.25"},
		},
		"docker hub legacy host is docker.io": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Repository("nginx").Repository("mirror.local/nginx").Build()},
			image:        "index.docker.io/nginx:1.25",
			want:         []string{"original docker.io/library/nginx:1.25", "ImageAlternative/hub mirror.local/nginx:1.25"},
		},
		"docker hub user repository is not an official image": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Repository("nginx").Repository("mirror.local/nginx").Build()},
			image:        "someone/nginx:1.25",
			want:         []string{"original docker.io/someone/nginx:1.25"},
		},
		"docker hub official images as a group": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Group("library/").Group("registry.local/hub/").Build()},
			image:        "redis:7",
			want:         []string{"original docker.io/library/redis:7", "ImageAlternative/hub registry.local/hub/redis:7"},
		},
		"docker hub group carries a name over to docker hub": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hub").Group("docker.io/").Group("registry.local/hub/").Build()},
			image:        "registry.local/hub/redis:7",
			want:         []string{"original registry.local/hub/redis:7", "ImageAlternative/hub docker.io/library/redis:7"},
		},
		"registry with a port matches": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("port").Repository("registry.local:5000/acme/foo").Repository("quay.io/acme/foo").Build()},
			image:        "registry.local:5000/acme/foo:v1",
			want:         []string{"original registry.local:5000/acme/foo:v1", "ImageAlternative/port quay.io/acme/foo:v1"},
		},
		"registry with another port does not match": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("port").Repository("registry.local:5000/acme/foo").Repository("quay.io/acme/foo").Build()},
			image:        "registry.local:5001/acme/foo:v1",
			want:         []string{"original registry.local:5001/acme/foo:v1"},
		},
		"registry with a port is carried over by a group": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("port").Group("quay.io/acme/").Group("localhost:5000/acme/").Build()},
			image:        "quay.io/acme/x:v1",
			want:         []string{"original quay.io/acme/x:v1", "ImageAlternative/port localhost:5000/acme/x:v1"},
		},
		"a carried-over name within the reference length limit is kept": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hosts").Group("quay.io/").Group("registry.local/quay/").Build()},
			image:        "quay.io/" + strings.Repeat("a", 250),
			want: []string{
				"original quay.io/" + strings.Repeat("a", 250) + ":latest",
				"ImageAlternative/hosts registry.local/quay/" + strings.Repeat("a", 250) + ":latest",
			},
		},
		"a carried-over name past the reference length limit is left out": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("hosts").Group("quay.io/").Group("registry.local/quay/").Build()},
			image:        "quay.io/" + strings.Repeat("a", 251),
			want:         []string{"original quay.io/" + strings.Repeat("a", 251) + ":latest"},
		},
		"no resource leaves the original alone": {
			image: "quay.io/acme/foo:v1",
			want:  []string{"original quay.io/acme/foo:v1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, tc.alternatives, nil)
			got, err := ix.Candidates(tc.image, nil, nil)
			if err != nil {
				t.Fatalf("Candidates: %v", err)
			}
			if diff := cmp.Diff(tc.want, summary(got)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCandidatesInvalidImage(t *testing.T) {
	ix := mustIndex(t, []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("acme").Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build(),
	}, nil)
	for name, image := range map[string]string{
		"upper-case repository": "quay.io/Acme/foo",
		"empty":                 "",
		"trailing colon":        "quay.io/acme/foo:",
		"bad digest":            "quay.io/acme/foo@sha256:short",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ix.Candidates(image, nil, nil)
			if !errors.Is(err, routing.ErrInvalidImage) {
				t.Fatalf("Candidates(%q) = %v, %v; want ErrInvalidImage", image, summary(got), err)
			}
			if _, err := routing.Normalize(image); !errors.Is(err, routing.ErrInvalidImage) {
				t.Errorf("Normalize(%q) error = %v, want ErrInvalidImage", image, err)
			}
		})
	}
}

func TestNilIndexLeavesTheOriginal(t *testing.T) {
	var ix *routing.Index
	got, err := ix.Candidates("nginx", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []routing.Candidate{{Reference: "docker.io/library/nginx:latest", Entry: -1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
}

func TestNormalize(t *testing.T) {
	tests := map[string]struct {
		image, want string
	}{
		"short name gets docker hub and latest": {image: "nginx", want: "docker.io/library/nginx:latest"},
		"docker hub user":                       {image: "someone/app:1", want: "docker.io/someone/app:1"},
		"legacy docker hub host":                {image: "index.docker.io/library/nginx:1", want: "docker.io/library/nginx:1"},
		"other registry keeps its host":         {image: "quay.io/acme/foo", want: "quay.io/acme/foo:latest"},
		"port is part of the host":              {image: "registry.local:5000/foo", want: "registry.local:5000/foo:latest"},
		"localhost is a host":                   {image: "localhost/foo", want: "localhost/foo:latest"},
		"digest alone gets no tag":              {image: "nginx@" + digest, want: "docker.io/library/nginx@" + digest},
		"tag and digest are both kept":          {image: "nginx:1@" + digest, want: "docker.io/library/nginx:1@" + digest},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := routing.Normalize(tc.image)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.image, got, tc.want)
			}
		})
	}
}

// The parse cache must answer exactly what parsing does, for repeated and for new images.
func TestCandidatesAreTheSameFromTheParseCache(t *testing.T) {
	ix, errs := routing.NewIndex([]v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("acme").Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build(),
	}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, image := range []string{"quay.io/acme/foo:v1", "quay.io/acme/foo:v1", "quay.io/acme/foo@sha256:" + strings.Repeat("a", 64), "nginx", "nginx"} {
		first, err := ix.Candidates(image, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ix.Candidates(image, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Errorf("%s: second lookup differs (-first +again):\n%s", image, diff)
		}
	}
	if _, err := ix.Candidates("UPPER/Case", nil, nil); err == nil {
		t.Error("an invalid image parsed")
	}
	if _, err := ix.Candidates("UPPER/Case", nil, nil); err == nil {
		t.Error("an invalid image parsed the second time (cached?)")
	}
}
