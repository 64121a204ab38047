package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	namespace = "scope"
	// baseImage is in no set's scope: under the mirror's own destination, in no alternative.
	baseImage = "mirror.local/m/base:1"
	digest    = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

var namespaceLabels = labels.Set{"kubernetes.io/metadata.name": namespace}

// resourceSet is one set of routing resources and the webhook configuration its conditions
// go to.
type resourceSet struct {
	name         string
	alternatives []v1alpha1.ImageAlternative
	mirrors      []v1alpha1.ImageMirror
	limits       admitscope.Limits
	result       admitscope.Result
	ix           *routing.Index
}

func (s *resourceSet) path() string { return "/" + s.name }

// measured: the set's webhook is sent only pods with its measureLabel (its objectSelector), so
// that a measure fails on its own expression, not on another set's.
func (s *resourceSet) measured() bool { return strings.HasPrefix(s.name, "measure") }

func (s *resourceSet) measureLabel() string { return "kuik-test.example/" + s.name }

func alternatives() []v1alpha1.ImageAlternative {
	b := testutil.NewImageAlternative
	return []v1alpha1.ImageAlternative{
		b("foo").Repository("quay.io/acme/foo").Repository("ghcr.io/acme/foo").Build(),
		b("nginx").Repository("nginx").Repository("registry.local:5000/library/nginx").Policy(v1alpha1.RewritePolicyAlways).Build(),
		b("teams").Group("quay.io/team/").Group("docker.io/bitnami/").Build(),
		b("upper").Repository("Quay.IO/upper/app").Repository("quay.io/upper/app2").Build(),
		b("local").Repository("localhost/x").Repository("localhost:5000/y").Build(),
		b("hosts").Group("gcr.io/").Group("europe-docker.pkg.dev/acme/").Build(),
		b("deep").Repository("a.example.com/x/y/z/w/v").Repository("b.example.com/x/y/z/w/v").Build(),
		b("trial").Repository("registry.k8s.io/pause").Repository("mirror.local/pause").DryRun().Build(),
		b("legacy").Repository("INDEX.DOCKER.IO/legacy").Repository("quay.io/legacy/legacy").Build(),
		b("gone").Repository("quay.io/gone/app").Unavailable().Repository("quay.io/kept/app").Build(),
	}
}

// mostExcluded is a mirror that excludes most registries.
func mostExcluded() v1alpha1.ImageMirror {
	return testutil.NewImageMirror("most", "mirror.local/m/").
		Exclude("docker.io/**", "quay.io/**", "ghcr.io/**", "registry.k8s.io/**", "*.example.com/**", "localhost/**", "gcr.io/*", "**:debug").Build()
}

func resourceSets() []*resourceSet {
	costly := admitscope.DefaultLimits()
	costly.CostBudget = 1_000_000 // the API server's own limit: an estimate too low fails there
	// excludesAll excludes every image with the longest pattern of the sets, and a budget that
	// bounds no pod: the API server's own limit is what stops the expression.
	excludesAll := mostExcluded()
	excludesAll.Name = "excludes-all"
	excludesAll.Spec.ExcludeImages = append(excludesAll.Spec.ExcludeImages, "**")
	unbounded := admitscope.DefaultLimits()
	unbounded.CostBudget = 1 << 40
	var large []v1alpha1.ImageAlternative
	for i := range 560 {
		large = append(large, testutil.NewImageAlternative(fmt.Sprintf("large-%04d", i)).
			Repository(fmt.Sprintf("registry.example.net/team-%04d/app", i)).
			Repository(fmt.Sprintf("registry.example.org/team-%04d/app", i)).Build())
	}
	return []*resourceSet{
		{name: "alternatives", alternatives: alternatives()},
		{name: "mirror", mirrors: []v1alpha1.ImageMirror{mostExcluded()}},
		{name: "both", alternatives: alternatives(), mirrors: []v1alpha1.ImageMirror{mostExcluded(), testutil.NewImageMirror("off", "mirror.local/off/").Policy(v1alpha1.RewritePolicyNone).Build()}},
		{name: "catch-all", alternatives: alternatives(), mirrors: []v1alpha1.ImageMirror{testutil.NewImageMirror("all", "mirror.local/all/").Build()}},
		{name: "cost", mirrors: []v1alpha1.ImageMirror{mostExcluded()}, limits: costly},
		{name: "large", alternatives: large},
		{name: "measure", mirrors: []v1alpha1.ImageMirror{excludesAll}, limits: unbounded},
		{name: "measure-alternatives", alternatives: alternatives(), limits: unbounded},
	}
}

