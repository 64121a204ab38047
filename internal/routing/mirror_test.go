package routing_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestCandidatesMirror(t *testing.T) {
	const dest = "registry.tld/mirror/"
	mirror := func(excludes ...string) []v1alpha1.ImageMirror {
		return []v1alpha1.ImageMirror{testutil.NewImageMirror("m", dest).Exclude(excludes...).Build()}
	}
	mirrored := func(image, ref string) []string {
		return []string{"original " + image, "ImageMirror/m registry.tld/mirror/" + ref}
	}
	notMirrored := func(image string) []string { return []string{"original " + image} }

	tests := map[string]struct {
		mirrors []v1alpha1.ImageMirror
		image   string
		want    []string
	}{
		"candidate is the destination path followed by the full normalized reference": {
			mirrors: mirror(),
			image:   "nginx",
			want:    mirrored("docker.io/library/nginx:latest", "docker.io/library/nginx:latest"),
		},
		"destination written without a trailing slash gets exactly one": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "registry.tld/mirror").Build()},
			image:   "quay.io/acme/foo:v1",
			want:    mirrored("quay.io/acme/foo:v1", "quay.io/acme/foo:v1"),
		},
		"destination on a bare host": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", "registry.tld:5000/").Build()},
			image:   "quay.io/acme/foo:v1",
			want:    []string{"original quay.io/acme/foo:v1", "ImageMirror/m registry.tld:5000/quay.io/acme/foo:v1"},
		},
		"tag and digest are carried over": {
			mirrors: mirror(),
			image:   "quay.io/acme/foo:v1@" + digest,
			want:    mirrored("quay.io/acme/foo:v1@"+digest, "quay.io/acme/foo:v1@"+digest),
		},
		"an image under the destination is not mirrored again": {
			mirrors: mirror(),
			image:   "registry.tld/mirror/docker.io/library/nginx:latest",
			want:    notMirrored("registry.tld/mirror/docker.io/library/nginx:latest"),
		},
		"an image at the destination itself is not mirrored": {
			mirrors: mirror(),
			image:   "registry.tld/mirror:v1",
			want:    notMirrored("registry.tld/mirror:v1"),
		},
		"an image in a sibling of the destination sharing its prefix is mirrored": {
			mirrors: mirror(),
			image:   "registry.tld/mirror-old/foo:v1",
			want:    mirrored("registry.tld/mirror-old/foo:v1", "registry.tld/mirror-old/foo:v1"),
		},
		"an image whose host has a port cannot be mirrored": {
			mirrors: mirror(),
			image:   "registry.local:5000/foo:v1",
			want:    notMirrored("registry.local:5000/foo:v1"),
		},
		"an image whose mirrored name just fits is mirrored": {
			mirrors: mirror(),
			image:   "quay.io/" + strings.Repeat("a", 240),
			want:    mirrored("quay.io/"+strings.Repeat("a", 240)+":latest", "quay.io/"+strings.Repeat("a", 240)+":latest"),
		},
		"an image whose mirrored name would be too long is not mirrored": {
			mirrors: mirror(),
			image:   "quay.io/" + strings.Repeat("a", 241),
			want:    notMirrored("quay.io/" + strings.Repeat("a", 241) + ":latest"),
		},
		"rewritePolicy None never routes": {
			mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("m", dest).Policy(v1alpha1.RewritePolicyNone).Build()},
			image:   "nginx",
			want:    notMirrored("docker.io/library/nginx:latest"),
		},
		"single star excludes a repository one level below": {
			mirrors: mirror("ghcr.io/huge/*"),
			image:   "ghcr.io/huge/a:v1",
			want:    notMirrored("ghcr.io/huge/a:v1"),
		},
		"single star does not exclude two levels below": {
			mirrors: mirror("ghcr.io/huge/*"),
			image:   "ghcr.io/huge/a/b:v1",
			want:    mirrored("ghcr.io/huge/a/b:v1", "ghcr.io/huge/a/b:v1"),
		},
		"double star excludes any depth below": {
			mirrors: mirror("ghcr.io/huge/**"),
			image:   "ghcr.io/huge/a/b:v1",
			want:    notMirrored("ghcr.io/huge/a/b:v1"),
		},
		"double star does not exclude a sibling sharing the prefix": {
			mirrors: mirror("ghcr.io/huge/**"),
			image:   "ghcr.io/huger/a:v1",
			want:    mirrored("ghcr.io/huger/a:v1", "ghcr.io/huger/a:v1"),
		},
		"question mark is one character": {
			mirrors: mirror("quay.io/acme/fo?"),
			image:   "quay.io/acme/foo:v1",
			want:    notMirrored("quay.io/acme/foo:v1"),
		},
		"glob without tag excludes every tag": {
			mirrors: mirror("quay.io/acme/foo"),
			image:   "quay.io/acme/foo:v2",
			want:    notMirrored("quay.io/acme/foo:v2"),
		},
		"glob without tag excludes a digest": {
			mirrors: mirror("quay.io/acme/foo"),
			image:   "quay.io/acme/foo@" + digest,
			want:    notMirrored("quay.io/acme/foo@" + digest),
		},
		"glob without tag does not exclude a longer name": {
			mirrors: mirror("quay.io/acme/foo"),
			image:   "quay.io/acme/foobar:v1",
			want:    mirrored("quay.io/acme/foobar:v1", "quay.io/acme/foobar:v1"),
		},
		"glob with a tag excludes that tag": {
			mirrors: mirror("quay.io/acme/foo:v1*"),
			image:   "quay.io/acme/foo:v1.2",
			want:    notMirrored("quay.io/acme/foo:v1.2"),
		},
		"glob with a tag excludes that tag pinned by digest": {
			mirrors: mirror("quay.io/acme/foo:v1"),
			image:   "quay.io/acme/foo:v1@" + digest,
			want:    notMirrored("quay.io/acme/foo:v1@" + digest),
		},
		"glob with a tag does not exclude another tag": {
			mirrors: mirror("quay.io/acme/foo:v1"),
			image:   "quay.io/acme/foo:v2",
			want:    mirrored("quay.io/acme/foo:v2", "quay.io/acme/foo:v2"),
		},
		"glob with a tag does not exclude a digest alone": {
			mirrors: mirror("quay.io/acme/foo:v1"),
			image:   "quay.io/acme/foo@" + digest,
			want:    mirrored("quay.io/acme/foo@"+digest, "quay.io/acme/foo@"+digest),
		},
		"glob with a digest excludes that digest, with or without tag": {
			mirrors: mirror("quay.io/acme/foo@" + digest),
			image:   "quay.io/acme/foo:v1@" + digest,
			want:    notMirrored("quay.io/acme/foo:v1@" + digest),
		},
		"glob with a digest does not exclude another digest": {
			mirrors: mirror("quay.io/acme/foo@" + digest),
			image:   "quay.io/acme/foo@" + otherHash,
			want:    mirrored("quay.io/acme/foo@"+otherHash, "quay.io/acme/foo@"+otherHash),
		},
		"glob on every repository with one tag": {
			mirrors: mirror("**:latest"),
			image:   "nginx",
			want:    notMirrored("docker.io/library/nginx:latest"),
		},
		"glob with a port in the host matches the repository, not a tag": {
			mirrors: mirror("registry.tld:5000/**"),
			image:   "registry.tld:5000/foo:v1",
			want:    notMirrored("registry.tld:5000/foo:v1"),
		},
		"short glob excludes the docker hub official image": {
			mirrors: mirror("nginx"),
			image:   "docker.io/library/nginx:1.25",
			want:    notMirrored("docker.io/library/nginx:1.25"),
		},
		"short glob with a tag excludes the docker hub official image": {
			mirrors: mirror("nginx:1.*"),
			image:   "nginx:1.25",
			want:    notMirrored("docker.io/library/nginx:1.25"),
		},
		"short glob on a docker hub namespace excludes its images": {
			mirrors: mirror("bitnami/**"),
			image:   "bitnami/redis:7",
			want:    notMirrored("docker.io/bitnami/redis:7"),
		},
		"glob starting with a wildcard is taken against the normalized reference": {
			mirrors: mirror("*/library/*"),
			image:   "redis:7",
			want:    notMirrored("docker.io/library/redis:7"),
		},
		"an exclusion in one mirror leaves another mirror alone": {
			mirrors: []v1alpha1.ImageMirror{
				testutil.NewImageMirror("a", "a.tld/").Exclude("quay.io/**").Build(),
				testutil.NewImageMirror("b", "b.tld/").Build(),
			},
			image: "quay.io/acme/foo:v1",
			want:  []string{"original quay.io/acme/foo:v1", "ImageMirror/b b.tld/quay.io/acme/foo:v1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, nil, tc.mirrors)
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

func TestCandidatesUnavailable(t *testing.T) {
	tests := map[string]struct {
		alternatives []v1alpha1.ImageAlternative
		want         []string
	}{
		"an unavailable entry is never a candidate": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("quay.io/acme/foo").Repository("down.local/foo").Unavailable().Repository("up.local/foo").Build()},
			want: []string{"original quay.io/acme/foo:v1", "ImageAlternative/a up.local/foo:v1"},
		},
		"an original sitting on an unavailable entry is dropped": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("up.local/foo").Repository("quay.io/acme/foo").Unavailable().Build()},
			want: []string{"ImageAlternative/a up.local/foo:v1"},
		},
		"an original sitting on an unavailable group entry is dropped": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Group("quay.io/acme/").Unavailable().Group("up.local/acme/").Build()},
			want: []string{"ImageAlternative/a up.local/acme/foo:v1"},
		},
		"an original declared unavailable by another resource is dropped": {
			alternatives: []v1alpha1.ImageAlternative{
				testutil.NewImageAlternative("a").Repository("quay.io/acme/foo").Repository("a.local/foo").Build(),
				testutil.NewImageAlternative("b").Repository("quay.io/acme/foo").Unavailable().Repository("b.local/foo").Build(),
			},
			want: []string{"ImageAlternative/a a.local/foo:v1", "ImageAlternative/b b.local/foo:v1"},
		},
		"an original on an unavailable entry with nothing else available leaves an empty list": {
			alternatives: []v1alpha1.ImageAlternative{testutil.NewImageAlternative("a").
				Repository("quay.io/acme/foo").Unavailable().Repository("down.local/foo").Unavailable().Build()},
			want: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ix := mustIndex(t, tc.alternatives, nil)
			got, err := ix.Candidates("quay.io/acme/foo:v1", nil, nil)
			if err != nil {
				t.Fatalf("Candidates: %v", err)
			}
			if diff := cmp.Diff(tc.want, summary(got)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}
