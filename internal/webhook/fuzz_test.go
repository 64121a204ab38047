package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// FuzzAdmission sends AdmissionReview bytes to the HTTP handlers the webhook server serves
// (podAdmission for pods, the RoutingValidator for routing resources) and checks what the API
// server would: no panic (neither recovered by kuik nor by controller-runtime), a response that
// is an AdmissionReview with the request's UID, a pod admission that is never denied, and a
// JSON patch that applies to the pod and yields a pod that decodes, whose images kuik changed
// are valid references, whose kuik annotations are JSON in valid UTF-8 and whose annotations,
// labels and pull secret names stay within the API server's validation.
//
// The routing index covers the seeds' images with every policy and form; availability is
// decided without a network: a candidate is available when its registry host ends in ".up".
func FuzzAdmission(f *testing.F) {
	for _, seed := range seedReviews(f) {
		f.Add(seed)
	}
	handlers := fuzzHandlers(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		panics := testutil.ToFloat64(metrics.AdmissionErrors.WithLabelValues("panic"))
		req, decoded := decodeReview(body)
		for _, path := range []string{MutatePodsPath, ValidateRoutingPath} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			handlers.ServeHTTP(rec, r)
			resp := checkResponse(t, path, rec, req, decoded)
			if path == MutatePodsPath && decoded {
				checkPodResponse(t, req, resp)
			}
		}
		if n := testutil.ToFloat64(metrics.AdmissionErrors.WithLabelValues("panic")); n != panics {
			t.Fatalf("the pod mutator recovered a panic (see the log) on %q", body)
		}
	})
}

// fuzzHandlers is the webhook server's mux, with the index and dependencies of a test world.
func fuzzHandlers(f testing.TB) *http.ServeMux {
	creds := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "creds"}}
	ias := []v1alpha1.ImageAlternative{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "acme"},
			Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
				{Repository: "quay.io/acme/app"},
				{Repository: "mirror.up/acme/app", Auth: creds},
				{Repository: "backup.up/acme/app", Insecure: true},
			}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
			Spec: v1alpha1.ImageAlternativeSpec{
				RewritePolicy:     v1alpha1.RewritePolicyAlways,
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				Alternatives: []v1alpha1.Alternative{
					{Repository: "docker.io/library/nginx"},
					{Repository: "down.example/library/nginx"},
					{Repository: "registry.up/library/nginx", Auth: creds},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "ghcr"},
			Spec: v1alpha1.ImageAlternativeSpec{
				PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}},
				Alternatives: []v1alpha1.Alternative{
					{RepositoryGroup: "ghcr.io/"},
					{RepositoryGroup: "ghcr.up/cache/", Auth: creds},
				},
			},
		},
	}
	ims := []v1alpha1.ImageMirror{{
		ObjectMeta: metav1.ObjectMeta{Name: "everything"},
		Spec: v1alpha1.ImageMirrorSpec{
			ExcludeImages: []string{"registry.k8s.io/**", "*.local/**"},
			Destination:   v1alpha1.MirrorDestination{Path: "mirror.up/m/", Pull: &v1alpha1.MirrorPull{Auth: creds}},
		},
	}}
	ix, errs := routing.NewIndex(ias, ims)
	if len(errs) > 0 {
		f.Fatal(errs)
	}
	var index atomic.Pointer[routing.Index]
	index.Store(ix)
	m := &PodMutator{
		Index: &index,
		Namespaces: func(_ context.Context, ns string) (labels.Set, error) {
			if ns == "unreadable" {
				return nil, fmt.Errorf("namespace %s: not found", ns)
			}
			return labels.Set{"team": "a", "kubernetes.io/metadata.name": ns}, nil
		},
		Choose: upHostsAvailable,
	}
	v := &RoutingValidator{
		ClusterResourceNamespace: "kuik-system",
		Review: func(_ context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
			// Admins may do anything; the others nothing.
			sar.Status.Allowed = sar.Spec.User == "admin"
			return sar, nil
		},
	}
	mux := http.NewServeMux()
	mux.Handle(MutatePodsPath, podAdmission(time.Second, m))
	mux.Handle(ValidateRoutingPath, routingAdmission(v))
	return mux
}

// upHostsAvailable is a route.Chooser: each list's first candidate whose registry host ends in ".up".
func upHostsAvailable(_ context.Context, lists [][]routing.Candidate, _ bool) []route.Choice {
	out := make([]route.Choice, len(lists))
	for l, cands := range lists {
		out[l] = route.Choice{Index: -1}
		for i, c := range cands {
			host, _, _ := strings.Cut(c.Reference, "/")
			if strings.HasSuffix(host, ".up") {
				out[l] = route.Choice{Index: i, Digest: "sha256:" + strings.Repeat("ab", 32)}
				break
			}
		}
	}
	return out
}