// corpus is the images of the property: every base in every form.
func corpus() []string {
	bases := []string{
		"nginx", "library/nginx", "docker.io/nginx", "docker.io/library/nginx", "index.docker.io/library/nginx",
		"index.docker.io/nginx", "INDEX.DOCKER.IO/nginx", "nginx-unprivileged", "nginxinc/nginx", "library/nginx/x",
		"bitnami/redis", "docker.io/bitnami/redis", "bitnami/redis/sub", "bitnami", "bitnamilegacy/redis",
		"quay.io/acme/foo", "quay.io/acme/foo-bar", "quay.io/acme/fo", "quay.io/acme/foo/bar", "Quay.io/acme/foo",
		"QUAY.IO/acme/foo", "quay.io:443/acme/foo", "quay.io/acme", "quay.io/team/app", "quay.io/team/app/deeper",
		"quay.io/team", "quay.io/teams/app", "ghcr.io/acme/foo", "ghcr.io/acme/foo2", "Quay.IO/upper/app",
		"quay.io/upper/app", "quay.io/upper/app2", "localhost/x", "localhost/x/y", "localhost:5000/y",
		"localhost:5001/y", "LOCALHOST/x", "registry.local:5000/library/nginx", "registry.local:5000/nginx", "gcr.io/one",
		"gcr.io/one/two", "gcr.io/distroless/static", "europe-docker.pkg.dev/acme/app", "europe-docker.pkg.dev/acme/app/x", "registry.k8s.io/pause",
		"registry.k8s.io/pause-amd64", "k8s.gcr.io/pause", "a.example.com/x/y/z/w/v", "a.example.com/x/y/z/w", "a.example.com/x/y/z/w/v/u",
		"b.example.com/team/app", "example.com/app", "sub.b.example.com/x", "mirror.local/m/docker.io/library/nginx", "mirror.local/m",
		"mirror.local/mm/x", "mirror.local/all/quay.io/acme/foo", "127.0.0.1:5000/x", "[::1]:5000/x", "192.168.1.1/x",
		"alpine", "busybox", "docker.io/alpine", "foo/bar", "foo/bar/baz",
		"INDEX.DOCKER.IO/legacy", "legacy", "quay.io/gone/app", "quay.io/kept/app", "registry.example.net/team-0042/app",
		"registry.example.org/acme.example.com/app", "gcr.io/a.example.com/app",
	}
	var out []string
	for _, b := range bases {
		out = append(out, b, b+":1.27", b+"@"+digest, b+":debug@"+digest)
	}
	return out
}

