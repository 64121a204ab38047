package webhook_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func mirror(name string, policy v1alpha1.RewritePolicy, path string) v1alpha1.ImageMirror {
	return v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ImageMirrorSpec{RewritePolicy: policy, Destination: v1alpha1.MirrorDestination{Path: path}},
	}
}

// availability answers like a registry would: only the listed references are available. It
// records what it was asked so tests can prove uncovered images are never probed.
type availability struct {
	available map[string]bool
	asked     [][]string
}

func (a *availability) choose(_ context.Context, lists [][]routing.Candidate, _ bool) []route.Choice {
	out := make([]route.Choice, len(lists))
	for l, cands := range lists {
		var refs []string
		for _, c := range cands {
			refs = append(refs, c.Reference)
		}
		a.asked = append(a.asked, refs)
		out[l] = route.Choice{Index: -1}
		for i, c := range cands {
			if a.available[c.Reference] {
				out[l] = route.Choice{Index: i, Digest: digestOf(c.Reference)}
				break
			}
		}
	}
	return out
}

// digestOf is the digest availability answers for a reference: the one it names, or one
// derived from the reference.
func digestOf(ref string) string {
	if _, d, ok := strings.Cut(ref, "@"); ok {
		return d
	}
	h := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(h[:])
}

func mutator(t *testing.T, a *availability, ias []v1alpha1.ImageAlternative, ims []v1alpha1.ImageMirror) *webhook.PodMutator {
	t.Helper()
	ix, errs := routing.NewIndex(ias, ims)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var p atomic.Pointer[routing.Index]
	p.Store(ix)
	return &webhook.PodMutator{
		Index:      &p,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{"team": "a"}, nil },
		Choose:     a.choose,
	}
}

func createRequest(t testing.TB, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "uid",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "ns",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}}
}

// patches decodes the JSON patch the mutator answered, nil for none; the mutator writes the
// patch's bytes itself (resp.Patch), never operations for controller-runtime to encode.
func patches(t testing.TB, resp admission.Response) []jsonpatch.JsonPatchOperation {
	t.Helper()
	if len(resp.Patches) > 0 {
		t.Fatalf("operations %v for controller-runtime to encode", resp.Patches)
	}
	if resp.Patch == nil {
		if resp.PatchType != nil {
			t.Fatalf("patch type %s without a patch", *resp.PatchType)
		}
		return nil
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want %s", resp.PatchType, admissionv1.PatchTypeJSONPatch)
	}
	var ops []jsonpatch.JsonPatchOperation
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatalf("the patch is not a JSON patch: %v\n%s", err, resp.Patch)
	}
	if len(ops) == 0 {
		t.Fatalf("an empty patch %s: none is nil", resp.Patch)
	}
	// Byte for byte what controller-runtime would have written for the same operations.
	if want, err := json.Marshal(ops); err != nil || !bytes.Equal(resp.Patch, want) {
		t.Fatalf("the patch is\n%s\nwhere json.Marshal of its operations gives\n%s (%v)", resp.Patch, want, err)
	}
	return ops
}

func pod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}

func sortPatch(p []jsonpatch.JsonPatchOperation) []jsonpatch.JsonPatchOperation {
	p = slices.Clone(p)
	slices.SortFunc(p, func(a, b jsonpatch.JsonPatchOperation) int { return strings.Compare(a.Path, b.Path) })
	return p
}

