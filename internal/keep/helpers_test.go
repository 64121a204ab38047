package keep_test

import (
	"encoding/json"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	// dest is the keep mirror's destination path, as the ImageMirror spells it.
	dest = "mirror.local/kuik/"
)

// keepMirror is the keep-enabled mirror most tests use.
var keepMirror = keep.Mirror{Name: "keep", Destination: dest, CountTemplates: true}

// resources: the mirror "keep" (Always) for every pod; the mirror "team" (OnFailure, keep
// disabled in most tests) for pods labelled team=a, excluding busybox; the mirror "dry" (a dry
// run, which routes nothing); an alternative "alt"
// between quay.io/acme/app (which needs a credential) and ghcr.io/acme/app.
func index(t testing.TB) *routing.Index {
	t.Helper()
	ix, errs := routing.NewIndex(
		[]v1alpha1.ImageAlternative{
			testutil.NewImageAlternative("alt").
				Repository("quay.io/acme/app").SecretRef("quay-pull").
				Repository("ghcr.io/acme/app").Build(),
		},
		[]v1alpha1.ImageMirror{
			testutil.NewImageMirror("keep", dest).Policy(v1alpha1.RewritePolicyAlways).Build(),
			testutil.NewImageMirror("team", "team.local/m/").
				PodSelector(map[string]string{"team": "a"}).Exclude("docker.io/library/busybox").Build(),
			testutil.NewImageMirror("dry", "dry.local/m/").DryRun().Build(),
		})
	if len(errs) > 0 {
		t.Fatalf("NewIndex: %v", errs)
	}
	return ix
}

// pod is a live pod in namespace "default" with one container per image, named c0, c1, ….
func pod(name string, images ...string) keep.Pod {
	p := keep.Pod{Namespace: "default", Name: name, Labels: labels.Set{"app": name}}
	for i, image := range images {
		p.Containers = append(p.Containers, keep.Container{Name: "c" + string(rune('0'+i)), Image: image})
	}
	return p
}

// withImageID sets the imageID of container i.
func withImageID(p keep.Pod, i int, imageID string) keep.Pod {
	p.Containers = slices.Clone(p.Containers)
	p.Containers[i].ImageID = imageID
	p.Containers[i].StatusImage = p.Containers[i].Image
	return p
}

// withStatusImage sets the image the container's status reports (the container started before
// the spec image changed).
func withStatusImage(p keep.Pod, i int, image string) keep.Pod {
	p.Containers = slices.Clone(p.Containers)
	p.Containers[i].StatusImage = image
	return p
}

// routed records on container c0 what the webhook writes when by rewrote original.
func routed(p keep.Pod, original string, by string) keep.Pod {
	p.Annotations = map[string]string{
		v1alpha1.AnnotationOriginalImages: mustJSON(map[string]string{"c0": original}),
	}
	if by != "" {
		p.Annotations[v1alpha1.AnnotationRewrittenBy] = mustJSON(map[string]string{"c0": by})
	}
	return p
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func snapshot(pods ...keep.Pod) *keep.Snapshot {
	return &keep.Snapshot{Pods: pods, Namespaces: map[string]labels.Set{"default": {"kubernetes.io/metadata.name": "default"}}}
}