func TestMatchConditions(t *testing.T) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rec := startRecorder(t)
	sets := resourceSets()
	install(t, rec, sets)

	t.Run("every pod the webhook would route is sent", func(t *testing.T) {
		images := corpus()
		if len(images) < 200 {
			t.Fatalf("%d images, want 200 or more", len(images))
		}
		type verdict struct{ pods, covered, sent, falsePositives int }
		verdicts := map[string]*verdict{}
		for _, s := range sets {
			verdicts[s.name] = &verdict{}
		}
		for i, image := range images {
			for _, kind := range []string{"init", "main", "ephemeral"} {
				pod := podWith(fmt.Sprintf("p%03d-%s", i, kind), kind, image)
				createDryRun(t, cs, pod)
				for _, s := range sets {
					if s.name == "large" || s.name == "cost" || s.measured() {
						continue
					}
					covers := goCovers(t, s.ix, pod)
					sent := rec.sent(s.path(), pod.Name, "CREATE", "")
					v := verdicts[s.name]
					v.pods++
					if covers {
						v.covered++
					}
					if sent {
						v.sent++
					}
					switch {
					case covers && !sent:
						t.Errorf("set %s: a pod with %s container %q is covered but was not sent", s.name, kind, image)
					case !covers && sent:
						v.falsePositives++
					}
				}
			}
		}
		for _, s := range sets {
			if v := verdicts[s.name]; v.pods > 0 {
				t.Logf("set %-12s %s: %d pods, %d covered, %d sent, %d false positives, %d false negatives (errors above); expression %d bytes",
					s.name, s.result.Reason, v.pods, v.covered, v.sent, v.falsePositives, v.covered-(v.sent-v.falsePositives), s.result.ExpressionBytes)
			}
		}
		for _, name := range []string{"alternatives", "mirror", "both"} {
			if v := verdicts[name]; v.sent == v.pods {
				t.Errorf("set %s: every pod was sent; the condition filters nothing", name)
			}
		}
		if v := verdicts["catch-all"]; v.sent != v.pods {
			t.Errorf("set catch-all: %d of %d pods sent, want all", v.sent, v.pods)
		}
	})

	t.Run("a pod with kuik's label or annotation and no covered image is sent", func(t *testing.T) {
		plain := podWith("plain", "main", baseImage)
		annotated := podWith("annotated", "main", baseImage)
		annotated.Annotations = map[string]string{v1alpha1.AnnotationOriginalImages: `{"main":"nginx"}`}
		labelled := podWith("labelled", "main", baseImage)
		labelled.Labels = map[string]string{v1alpha1.LabelRewritten: "true"}
		for _, p := range []*corev1.Pod{plain, annotated, labelled} {
			createDryRun(t, cs, p)
		}
		for _, s := range sets {
			if s.measured() {
				continue
			}
			if !rec.sent(s.path(), "annotated", "CREATE", "") || !rec.sent(s.path(), "labelled", "CREATE", "") {
				t.Errorf("set %s: a pod with a kuik.enix.io/ annotation or label was not sent", s.name)
			}
			if s.result.Conditions != nil && rec.sent(s.path(), "plain", "CREATE", "") {
				t.Errorf("set %s: the same pod without them was sent", s.name)
			}
		}
	})

	t.Run("an ephemeral container update is sent", func(t *testing.T) {
		pod := podWith("debugged", "main", baseImage)
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods(namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		pod, err := cs.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: baseImage}}}
		if _, err := cs.CoreV1().Pods(namespace).UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if s.measured() {
				continue
			}
			if !rec.sent(s.path(), pod.Name, "UPDATE", "ephemeralcontainers") {
				t.Errorf("set %s: the ephemeral container update was not sent", s.name)
			}
		}
	})

	t.Run("the costliest pod within the bounds is evaluated within the API server's limit", func(t *testing.T) {
		s := setNamed(sets, "cost")
		n := s.result.MaxContainers
		// Every string function works on the longest image the condition parses, every
		// mirror term runs to its match, and the labels and annotations are the most a pod
		// may have before it is sent anyway.
		image := strings.Repeat("a", s.limits.MaxImageBytes-len(":debug")) + ":debug"
		worst := podWith("worst", "main", image)
		worst.Spec.Containers = nil
		for i := range n {
			worst.Spec.Containers = append(worst.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: image})
		}
		worst.Labels, worst.Annotations = longKeys(s.limits.MaxMetadataKeys), longKeys(s.limits.MaxMetadataKeys)
		if goCovers(t, s.ix, worst) {
			t.Fatal("the costliest pod must be one the condition evaluates to the end: covered by nothing")
		}
		createDryRun(t, cs, worst) // an error here is the API server stopping the expression
		if rec.sent(s.path(), "worst", "CREATE", "") {
			t.Errorf("the costliest pod was sent; it covers nothing")
		}
		more := worst.DeepCopy()
		more.Name = "worst-plus-one"
		more.Spec.Containers = append(more.Spec.Containers, corev1.Container{Name: "one-more", Image: image})
		createDryRun(t, cs, more)
		if !rec.sent(s.path(), more.Name, "CREATE", "") {
			t.Errorf("a pod of %d containers, over MaxContainers, was not sent", n+1)
		}
		t.Logf("%d containers of %d-byte images, %d labels and annotations of 317-byte keys: estimated cost %d, under %d",
			n, len(image), len(worst.Labels), s.result.Cost, s.limits.CostBudget)
	})

	t.Run("the estimated cost of a container bounds the API server's", func(t *testing.T) {
		// The API server stops an expression past this cost (PerCallLimit).
		const limit = 1_000_000
		for _, name := range []string{"measure", "measure-alternatives"} {
			s := setNamed(sets, name)
			images := map[string]string{
				"a familiar name":         strings.Repeat("a", s.limits.MaxImageBytes-len(":debug")) + ":debug",
				"an upper-case host":      strings.Repeat("A", 250) + "/" + strings.Repeat("a", s.limits.MaxImageBytes-251-len(":debug")) + ":debug",
				"index.docker.io's names": "index.docker.io/" + strings.Repeat("a", s.limits.MaxImageBytes-16-len(":debug")) + ":debug",
			}
			for what, image := range images {
				n := mostContainers(t, cs, rec, s, image)
				// n containers fit, n+1 do not: the cost of one is over (limit - the rest)/(n+1).
				// The rest (the request, no labels, the lists) is far under 1,000.
				floor := (limit - 1000) / int64(n+1)
				t.Logf("set %s, %s: %d containers within the limit; a container costs %d to %d, estimated %d", s.name, what, n, floor, limit/int64(n), s.result.ContainerCost)
				if s.result.ContainerCost < floor {
					t.Errorf("set %s, %s: the estimate %d is under the API server's cost, at least %d", s.name, what, s.result.ContainerCost, floor)
				}
			}
		}
	})

	t.Run("a large expression is accepted and filters", func(t *testing.T) {
		s := setNamed(sets, "large")
		in := podWith("large-in", "main", "registry.example.org/team-0555/app:1")
		out := podWith("large-out", "main", "registry.example.org/team-0560/app:1")
		createDryRun(t, cs, in)
		createDryRun(t, cs, out)
		if !rec.sent(s.path(), in.Name, "CREATE", "") || rec.sent(s.path(), out.Name, "CREATE", "") {
			t.Errorf("sent: %s %v (want true), %s %v (want false)", in.Name, rec.sent(s.path(), in.Name, "CREATE", ""), out.Name, rec.sent(s.path(), out.Name, "CREATE", ""))
		}
		t.Logf("%d entries: %d bytes (bound %d)", 2*560, s.result.ExpressionBytes, admitscope.DefaultLimits().MaxExpressionBytes)
	})
}