// reviewCodecs decode AdmissionReviews as controller-runtime's handler does.
var reviewCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := admissionv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := admissionv1beta1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s)
}()

// anyVersionReview decodes a v1 or v1beta1 AdmissionReview, as controller-runtime's does.
type anyVersionReview struct{ admissionv1.AdmissionReview }

func (r *anyVersionReview) DeepCopyObject() runtime.Object {
	return &anyVersionReview{AdmissionReview: *r.DeepCopy()}
}

// decodeReview decodes the request as the handler does; false when the handler cannot.
// The request also carries its apiVersion and kind, which the response must repeat when they
// are an AdmissionReview's (the API server sends nothing else; controller-runtime echoes what
// it decoded).
func decodeReview(body []byte) (*review, bool) {
	if len(body) == 0 {
		return nil, false
	}
	req := &admissionv1.AdmissionRequest{}
	ar := anyVersionReview{}
	ar.Request = req
	ar.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	_, gvk, err := reviewCodecs.UniversalDeserializer().Decode(body, nil, &ar)
	if err != nil {
		return nil, false
	}
	r := &review{AdmissionRequest: req}
	if gvk != nil && gvk.Group == admissionv1.GroupName && gvk.Kind == "AdmissionReview" {
		r.apiVersion = gvk.GroupVersion().String()
	}
	return r, true
}

// review is a decoded request, with the AdmissionReview apiVersion it came in ("" for another).
type review struct {
	*admissionv1.AdmissionRequest
	apiVersion string
}

// checkResponse checks the answer is an AdmissionReview the API server accepts and no panic
// was recovered by controller-runtime.
func checkResponse(t *testing.T, path string, rec *httptest.ResponseRecorder, req *review, decoded bool) *admissionv1.AdmissionResponse {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: HTTP %d", path, rec.Code)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: the response is not an AdmissionReview: %v\n%s", path, err, rec.Body.Bytes())
	}
	if out.Response == nil {
		t.Fatalf("%s: the AdmissionReview has no response:\n%s", path, rec.Body.Bytes())
	}
	if r := out.Response.Result; r != nil && strings.Contains(r.Message, "[recovered]") {
		t.Fatalf("%s: a panic was recovered: %s", path, r.Message)
	}
	if !decoded {
		return out.Response
	}
	if req.apiVersion != "" && (out.APIVersion != req.apiVersion || out.Kind != "AdmissionReview") {
		t.Fatalf("%s: the response to an AdmissionReview %s is apiVersion %q kind %q", path, req.apiVersion, out.APIVersion, out.Kind)
	}
	if out.Response.UID != req.UID {
		t.Fatalf("%s: response UID %q for request UID %q", path, out.Response.UID, req.UID)
	}
	return out.Response
}

// checkPodResponse checks what the pod mutator answered to a request that decoded.
func checkPodResponse(t *testing.T, req *review, resp *admissionv1.AdmissionResponse) {
	t.Helper()
	if !resp.Allowed {
		t.Fatalf("the pod mutator denied a request: %+v", resp.Result)
	}
	if len(resp.Patch) == 0 {
		return
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("a patch of type %v", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("the patch does not decode: %v\n%s", err, resp.Patch)
	}
	// The API server applies the patch to its own serialization of the pod it sent, not to
	// arbitrary bytes (a fuzzed object may lack metadata or spell "Metadata"): the pod decoded,
	// encoded again. The API server only sends pods that decode; kuik decodes only the fields it
	// reads (decodePod), so a fuzzed pod whose other fields do not decode may be patched: its
	// patch is checked against those fields.
	var before, after corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &before); err != nil {
		before = corev1.Pod{}
		if err := decodePod(req.Object.Raw, &before); err != nil {
			t.Fatalf("a pod whose fields kuik reads do not decode was patched: %v", err)
		}
	}
	sent, err := json.Marshal(&before)
	if err != nil {
		t.Fatalf("encoding the pod: %v", err)
	}
	patched, err := p.Apply(sent)
	if err != nil {
		t.Fatalf("the patch does not apply to the pod: %v\npatch %s\npod %s", err, resp.Patch, sent)
	}
	if err := json.Unmarshal(patched, &after); err != nil {
		t.Fatalf("the patched pod does not decode: %v\npatch %s", err, resp.Patch)
	}
	checkPatchedPod(t, &before, &after, resp.Patch)
}

