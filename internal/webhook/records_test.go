package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A pod author can write kuik's annotations and label by hand. The webhook keeps a record only
// when it is one kuik could have written (the resource selects the pod and has the current
// image as a candidate for the recorded original); anything else is dropped, the container is
// routed from its current image, and the label goes unless a true record remains.
func TestForgedRecordsAreDropped(t *testing.T) {
	const (
		quayFoo  = "quay.io/acme/foo:v1"
		localFoo = "registry.local:5000/acme/foo:v1"
	)
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	// Selects only pods labelled tier=web.
	web := testutil.Alternative("web", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/web"},
		testutil.WithSecret("registry.local:5000/acme/web", "local"))
	web.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}

	forged := func(image string, annotations map[string]string) *corev1.Pod {
		p := pod(corev1.Container{Name: "c", Image: image})
		p.Labels = map[string]string{v1alpha1.LabelRewritten: "true", "app": "x"}
		p.Annotations = annotations
		return p
	}
	tests := map[string]struct {
		pod       *corev1.Pod
		available []string
		want      []jsonpatch.JsonPatchOperation
		probed    int
	}{
		"a true record (an earlier invocation's) is kept and not routed again": {
			pod: forged(localFoo, map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
				v1alpha1.AnnotationReason:         `{"c":"OnFailure"}`,
			}),
			available: []string{quayFoo},
			want:      nil, probed: 0,
		},
		"a record naming a resource that has no such candidate is dropped with the label": {
			pod: forged("ghcr.io/evil/app:v1", map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
				v1alpha1.AnnotationReason:         `{"c":"OnFailure"}`,
			}),
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1original-images"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1reason"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by"},
				{Operation: "remove", Path: "/metadata/labels/kuik.enix.io~1rewritten"},
			},
		},
		"a record for a pod the resource's podSelector excludes is dropped": {
			pod: forged("registry.local:5000/acme/web:v1", map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/web:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/web"}`,
			}),
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1original-images"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by"},
				{Operation: "remove", Path: "/metadata/labels/kuik.enix.io~1rewritten"},
			},
		},
		"a record for a container that does not exist is dropped": {
			pod: forged("ghcr.io/other/app:v1", map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"ghost":"quay.io/acme/foo:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"ghost":"ImageAlternative/acme"}`,
				v1alpha1.AnnotationReason:         `{"ghost":"OnFailure"}`,
			}),
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1original-images"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1reason"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by"},
				{Operation: "remove", Path: "/metadata/labels/kuik.enix.io~1rewritten"},
			},
		},
		"a forged record on a covered container is dropped and the container routed for real": {
			pod: forged(quayFoo, map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v0"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
			}),
			available: []string{quayFoo},
			probed:    1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1original-images"},
				{Operation: "remove", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by"},
				{Operation: "remove", Path: "/metadata/labels/kuik.enix.io~1rewritten"},
			},
		},
		"the label alone, with no record, is removed": {
			pod:  forged("ghcr.io/other/app:v1", nil),
			want: []jsonpatch.JsonPatchOperation{{Operation: "remove", Path: "/metadata/labels/kuik.enix.io~1rewritten"}},
		},
		"JSON null annotations read as empty, not as a panic": {
			pod: func() *corev1.Pod {
				p := pod(corev1.Container{Name: "c", Image: quayFoo})
				p.Annotations = map[string]string{
					v1alpha1.AnnotationOriginalImages: "null",
					v1alpha1.AnnotationRewrittenBy:    "null",
					v1alpha1.AnnotationReason:         "null",
				}
				return p
			}(),
			available: []string{localFoo},
			probed:    1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1original-images", Value: `{"c":"quay.io/acme/foo:v1"}`},
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1reason", Value: `{"c":"OnFailure"}`},
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by", Value: `{"c":"ImageAlternative/acme"}`},
				{Operation: "add", Path: "/metadata/labels", Value: map[string]any{v1alpha1.LabelRewritten: "true"}},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: localFoo},
				{Operation: "add", Path: "/spec/imagePullSecrets", Value: []any{map[string]any{"name": "kuik-inject-imagealternative-acme"}}},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkPatch(t, []v1alpha1.ImageAlternative{acme, web}, nil, tc.pod, tc.available, tc.want, tc.probed)
		})
	}
}

