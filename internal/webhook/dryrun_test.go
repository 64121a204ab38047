package webhook_test

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// admit runs the pod through the mutator and returns it as the API server would store it.
func admit(t *testing.T, m *webhook.PodMutator, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	resp := m.Handle(t.Context(), createRequest(t, p))
	if !resp.Allowed {
		t.Fatalf("pod refused: %v", resp.Result)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if ops := resp.Patch; len(ops) > 0 {
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = patch.Apply(raw); err != nil {
			t.Fatalf("applying %s: %v", ops, err)
		}
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func dryRun(ia v1alpha1.ImageAlternative) v1alpha1.ImageAlternative {
	ia.Spec.DryRun = true
	return ia
}

func dryRunMirror(im v1alpha1.ImageMirror) v1alpha1.ImageMirror {
	im.Spec.DryRun = true
	return im
}

func pinned(ia v1alpha1.ImageAlternative) v1alpha1.ImageAlternative {
	ia.Spec.PinDigest = true
	return ia
}

// A dry-run resource is decided and probed with the others, changes nothing, and says what it
// would have done; merged with enforcing resources it never changes what they decide.
func TestDryRunRecordsWhatItWouldDoAndChangesNothing(t *testing.T) {
	const (
		quayFoo   = "quay.io/acme/foo:v1"
		localFoo  = "registry.local:5000/acme/foo:v1"
		mirrorFoo = "mirror.local/hub/quay.io/acme/foo:v1"
	)
	enforcing := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	trialAlways := dryRun(testutil.Alternative("trial", v1alpha1.RewritePolicyAlways,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local")))
	trialMirror := dryRunMirror(mirror("hub-trial", v1alpha1.RewritePolicyAlways, "mirror.local/hub/"))
	removesOriginal := dryRun(testutil.Alternative("retire", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo", Unavailable: true},
		testutil.WithSecret("registry.local:5000/acme/foo", "local")))

	tests := map[string]struct {
		ias       []v1alpha1.ImageAlternative
		ims       []v1alpha1.ImageMirror
		available []string
		// image and pullSecrets the pod gets; dryRun is the annotation, "" for none.
		image       string
		pullSecrets []string
		dryRun      string
		rewrittenBy string
	}{
		"a dry-run Always alternative leaves an available original and records the alternative": {
			ias:       []v1alpha1.ImageAlternative{trialAlways},
			available: []string{quayFoo, localFoo},
			image:     quayFoo,
			dryRun:    `{"c":{"image":"registry.local:5000/acme/foo:v1","by":"ImageAlternative/trial","reason":"Always"}}`,
		},
		"a dry-run resource that agrees with what happens records nothing": {
			ias:       []v1alpha1.ImageAlternative{dryRun(enforcing)},
			available: []string{quayFoo, localFoo},
			image:     quayFoo,
		},
		"the enforcing resource decides and injects; the dry-run mirror is only recorded": {
			ias:         []v1alpha1.ImageAlternative{enforcing},
			ims:         []v1alpha1.ImageMirror{trialMirror},
			available:   []string{localFoo, mirrorFoo},
			image:       localFoo,
			pullSecrets: []string{"kuik-inject-imagealternative-acme"},
			rewrittenBy: `{"c":"ImageAlternative/acme"}`,
			dryRun:      `{"c":{"image":"mirror.local/hub/quay.io/acme/foo:v1","by":"ImageMirror/hub-trial","reason":"Always"}}`,
		},
		"a dry-run resource retiring the original records where the pod would go": {
			ias:       []v1alpha1.ImageAlternative{removesOriginal},
			available: []string{quayFoo, localFoo},
			image:     quayFoo,
			dryRun:    `{"c":{"image":"registry.local:5000/acme/foo:v1","by":"ImageAlternative/retire","reason":"OnFailure"}}`,
		},
		"a dry-run resource with nothing available records NoAlternatives, the pod keeps its image": {
			ias:    []v1alpha1.ImageAlternative{removesOriginal},
			image:  quayFoo,
			dryRun: `{"c":{"image":"quay.io/acme/foo:v1","by":"ImageAlternative/retire","reason":"NoAlternatives"}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := mutator(t, &availability{available: set(tc.available...)}, tc.ias, tc.ims)
			p := pod(corev1.Container{Name: "c", Image: quayFoo})
			// A pod author's own dry-run record is never kept.
			p.Annotations = map[string]string{v1alpha1.AnnotationDryRun: `{"c":{"image":"evil.example/x","by":"ImageAlternative/acme","reason":"Always"},"ghost":{}}`}
			got := admit(t, m, p)
			if got.Spec.Containers[0].Image != tc.image {
				t.Errorf("image %q, want %q", got.Spec.Containers[0].Image, tc.image)
			}
			var secrets []string
			for _, r := range got.Spec.ImagePullSecrets {
				secrets = append(secrets, r.Name)
			}
			if diff := cmp.Diff(tc.pullSecrets, secrets); diff != "" {
				t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.dryRun, got.Annotations[v1alpha1.AnnotationDryRun]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", v1alpha1.AnnotationDryRun, diff)
			}
			if diff := cmp.Diff(tc.rewrittenBy, got.Annotations[v1alpha1.AnnotationRewrittenBy]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", v1alpha1.AnnotationRewrittenBy, diff)
			}
			// Reinvocation keeps the pod as it is.
			again := admit(t, m, got)
			if diff := cmp.Diff(got, again, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("reinvocation changed the pod (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDryRunDecisionsAreCounted(t *testing.T) {
	trial := dryRun(testutil.Alternative("counted", v1alpha1.RewritePolicyAlways,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		v1alpha1.Alternative{Repository: "registry.local:5000/acme/foo"}))
	m := mutator(t, &availability{available: set("quay.io/acme/foo:v1", "registry.local:5000/acme/foo:v1")}, []v1alpha1.ImageAlternative{trial}, nil)
	c := metrics.DryRunDecisions.WithLabelValues("ImageAlternative", "counted", "Always")
	before := promtestutil.ToFloat64(c)
	admit(t, m, pod(corev1.Container{Name: "a", Image: "quay.io/acme/foo:v1"}, corev1.Container{Name: "b", Image: "quay.io/acme/foo:v2"}))
	// b's candidates are not available: the dry run would leave it, as happens, on the original.
	if got := promtestutil.ToFloat64(c) - before; got != 1 {
		t.Errorf("dry-run decisions counted %v, want 1", got)
	}
}

// pinDigest routes to the candidate's repository at the digest the probe saw; the tag stays in
// the record, and an image already pinned is probed and kept at its own digest.
func TestPinDigestRewritesToTheProbedDigest(t *testing.T) {
	const localRepo = "registry.local:5000/acme/foo"
	acme := pinned(testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret(localRepo, "local")))
	digest := digestOf(localRepo + ":v1")
	tests := map[string]struct {
		image, available, want string
	}{
		"a tag is pinned to the digest the probe saw": {
			image: "quay.io/acme/foo:v1", available: localRepo + ":v1", want: localRepo + "@" + digest,
		},
		"an image already pinned keeps its digest": {
			image:     "quay.io/acme/foo@" + digest,
			available: localRepo + "@" + digest, want: localRepo + "@" + digest,
		},
		"tag and digest: the digest is what is probed and kept": {
			image:     "quay.io/acme/foo:v1@" + digest,
			available: localRepo + ":v1@" + digest, want: localRepo + "@" + digest,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := mutator(t, &availability{available: set(tc.available)}, []v1alpha1.ImageAlternative{acme}, nil)
			got := admit(t, m, pod(corev1.Container{Name: "c", Image: tc.image}))
			if got.Spec.Containers[0].Image != tc.want {
				t.Errorf("image %q, want %q", got.Spec.Containers[0].Image, tc.want)
			}
			if want := `{"c":"` + tc.image + `"}`; got.Annotations[v1alpha1.AnnotationOriginalImages] != want {
				t.Errorf("original-images %q, want %q", got.Annotations[v1alpha1.AnnotationOriginalImages], want)
			}
			if len(got.Spec.ImagePullSecrets) != 1 {
				t.Errorf("imagePullSecrets %v, want the resource's", got.Spec.ImagePullSecrets)
			}
			// The pinned record is one kuik wrote: a reinvocation leaves the pod alone.
			if again := admit(t, m, got); !cmp.Equal(got, again, cmpopts.EquateEmpty()) {
				t.Errorf("reinvocation changed the pinned pod:\n%s", cmp.Diff(got, again, cmpopts.EquateEmpty()))
			}
		})
	}
}

func set(items ...string) map[string]bool {
	m := map[string]bool{}
	for _, s := range items {
		m[s] = true
	}
	return m
}

// A dry run never changes what is decided, not even by its record's size: when the dry-run
// record would take the pod over the API server's annotation limit, it is left out and the
// enforcing decision stands.
func TestDryRunRecordGivesWayToTheAnnotationLimit(t *testing.T) {
	enforcing := testutil.Alternative("acme", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: "quay.io/acme/foo"},
		testutil.WithSecret("registry.local:5000/acme/foo", "local"))
	trial := dryRunMirror(mirror("hub-trial", v1alpha1.RewritePolicyAlways, "mirror.local/hub/"))
	m := mutator(t, &availability{available: set("registry.local:5000/acme/foo:v1", "mirror.local/hub/quay.io/acme/foo:v1")},
		[]v1alpha1.ImageAlternative{enforcing}, []v1alpha1.ImageMirror{trial})
	first := admit(t, m, pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"}))
	records, dry := 0, len(v1alpha1.AnnotationDryRun)+len(first.Annotations[v1alpha1.AnnotationDryRun])
	for k, v := range first.Annotations {
		if k != v1alpha1.AnnotationDryRun {
			records += len(k) + len(v)
		}
	}
	if dry <= len(v1alpha1.AnnotationDryRun) {
		t.Fatalf("no dry-run record to begin with: %v", first.Annotations)
	}
	const key = "example.com/blob"
	p := pod(corev1.Container{Name: "c", Image: "quay.io/acme/foo:v1"})
	p.Annotations = map[string]string{key: strings.Repeat("b", apivalidation.TotalAnnotationSizeLimitB-len(key)-records-dry/2)}
	got := admit(t, m, p)
	if got.Spec.Containers[0].Image != "registry.local:5000/acme/foo:v1" || len(got.Spec.ImagePullSecrets) != 1 {
		t.Errorf("the enforcing decision did not stand: image %s, pull secrets %v", got.Spec.Containers[0].Image, got.Spec.ImagePullSecrets)
	}
	if _, ok := got.Annotations[v1alpha1.AnnotationDryRun]; ok {
		t.Error("the dry-run record was kept over the annotation limit")
	}
}