// checkPatchedPod checks what kuik changed in the pod is valid for the API server.
func checkPatchedPod(t *testing.T, before, after *corev1.Pod, patch []byte) {
	t.Helper()
	images := func(p *corev1.Pod) map[string]string {
		out := map[string]string{}
		for i, c := range p.Spec.InitContainers {
			out[fmt.Sprintf("initContainers[%d]", i)] = c.Image
		}
		for i, c := range p.Spec.Containers {
			out[fmt.Sprintf("containers[%d]", i)] = c.Image
		}
		for i, c := range p.Spec.EphemeralContainers {
			out[fmt.Sprintf("ephemeralContainers[%d]", i)] = c.Image
		}
		return out
	}
	old := images(before)
	for at, image := range images(after) {
		if image == old[at] {
			continue
		}
		if _, err := routing.Normalize(image); err != nil {
			t.Errorf("%s: kuik wrote image %q, which is not a valid reference: %v", at, image, err)
		}
	}
	for _, key := range []string{v1alpha1.AnnotationOriginalImages, v1alpha1.AnnotationRewrittenBy, v1alpha1.AnnotationReason} {
		v, ok := after.Annotations[key]
		if !ok || v == before.Annotations[key] {
			continue
		}
		if !utf8.ValidString(v) {
			t.Errorf("kuik wrote annotation %s in invalid UTF-8: %q", key, v)
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			t.Errorf("kuik wrote annotation %s that is not a JSON object of strings: %v: %q", key, err, v)
		}
	}
	if v, ok := after.Labels[v1alpha1.LabelRewritten]; ok && v != before.Labels[v1alpha1.LabelRewritten] && v != "true" {
		t.Errorf("kuik wrote label %s=%q", v1alpha1.LabelRewritten, v)
	}
	meta := field.NewPath("metadata")
	if len(apivalidation.ValidateAnnotations(before.Annotations, meta.Child("annotations"))) == 0 {
		if errs := apivalidation.ValidateAnnotations(after.Annotations, meta.Child("annotations")); len(errs) > 0 {
			t.Errorf("valid annotations turned invalid by kuik's patch: %v\npatch %s", errs.ToAggregate(), patch)
		}
	}
	if len(metav1validation.ValidateLabels(before.Labels, meta.Child("labels"))) == 0 {
		if errs := metav1validation.ValidateLabels(after.Labels, meta.Child("labels")); len(errs) > 0 {
			t.Errorf("valid labels turned invalid by kuik's patch: %v\npatch %s", errs.ToAggregate(), patch)
		}
	}
	for _, r := range after.Spec.ImagePullSecrets[min(len(before.Spec.ImagePullSecrets), len(after.Spec.ImagePullSecrets)):] {
		if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
			t.Errorf("kuik added imagePullSecret %q: %v", r.Name, errs)
		}
	}
}