func setNamed(sets []*resourceSet, name string) *resourceSet {
	for _, s := range sets {
		if s.name == name {
			return s
		}
	}
	panic("no set " + name)
}

// install computes every set's conditions and applies one webhook configuration per set, the
// chart's with the conditions, calling the recorder at the set's path, failurePolicy Fail so
// that an expression error fails the request instead of skipping the webhook. It returns once
// every configuration is in force.
func install(t *testing.T, rec *recorder, sets []*resourceSet) {
	t.Helper()
	chart, err := kuikenv.Render("kuik-system")
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := chart.WebhookConfigurations(443, cp.CA.PEM)
	if err != nil {
		t.Fatal(err)
	}
	var mutating *unstructured.Unstructured
	for _, h := range hooks {
		if h.GetKind() == "MutatingWebhookConfiguration" {
			mutating = h
		}
	}
	var objs []*unstructured.Unstructured
	for _, s := range sets {
		var errs []error
		if s.ix, errs = routing.NewIndex(s.alternatives, s.mirrors); len(errs) > 0 {
			t.Fatalf("set %s: %v", s.name, errs)
		}
		if s.limits == (admitscope.Limits{}) {
			s.limits = admitscope.DefaultLimits()
			s.result = admitscope.Conditions(s.alternatives, s.mirrors)
		} else {
			s.result = admitscope.ForCoverage(s.ix.Coverage(), s.limits)
		}
		wantFiltered := s.name != "catch-all"
		if filtered := s.result.Conditions != nil; filtered != wantFiltered {
			t.Fatalf("set %s: %s (%s), filtered %v, want %v", s.name, s.result.Reason, s.result.Message, filtered, wantFiltered)
		}
		objs = append(objs, webhookConfiguration(t, mutating, s, rec.url+s.path()))
	}
	if err := testenv.Apply(t.Context(), cp.Config(), objs); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	// failurePolicy Fail and a recorder that stops with the test: the next test's pods must
	// not reach these configurations.
	t.Cleanup(func() {
		for _, o := range objs {
			_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		}
	})
	// The API server's webhook informer takes a moment: a pod kuik's annotation sends
	// everywhere shows when every configuration is in force.
	n := 0
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n++
		name := fmt.Sprintf("sentinel-%d", n)
		p := podWith(name, "main", baseImage)
		p.Annotations = map[string]string{"kuik.enix.io/sentinel": "true"}
		p.Labels = map[string]string{}
		for _, s := range sets {
			if s.measured() {
				p.Labels[s.measureLabel()] = ""
			}
		}
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, err
		}
		for _, s := range sets {
			if !rec.sent(s.path(), name, "CREATE", "") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the webhook configurations never came in force: %v", err)
	}
}