func TestPodMutatorPatches(t *testing.T) {
	const (
		quayFoo  = "quay.io/acme/foo:v1"
		localFoo = "registry.local:5000/acme/foo:v1"
	)
	onFailure := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	always := mirror("hub", v1alpha1.RewritePolicyAlways, "mirror.local/hub/")

	tests := map[string]struct {
		pod       *corev1.Pod
		ias       []v1alpha1.ImageAlternative
		ims       []v1alpha1.ImageMirror
		available []string
		want      []jsonpatch.JsonPatchOperation
		probed    int
	}{
		"an image no resource covers is left alone and never probed": {
			pod:  pod(corev1.Container{Name: "c", Image: "ghcr.io/other/app:v1"}),
			ias:  []v1alpha1.ImageAlternative{onFailure},
			want: nil, probed: 0,
		},
		"an available original is kept and nothing is recorded": {
			pod:       pod(corev1.Container{Name: "c", Image: quayFoo}),
			ias:       []v1alpha1.ImageAlternative{onFailure},
			available: []string{quayFoo, localFoo},
			want:      nil, probed: 1,
		},
		"an unavailable original moves to the alternative, which injects its secret": {
			pod:       pod(corev1.Container{Name: "c", Image: quayFoo}),
			ias:       []v1alpha1.ImageAlternative{onFailure},
			available: []string{localFoo},
			probed:    1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{
					v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
					v1alpha1.AnnotationReason:         `{"c":"OnFailure"}`,
					v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
				}},
				{Operation: "add", Path: "/metadata/labels", Value: map[string]any{v1alpha1.LabelRewritten: "true"}},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: localFoo},
				{Operation: "add", Path: "/spec/imagePullSecrets", Value: []any{map[string]any{"name": "kuik-inject-imagealternative-acme"}}},
			},
		},
		"an Always mirror wins over an available original, without a secret": {
			pod:       pod(corev1.Container{Name: "c", Image: "nginx"}),
			ims:       []v1alpha1.ImageMirror{always},
			available: []string{"mirror.local/hub/docker.io/library/nginx:latest", "docker.io/library/nginx:latest"},
			probed:    1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{
					v1alpha1.AnnotationOriginalImages: `{"c":"nginx"}`,
					v1alpha1.AnnotationReason:         `{"c":"Always"}`,
					v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageMirror/hub"}`,
				}},
				{Operation: "add", Path: "/metadata/labels", Value: map[string]any{v1alpha1.LabelRewritten: "true"}},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: "mirror.local/hub/docker.io/library/nginx:latest"},
			},
		},
		"nothing available leaves the image and records NoAlternatives": {
			pod:    pod(corev1.Container{Name: "c", Image: quayFoo}),
			ias:    []v1alpha1.ImageAlternative{onFailure},
			probed: 1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{
					v1alpha1.AnnotationReason: `{"c":"NoAlternatives"}`,
				}},
			},
		},
		"existing annotations and labels are kept and kuik's keys added one by one": {
			pod: func() *corev1.Pod {
				p := pod(corev1.Container{Name: "c", Image: quayFoo})
				p.Annotations = map[string]string{"team": "payments"}
				p.Labels = map[string]string{"app": "foo"}
				return p
			}(),
			ias:       []v1alpha1.ImageAlternative{onFailure},
			available: []string{localFoo},
			probed:    1,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1original-images", Value: `{"c":"quay.io/acme/foo:v1"}`},
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1reason", Value: `{"c":"OnFailure"}`},
				{Operation: "add", Path: "/metadata/annotations/kuik.enix.io~1rewritten-by", Value: `{"c":"ImageAlternative/acme"}`},
				{Operation: "add", Path: "/metadata/labels/kuik.enix.io~1rewritten", Value: "true"},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: localFoo},
				{Operation: "add", Path: "/spec/imagePullSecrets", Value: []any{map[string]any{"name": "kuik-inject-imagealternative-acme"}}},
			},
		},
		"a container recorded by an earlier invocation is not routed again": {
			pod: func() *corev1.Pod {
				p := pod(corev1.Container{Name: "c", Image: localFoo})
				p.Annotations = map[string]string{
					v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
					v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme"}`,
				}
				p.Labels = map[string]string{v1alpha1.LabelRewritten: "true"}
				return p
			}(),
			ias:       []v1alpha1.ImageAlternative{onFailure},
			available: []string{quayFoo},
			want:      nil, probed: 0,
		},
		"init containers are routed and the secret is added once for two containers": {
			pod: func() *corev1.Pod {
				p := pod(corev1.Container{Name: "c", Image: quayFoo})
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: quayFoo}}
				p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}}
				return p
			}(),
			ias:       []v1alpha1.ImageAlternative{onFailure},
			available: []string{localFoo},
			probed:    2,
			want: []jsonpatch.JsonPatchOperation{
				{Operation: "add", Path: "/metadata/annotations", Value: map[string]any{
					v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1","init":"quay.io/acme/foo:v1"}`,
					v1alpha1.AnnotationReason:         `{"c":"OnFailure","init":"OnFailure"}`,
					v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/acme","init":"ImageAlternative/acme"}`,
				}},
				{Operation: "add", Path: "/metadata/labels", Value: map[string]any{v1alpha1.LabelRewritten: "true"}},
				{Operation: "replace", Path: "/spec/containers/0/image", Value: localFoo},
				{Operation: "add", Path: "/spec/imagePullSecrets/-", Value: map[string]any{"name": "kuik-inject-imagealternative-acme"}},
				{Operation: "replace", Path: "/spec/initContainers/0/image", Value: localFoo},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkPatch(t, tc.ias, tc.ims, tc.pod, tc.available, tc.want, tc.probed)
		})
	}
}