// seedReviews are AdmissionReviews as kube-apiserver sends them (the fields it sets, its
// userInfo, options and dryRun), for the pods and routing resources of the webhook's tests:
// covered and uncovered containers, every container kind, a reinvocation with kuik's own
// records, forged and malformed records, invalid UTF-8 in kuik's annotations, 100 containers,
// a 4 KiB image, an ephemeral container update, a namespace that cannot be read, a v1beta1
// review, and routing resources valid and not.
func seedReviews(f testing.TB) [][]byte {
	pod := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: "team-a", Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: "app", Image: "quay.io/acme/app:v1", ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePath: "/dev/termination-log"}},
				RestartPolicy:                 corev1.RestartPolicyAlways,
				DNSPolicy:                     corev1.DNSClusterFirst,
				ServiceAccountName:            "default",
				SchedulerName:                 "default-scheduler",
				TerminationGracePeriodSeconds: new(int64(30)),
			},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	user := authenticationv1.UserInfo{Username: "admin", UID: "b3a6f0e8", Groups: []string{"system:masters", "system:authenticated"}}
	review := func(apiVersion string, op admissionv1.Operation, kind metav1.GroupVersionKind, resource metav1.GroupVersionResource, sub, ns, name string, obj, old any) []byte {
		raw := func(o any) runtime.RawExtension {
			if o == nil {
				return runtime.RawExtension{}
			}
			b, err := json.Marshal(o)
			if err != nil {
				f.Fatal(err)
			}
			return runtime.RawExtension{Raw: b}
		}
		options := map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
		if op == admissionv1.Update {
			options["kind"] = "UpdateOptions"
		}
		r := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "705ab4f5-6393-11e8-b7cc-42010a800002", Kind: kind, Resource: resource, SubResource: sub,
				RequestKind: &kind, RequestResource: &resource, RequestSubResource: sub,
				Name: name, Namespace: ns, Operation: op, UserInfo: user,
				Object: raw(obj), OldObject: raw(old), DryRun: new(false), Options: raw(options),
			},
		}
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	create := func(p *corev1.Pod) []byte {
		return review("admission.k8s.io/v1", admissionv1.Create, podKind, pods, "", p.Namespace, "", p, nil)
	}

	var seeds [][]byte
	seeds = append(seeds,
		create(pod("plain", nil)),
		create(pod("uncovered", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/team/app:v3" })),
		create(pod("nginx", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx" })),
		create(pod("every-kind", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "ghcr.io/acme/init:v1"}}
			p.Spec.Containers = append(p.Spec.Containers,
				corev1.Container{Name: "sidecar", Image: "docker.io/library/nginx:1.27@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
				corev1.Container{Name: "excluded", Image: "registry.k8s.io/pause:3.10"})
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}}
		})),
		create(pod("reinvoked", func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "mirror.up/acme/app:v1"
			p.Labels[v1alpha1.LabelRewritten] = "true"
			p.Annotations = map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"app":"quay.io/acme/app:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"app":"ImageAlternative/acme"}`,
				v1alpha1.AnnotationReason:         `{"app":"OnFailure"}`,
			}
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "kuik-inject-imagealternative-acme"}}
		})),
		create(pod("forged", func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "ghcr.io/evil/app:v1"
			p.Labels[v1alpha1.LabelRewritten] = "true"
			p.Annotations = map[string]string{
				v1alpha1.AnnotationOriginalImages: `{"app":"quay.io/acme/app:v1"}`,
				v1alpha1.AnnotationRewrittenBy:    `{"app":"ImageAlternative/acme"}`,
				v1alpha1.AnnotationReason:         `not json`,
			}
		})),
		create(pod("invalid-utf8", func(p *corev1.Pod) {
			p.Annotations = map[string]string{
				v1alpha1.AnnotationOriginalImages: "{\"app\":\"quay.io/acme/\xff\xfe:v1\"}",
				v1alpha1.AnnotationRewrittenBy:    "\xc3\x28",
				"example.com/note":                "\xed\xa0\x80",
			}
		})),
		create(pod("hundred", func(p *corev1.Pod) {
			p.Spec.Containers = nil
			for i := range 100 {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%03d", i), Image: fmt.Sprintf("quay.io/acme/app:v%d", i)})
			}
		})),
		create(pod("long-image", func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "quay.io/acme/app:" + strings.Repeat("a", 4096)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "long-path", Image: "quay.io/acme/" + strings.Repeat("x/", 2048) + "app:v1"})
		})),
		create(pod("skip", func(p *corev1.Pod) { p.Labels[v1alpha1.LabelSkip] = "true" })),
		create(pod("unreadable", func(p *corev1.Pod) { p.Namespace = "unreadable" })),
		review("admission.k8s.io/v1beta1", admissionv1.Create, podKind, pods, "", "team-a", "", pod("beta", nil), nil),
	)
	// kubectl debug: a new ephemeral container on a running pod.
	running := pod("debugged", nil)
	running.Name = "debugged-x7k2p"
	debugged := running.DeepCopy()
	debugged.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-abcde", Image: "quay.io/acme/app:debug"}}}
	seeds = append(seeds, review("admission.k8s.io/v1", admissionv1.Update, podKind, pods, "ephemeralcontainers", "team-a", running.Name, debugged, running))

	// Routing resources, for the validator.
	iaKind := metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: "ImageAlternative"}
	ias := metav1.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Resource: "imagealternatives"}
	imKind := metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Kind: "ImageMirror"}
	ims := metav1.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: "v1alpha1", Resource: "imagemirrors"}
	ia := &v1alpha1.ImageAlternative{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ImageAlternative"},
		ObjectMeta: metav1.ObjectMeta{Name: "acme"},
		Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
			{Repository: "quay.io/acme/app"},
			{Repository: "mirror.up/acme/app", Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "creds"}}},
		}},
	}
	bad := ia.DeepCopy()
	bad.Spec.Alternatives = append(bad.Spec.Alternatives, v1alpha1.Alternative{Repository: "Quay.io/UPPER:tag"}, v1alpha1.Alternative{RepositoryGroup: "ghcr.io/"})
	im := &v1alpha1.ImageMirror{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ImageMirror"},
		ObjectMeta: metav1.ObjectMeta{Name: "everything"},
		Spec: v1alpha1.ImageMirrorSpec{
			ExcludeImages: []string{"registry.k8s.io/**", "ghcr.io/[abc"},
			Destination:   v1alpha1.MirrorDestination{Path: "mirror.up/m/", Pull: &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "creds"}}}},
		},
	}
	seeds = append(seeds,
		review("admission.k8s.io/v1", admissionv1.Create, iaKind, ias, "", "", ia.Name, ia, nil),
		review("admission.k8s.io/v1", admissionv1.Create, iaKind, ias, "", "", bad.Name, bad, nil),
		review("admission.k8s.io/v1", admissionv1.Update, iaKind, ias, "", "", ia.Name, bad, ia),
		review("admission.k8s.io/v1", admissionv1.Create, imKind, ims, "", "", im.Name, im, nil),
		[]byte(`{}`),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"c","image":"quay.io/acme/app:v1"}]}}}}`),
	)
	return seeds
}