// Every container of a pod is resolved in one call of the chooser, so their probes share one
// timeout: init, regular and ephemeral containers alike.
func TestAllContainersAreResolvedTogether(t *testing.T) {
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{RepositoryGroup: "quay.io/acme/"},
		v1alpha1.Alternative{RepositoryGroup: "registry.local/acme/"})
	p := pod(corev1.Container{Name: "a", Image: "quay.io/acme/a:v1"}, corev1.Container{Name: "b", Image: "quay.io/acme/b:v1"})
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "quay.io/acme/init:v1"}}
	calls := 0
	var lists int
	m := mutator(t, &availability{}, []v1alpha1.ImageAlternative{acme}, nil)
	m.Choose = func(_ context.Context, ls [][]routing.Candidate, _ bool) []route.Choice {
		calls++
		lists = len(ls)
		out := make([]route.Choice, len(ls))
		for i := range out {
			out[i] = route.Choice{Index: 1}
		}
		return out
	}
	resp := m.Handle(t.Context(), createRequest(t, p))
	if calls != 1 || lists != 3 {
		t.Errorf("chooser called %d times, last with %d lists; want once with 3", calls, lists)
	}
	var images []string
	for _, op := range patches(t, resp) {
		if op.Operation == "replace" {
			images = append(images, op.Path+"="+op.Value.(string))
		}
	}
	want := []string{
		"/spec/initContainers/0/image=registry.local/acme/init:v1",
		"/spec/containers/0/image=registry.local/acme/a:v1",
		"/spec/containers/1/image=registry.local/acme/b:v1",
	}
	if diff := cmp.Diff(want, images, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("rewritten images (-want +got):\n%s", diff)
	}
}

// Through pods/ephemeralcontainers nothing but the ephemeral containers can change, so an
// injecting candidate can only win if the pod already has the resource's Secret and, under
// OnFailure, that Secret already holds the entry: the syncer writes an OnFailure Secret with
// the entries that served the pod's (truly) rewritten containers, and nothing will record the
// ephemeral container's rewrite for it.
func TestEphemeralContainersUnderOnFailureUseOnlyEntriesThePodsSecretHolds(t *testing.T) {
	ia := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/app"},
		testutil.WithSecret("one.local/acme/app", "one"),
		testutil.WithSecret("two.local/acme/app", "two"))
	secret := corev1.LocalObjectReference{Name: "kuik-inject-imagealternative-acme"}
	base := func(annotations map[string]string) *corev1.Pod {
		p := pod(corev1.Container{Name: "c", Image: "one.local/acme/app:v1"})
		p.Annotations = annotations
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{secret}
		return p
	}
	trueRecord := map[string]string{
		v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/app:v1"}`,
		v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
	}
	tests := map[string]struct {
		pod       *corev1.Pod
		available []string
		want      []jsonpatch.JsonPatchOperation
	}{
		"the entry that served the pod's rewritten container can be used": {
			pod:       base(trueRecord),
			available: []string{"one.local/acme/app:v1", "two.local/acme/app:v1"},
			want:      []jsonpatch.JsonPatchOperation{{Operation: "replace", Path: "/spec/ephemeralContainers/0/image", Value: "one.local/acme/app:v1"}},
		},
		"another entry of the same resource is not in the Secret and cannot be used": {
			pod:       base(trueRecord),
			available: []string{"two.local/acme/app:v1"},
			want:      nil,
		},
		"a forged record does not put an entry in the Secret": {
			pod: base(map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/app:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/other"}`,
			}),
			available: []string{"one.local/acme/app:v1"},
			want:      nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old := tc.pod
			cur := old.DeepCopy()
			cur.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "quay.io/acme/app:v1"}}}
			req := createRequest(t, cur)
			req.Operation, req.SubResource = admissionv1.Update, "ephemeralcontainers"
			oldRaw, err := json.Marshal(old)
			if err != nil {
				t.Fatal(err)
			}
			req.OldObject = runtime.RawExtension{Raw: oldRaw}
			a := &availability{available: map[string]bool{}}
			for _, r := range tc.available {
				a.available[r] = true
			}
			resp := mutator(t, a, []v1alpha1.ImageAlternative{ia}, nil).Handle(t.Context(), req)
			if diff := cmp.Diff(tc.want, patches(t, resp)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
		})
	}
}