// checkPatch admits pod with only the available references available, and checks the exact
// patch (in any order), that it came with no warning, and how many candidate lists were probed.
func checkPatch(t *testing.T, ias []v1alpha1.ImageAlternative, ims []v1alpha1.ImageMirror, p *corev1.Pod, available []string, want []jsonpatch.JsonPatchOperation, probed int) {
	t.Helper()
	a := &availability{available: map[string]bool{}}
	for _, r := range available {
		a.available[r] = true
	}
	resp := mutator(t, a, ias, ims).Handle(t.Context(), createRequest(t, p))
	if !resp.Allowed || len(resp.Warnings) > 0 {
		t.Fatalf("allowed=%v warnings=%v result=%+v", resp.Allowed, resp.Warnings, resp.Result)
	}
	if diff := cmp.Diff(sortPatch(want), sortPatch(patches(t, resp))); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	if len(a.asked) != probed {
		t.Errorf("%d candidate lists probed (%v), want %d", len(a.asked), a.asked, probed)
	}
}

func TestPodMutatorAdmitsUnchangedOnInternalErrors(t *testing.T) {
	ia := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"}, v1alpha1.Alternative{Repository: "mirror.local/acme/foo"})
	good := func() *corev1.Pod { return pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}) }

	tests := map[string]struct {
		mutate func(m *webhook.PodMutator)
		pod    *corev1.Pod
	}{
		"routing index not built yet": {
			mutate: func(m *webhook.PodMutator) { m.Index = &atomic.Pointer[routing.Index]{} },
			pod:    good(),
		},
		"namespace labels unreadable": {
			mutate: func(m *webhook.PodMutator) {
				m.Namespaces = func(context.Context, string) (labels.Set, error) { return nil, context.DeadlineExceeded }
			},
			pod: good(),
		},
		"the chooser panics": {
			mutate: func(m *webhook.PodMutator) {
				m.Choose = func(context.Context, [][]routing.Candidate, bool) []route.Choice { panic("boom") }
			},
			pod: good(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := &availability{available: map[string]bool{"mirror.local/acme/foo:v1": true}}
			m := mutator(t, a, []v1alpha1.ImageAlternative{ia}, nil)
			if tc.mutate != nil {
				tc.mutate(m)
			}
			resp := m.Handle(t.Context(), createRequest(t, tc.pod))
			if !resp.Allowed || len(resp.Patches) != 0 || resp.Patch != nil {
				t.Errorf("want the pod admitted unchanged, got allowed=%v patch %s", resp.Allowed, resp.Patch)
			}
			if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "internal error") {
				t.Errorf("warnings = %v, want one naming the internal error", resp.Warnings)
			}
		})
	}
}

// Every pod admission is counted under its result, patched, unchanged or error.
func TestPodAdmissionsAreCountedByResult(t *testing.T) {
	ia := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"}, v1alpha1.Alternative{Repository: "mirror.local/acme/foo"})
	a := &availability{available: map[string]bool{"mirror.local/acme/foo:v1": true}}
	count := func(result string) float64 {
		return promtestutil.ToFloat64(metrics.Admissions.WithLabelValues("mutate-pods", result))
	}
	for _, tc := range []struct {
		result string
		pod    *corev1.Pod
		index  bool
	}{
		{"patched", pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}), true},
		{"unchanged", pod(corev1.Container{Name: "c", Image: "ghcr.io/other/app:v1"}), true},
		{"error", pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}), false},
	} {
		m := mutator(t, a, []v1alpha1.ImageAlternative{ia}, nil)
		if !tc.index {
			m.Index = &atomic.Pointer[routing.Index]{}
		}
		before := map[string]float64{"patched": count("patched"), "unchanged": count("unchanged"), "error": count("error")}
		m.Handle(t.Context(), createRequest(t, tc.pod))
		for result, n := range before {
			want := n
			if result == tc.result {
				want++
			}
			if got := count(result); got != want {
				t.Errorf("%s admission: %s counted %v times, want %v", tc.result, result, got-n, want-n)
			}
		}
	}
}