func webhookConfiguration(t *testing.T, chart *unstructured.Unstructured, s *resourceSet, url string) *unstructured.Unstructured {
	t.Helper()
	o := chart.DeepCopy()
	o.SetName("kuik-scope-" + s.name)
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil || len(hooks) != 1 {
		t.Fatalf("the chart's MutatingWebhookConfiguration has %d webhooks (%v), want 1", len(hooks), err)
	}
	h := hooks[0].(map[string]any)
	h["clientConfig"].(map[string]any)["url"] = url
	h["failurePolicy"] = string(admissionregistrationv1.Fail)
	var conds []any
	for _, c := range s.result.Conditions {
		conds = append(conds, map[string]any{"name": c.Name, "expression": c.Expression})
	}
	if conds != nil {
		h["matchConditions"] = conds
	}
	if s.measured() {
		h["objectSelector"] = map[string]any{"matchExpressions": []any{map[string]any{"key": s.measureLabel(), "operator": "Exists"}}}
	}
	if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
		t.Fatal(err)
	}
	return o
}

// podWith is a pod with image in a container of kind (init, main or ephemeral), and
// baseImage, which nothing covers, in its main container otherwise.
func podWith(name, kind, image string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: baseImage}}},
	}
	switch kind {
	case "init":
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: image}}
	case "main":
		p.Spec.Containers[0].Image = image
	case "ephemeral":
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: image}}}
	default:
		panic("no container kind " + kind)
	}
	return p
}

// createDryRun creates the pod without persisting it. A pod with an ephemeral container is
// refused by validation, which runs after the mutating webhooks: that refusal is expected.
func createDryRun(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	_, err := cs.CoreV1().Pods(namespace).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if len(pod.Spec.EphemeralContainers) > 0 {
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ephemeralContainers") {
			t.Fatalf("pod %s: %v, want validation's refusal of ephemeralContainers", pod.Name, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
}

// goCovers is the webhook's own answer: a kuik record to check, or a container route.Route
// decides for (the dry-run resources included).
func goCovers(t *testing.T, ix *routing.Index, pod *corev1.Pod) bool {
	t.Helper()
	for _, m := range []map[string]string{pod.Labels, pod.Annotations} {
		for k := range m {
			if strings.HasPrefix(k, "kuik.enix.io/") {
				return true
			}
		}
	}
	none := func(_ context.Context, lists [][]routing.Candidate, _ bool) []route.Choice {
		out := make([]route.Choice, len(lists))
		for i := range out {
			out[i].Index = -1
		}
		return out
	}
	decisions, err := route.Route(t.Context(), pod.DeepCopy(), namespaceLabels, ix, none, route.Scope{})
	if err != nil {
		t.Fatalf("route.Route(%s): %v", pod.Name, err)
	}
	return len(decisions) > 0
}

// longKeys are n labels (or annotations) with the longest keys a qualified name allows.
func longKeys(n int) map[string]string {
	prefix := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	out := make(map[string]string, n)
	for i := range n {
		out[prefix+"/"+fmt.Sprintf("%s%04d", strings.Repeat("k", 59), i)] = ""
	}
	return out
}

// mostContainers is the most containers of image a pod may have before the API server stops
// the set's expression at its cost limit (failurePolicy Fail: the request fails).
func mostContainers(t *testing.T, cs kubernetes.Interface, rec *recorder, s *resourceSet, image string) int {
	t.Helper()
	fits := func(n int) bool {
		pod := podWith(s.name, "main", image)
		pod.Labels = map[string]string{s.measureLabel(): ""}
		pod.Spec.Containers = nil
		for i := range n {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: image})
		}
		_, err := cs.CoreV1().Pods(namespace).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			if !rec.sent(s.path(), s.name, "CREATE", "") {
				return true
			}
			t.Fatalf("set %s: a pod of %s was sent: the measure needs one the expression evaluates to the end", s.name, image)
		case strings.Contains(err.Error(), "cost"):
			return false
		}
		t.Fatalf("%d containers: %v", n, err)
		return false
	}
	lo, hi := 1, 1024
	if !fits(lo) {
		t.Fatal("one container is over the limit")
	}
	for fits(hi) {
		if lo, hi = hi, 2*hi; hi > 4096 {
			t.Fatal("4096 containers within the limit: the expression costs little, measure with longer images")
		}
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