// During an outage every pod of a rollout has no candidate available: that is counted and
// recorded on the pod, and logged only at V(1), so the log does not flood.
func TestNoCandidateIsLoggedOnlyAtV1(t *testing.T) {
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"}, v1alpha1.Alternative{Repository: "mirror.local/acme/foo"})
	for verbosity, want := range map[int]int{0: 0, 1: 1} {
		var lines []string
		logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity})
		ctx := logr.NewContext(t.Context(), logger)
		m := mutator(t, &availability{}, []v1alpha1.ImageAlternative{acme}, nil)
		m.Handle(ctx, createRequest(t, pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"})))
		got := 0
		for _, l := range lines {
			if strings.Contains(l, "No candidate available") {
				got++
			}
		}
		if got != want {
			t.Errorf("at verbosity %d: %d no-candidate lines (%q), want %d", verbosity, got, lines, want)
		}
	}
}

// The secret-syncer keeps nothing of a pod over routing's bounds and would never write the
// credential it is routed to, so the webhook leaves such a pod as it is: labels over
// routing.LabelsWithinBounds (unprobed), or records over routing.MaxRecordBytes (admitted
// unchanged, with a warning, like records over the API server's annotation limit).
func TestPodsOverTheSyncersBoundsAreLeftAlone(t *testing.T) {
	acme := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{RepositoryGroup: "quay.io/acme/"},
		v1alpha1.Alternative{RepositoryGroup: "registry.local/acme/", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "local"}}})
	long := strings.Repeat("r", 200)
	available := []string{"registry.local/acme/foo:v1", "registry.local/acme/" + long + ":v1"}
	withLabels := func(n int) *corev1.Pod {
		p := pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"})
		p.Labels = map[string]string{}
		for i := range n {
			p.Labels[fmt.Sprintf("l%03d", i)] = "v"
		}
		return p
	}
	tests := map[string]struct {
		pod    *corev1.Pod
		want   []jsonpatch.JsonPatchOperation
		probed int
	}{
		"a pod at the label bound is routed": {
			pod:    withLabels(routing.MaxPodLabels),
			probed: 1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{
					v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
					v1alpha1.AnnotationReason:         `{"c":"OnFailure"}`,
					v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
				}},
				{Operation: "add", Path: "/metadata/labels/kuik.enix.io~1rewritten", Value: "true"},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: "registry.local/acme/foo:v1"},
				{Operation: "add", Path: "/spec/imagePullSecrets", Value: []any{map[string]any{"name": "kuik-inject-imagealternative-acme"}}},
			},
		},
		"a pod over the label bound is left alone, unprobed": {pod: withLabels(routing.MaxPodLabels + 1)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkPatch(t, []v1alpha1.ImageAlternative{acme}, nil, tc.pod, available, tc.want, tc.probed)
		})
	}

	t.Run("a pod whose records would be over the bound is admitted unchanged", func(t *testing.T) {
		// 40 containers rewritten from and to images of ~220 bytes: ~19 KiB of records.
		p := pod()
		for i := range 40 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%02d", i), Image: "quay.io/acme/" + long + ":v1"})
		}
		a := &availability{available: map[string]bool{available[1]: true}}
		resp := mutator(t, a, []v1alpha1.ImageAlternative{acme}, nil).Handle(t.Context(), createRequest(t, p))
		if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "records") {
			t.Errorf("allowed=%v patches=%d warnings=%v, want allowed unchanged with a warning naming the records", resp.Allowed, len(resp.Patch), resp.Warnings)
		}
	})
}