// kuik decodes only the fields of a pod it reads: one of them with the wrong type (or a pod that
// is not JSON) admits the pod unchanged with the decode warning, as decoding the whole pod did;
// a field kuik does not read is not decoded, so the wrong type there does not stop routing (the
// API server, which sends its own serialization of the pod, never sends one).
func TestPodMutatorDecodesOnlyTheFieldsItReads(t *testing.T) {
	ia := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"}, v1alpha1.Alternative{Repository: "mirror.local/acme/foo"})
	const c = `{"name":"c","image":"quay.io/acme/foo:v1"}`
	tests := map[string]struct {
		pod, old string
		routed   bool
	}{
		"not JSON":                           {pod: `{"spec":{"containers":[` + c + `]}`},
		"containers not a list":              {pod: `{"spec":{"containers":` + c + `}}`},
		"an image not a string":              {pod: `{"spec":{"containers":[{"name":"c","image":1}]}}`},
		"a container name not a string":      {pod: `{"spec":{"containers":[{"name":["c"],"image":"quay.io/acme/foo:v1"}]}}`},
		"an init container not an object":    {pod: `{"spec":{"initContainers":["x"],"containers":[` + c + `]}}`},
		"a label value not a string":         {pod: `{"metadata":{"labels":{"app":1}},"spec":{"containers":[` + c + `]}}`},
		"annotations a list":                 {pod: `{"metadata":{"annotations":["a"]},"spec":{"containers":[` + c + `]}}`},
		"the namespace not a string":         {pod: `{"metadata":{"namespace":{}},"spec":{"containers":[` + c + `]}}`},
		"a pull secret name not a string":    {pod: `{"spec":{"containers":[` + c + `],"imagePullSecrets":[{"name":1}]}}`},
		"a syntax error in an unread field":  {pod: `{"spec":{"containers":[` + c + `],"nodeName":nil}}`},
		"the old pod's ephemeral containers": {pod: `{"spec":{"containers":[` + c + `],"ephemeralContainers":[{"name":"e","image":"quay.io/acme/foo:v1"}]}}`, old: `{"spec":{"ephemeralContainers":{}}}`},
		"an unread field of the wrong type":  {pod: `{"spec":{"nodeName":1,"containers":[{"name":"c","image":"quay.io/acme/foo:v1","resources":{"limits":{"cpu":"lots"}}}]},"status":{"phase":[]}}`, routed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := &availability{available: map[string]bool{"mirror.local/acme/foo:v1": true}}
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "uid", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "ns",
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(tc.pod)},
			}}
			if tc.old != "" {
				req.Operation, req.SubResource, req.OldObject = admissionv1.Update, "ephemeralcontainers", runtime.RawExtension{Raw: []byte(tc.old)}
			}
			resp := mutator(t, a, []v1alpha1.ImageAlternative{ia}, nil).Handle(t.Context(), req)
			if tc.routed {
				if !resp.Allowed || len(patches(t, resp)) == 0 || len(resp.Warnings) != 0 {
					t.Errorf("want the pod routed, got allowed=%v patch %s warnings=%v", resp.Allowed, resp.Patch, resp.Warnings)
				}
				return
			}
			if !resp.Allowed || len(resp.Patches) != 0 || resp.Patch != nil {
				t.Errorf("want the pod admitted unchanged, got allowed=%v patch %s", resp.Allowed, resp.Patch)
			}
			if want := []string{"kuik: image routing skipped after an internal error (decode)"}; !slices.Equal(resp.Warnings, want) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, want)
			}
		})
	}
}

func TestEphemeralContainersRouteOnlyNewOnesWithoutInjecting(t *testing.T) {
	ia := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/debug"},
		testutil.WithSecret("private.local/acme/debug", "private"),
		v1alpha1.Alternative{Repository: "public.local/acme/debug"})
	old := pod(corev1.Container{Name: "c", Image: "busybox"})
	old.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg1", Image: "quay.io/acme/debug:v1"}}}
	cur := old.DeepCopy()
	cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg2", Image: "quay.io/acme/debug:v1"}})

	a := &availability{available: map[string]bool{"private.local/acme/debug:v1": true, "public.local/acme/debug:v1": true}}
	req := createRequest(t, cur)
	req.Operation, req.SubResource = admissionv1.Update, "ephemeralcontainers"
	oldRaw, _ := json.Marshal(old)
	req.OldObject = runtime.RawExtension{Raw: oldRaw}

	resp := mutator(t, a, []v1alpha1.ImageAlternative{ia}, nil).Handle(t.Context(), req)
	want := []jsonpatch.JsonPatchOperation{{Operation: "replace", Path: "/spec/ephemeralContainers/1/image", Value: "public.local/acme/debug:v1"}}
	if diff := cmp.Diff(want, patches(t, resp)); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"quay.io/acme/debug:v1", "public.local/acme/debug:v1"}}, a.asked); diff != "" {
		t.Errorf("candidates offered (-want +got): the injecting entry cannot be used through the subresource\n%s", diff)
	}
}
