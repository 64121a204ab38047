package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// With matchConditions kept by the syncer's leader and the webhook run with
// --match-conditions-gate, a new or edited resource covers its pods from the first pod it
// routes on: once one pod has its image routed, no later pod with that image is admitted
// unrouted, whether the pod is sent for another image (a pod the condition already covered)
// or for that image alone (a pod the condition covers only once the leader widened it).
// Without the gate, the webhook routes the first kind of pod as soon as it sees the resource
// while the API server does not yet send the second kind: this test fails so.
func TestANewResourceCoversItsPodsFromTheFirstPodItRoutes(t *testing.T) {
	// A long debounce widens the time between a change and the conditions that cover it:
	// the gate must hold whatever it is.
	g := startGated(t, time.Second, 300*time.Millisecond)
	base := g.alternative(g.n+"-base", "base")
	create(t, g.e, &base)
	waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, base.Name)

	app := g.alternative(g.n+"-app", "app")
	create(t, g.e, &app)
	observeFirstRoutedOn(t, g.e, g.ns, g.upstream("base"), g.mirror("base"), g.upstream("app"), g.mirror("app"))
	sent := waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, app.Name)
	if sent.Reason != v1alpha1.ReasonCovered {
		t.Errorf("PodsSent reason %q, want %s", sent.Reason, v1alpha1.ReasonCovered)
	}

	// An edit that points the resource at another image: the same from its first pod on.
	g.edit(t, app.Name, "other")
	observeFirstRoutedOn(t, g.e, g.ns, g.upstream("base"), g.mirror("base"), g.upstream("other"), g.mirror("other"))
}

// An edit that moves a resource to another image: once the leader has dropped the old
// image from the conditions, the webhook no longer routes it, though the new generation is
// not marked yet (a long settle): a pod sent for another image and a pod of that image alone
// are treated alike. (A review found the webhook kept routing with the last marked spec.)
func TestAnEditedResourceNeverRoutesWithASpecTheConditionsDropped(t *testing.T) {
	g := startGated(t, 100*time.Millisecond, 10*time.Second)
	base := g.alternative(g.n+"-base", "base")
	app := g.alternative(g.n+"-app", "app")
	create(t, g.e, &base)
	create(t, g.e, &app)
	waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, base.Name)
	waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, app.Name)
	eventually(t, "app routed", func(context.Context) error {
		if got := g.dryRun(t, g.upstream("app")); got.Spec.Containers[0].Image != g.mirror("app")+":v1" {
			return fmt.Errorf("app is %s", got.Spec.Containers[0].Image)
		}
		return nil
	})
	g.edit(t, app.Name, "other")
	waitConditions(t, g.e, g.config, "app dropped", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && !strings.Contains(mc[0].Expression, g.upstream("app"))
	})
	time.Sleep(time.Second) // for the API server's watch to see it; the settle is 10 s
	both := g.dryRun(t, g.upstream("base"), g.upstream("app"))
	alone := g.dryRun(t, g.upstream("app"))
	if both.Spec.Containers[1].Image != alone.Spec.Containers[0].Image {
		t.Errorf("app routed to %s in a pod sent for base, to %s in a pod of app alone: the webhook routes with a spec the conditions dropped", both.Spec.Containers[1].Image, alone.Spec.Containers[0].Image)
	}
}

// Conditions another writer replaced (a `helm upgrade` restoring older ones, an edit) with
// narrower ones: a resource whose generation the leader's conditions already cover is
// marked PodsSent only once the live configuration holds them again, so that, once marked,
// its pods are sent and routed. The resync is an hour: it cannot be what repairs them. (A
// review found the leader marked trusting the conditions it last wrote.)
func TestPodsSentWaitsForConditionsAnotherWriterReplaced(t *testing.T) {
	g := startGated(t, 50*time.Millisecond, time.Second)
	base := g.alternative(g.n+"-base", "base")
	create(t, g.e, &base)
	waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, base.Name)
	hooks := g.e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cur, err := hooks.Get(t.Context(), g.config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaders := cur.Webhooks[0].MatchConditions

	cur.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: admitscope.ConditionName, Expression: "false"}}
	if _, err := hooks.Update(t.Context(), cur, metav1.UpdateOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
	// A new resource of the same repositories: the leader's conditions stay as they were.
	twin := g.alternative(g.n+"-twin", "base")
	create(t, g.e, &twin)
	waitPodsSent(t, g.e, &v1alpha1.ImageAlternative{}, twin.Name)
	cur, err = hooks.Get(t.Context(), g.config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(leaders, cur.Webhooks[0].MatchConditions); diff != "" {
		t.Errorf("marked PodsSent while the live matchConditions are not the leader's (-leader's +live):\n%s", diff)
	}
	if got := g.dryRun(t, g.upstream("base")).Spec.Containers[0].Image; got != g.mirror("base")+":v1" {
		t.Errorf("once marked, a pod of the image is admitted with %s, want %s:v1", got, g.mirror("base"))
	}
}

// gated is a webhook run with --match-conditions-gate and a syncer keeping its
// matchConditions, for pods of one namespace, with a registry holding n/base, n/app and
// n/other, and an upstream that refuses connections.
type gated struct {
	e                env
	n, ns, config    string
	upstream, mirror func(img string) string
}

func startGated(t *testing.T, debounce, settle time.Duration) *gated {
	t.Helper()
	g := &gated{e: harness(t), n: name(t)}
	reg := testutil.NewRegistry(t, "", "")
	for _, img := range []string{"base", "app", "other"} {
		reg.Push(t, g.n+"/"+img+":v1")
	}
	down, err := kuikenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	g.upstream = func(img string) string { return down + "/" + g.n + "/" + img }
	g.mirror = func(img string) string { return reg.Host + "/" + g.n + "/" + img }

	chart, err := kuikenv.RenderValues(crns, chartValues)
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.Apply(t.Context(), cp.Config(), chart.Identity(kuikenv.ComponentWebhook)); err != nil {
		t.Fatal(err)
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	g.config = installPodWebhookAt(t, g.e, port, map[string]any{"kuik-test.example/gate": g.n})
	hook, err := kuikenv.StartWebhook(t.Context(), cp, chart, port, webhook.Config{ProbeTimeout: time.Second, CacheTTL: time.Minute, MatchConditionsGate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Stop(10 * time.Second) })

	opts := syncerConfig()
	opts.MatchConditionsOf = g.config
	opts.Debounce = debounce
	opts.MatchConditionsSettle = settle
	stop := startSyncer(t, opts)
	t.Cleanup(stop)
	g.ns = createNamespace(t, g.e, map[string]string{"kuik-test.example/gate": g.n})
	return g
}

func (g *gated) alternative(name, img string) v1alpha1.ImageAlternative {
	return testutil.NewImageAlternative(name).Repository(g.upstream(img)).Repository(g.mirror(img)).Insecure().Build()
}

// edit points the alternative name at img.
func (g *gated) edit(t *testing.T, name, img string) {
	t.Helper()
	var cur v1alpha1.ImageAlternative
	if err := g.e.cl.Get(t.Context(), client.ObjectKey{Name: name}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec = g.alternative(name, img).Spec
	if err := g.e.cl.Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
}

// dryRun creates, as a dry run, a pod of the images (tag v1) and returns it as admitted.
func (g *gated) dryRun(t *testing.T, images ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: g.ns}}
	for i, img := range images {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img + ":v1"})
	}
	got, err := g.e.cs.CoreV1().Pods(g.ns).Create(t.Context(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// observeFirstRoutedOn creates pods (dry run) in turn with [covered, img] and [img] until six in
// a row have img routed to want, and fails if any pod after the first routed one was not, or
// if a pod's covered image was not routed to coveredWant.
func observeFirstRoutedOn(t *testing.T, e env, ns, covered, coveredWant, img, want string) {
	t.Helper()
	var seq []string
	firstRouted, inARow := -1, 0
	err := wait.PollUntilContextTimeout(t.Context(), 0, pollTimeout, true, func(ctx context.Context) (bool, error) {
		i := len(seq)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns}}
		if i%2 == 0 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "covered", Image: covered + ":v1"})
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "img", Image: img + ":v1"})
		got, err := e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		if i%2 == 0 && got.Spec.Containers[0].Image != coveredWant+":v1" {
			t.Errorf("pod %d: the covered image is %s, want %s", i, got.Spec.Containers[0].Image, coveredWant+":v1")
		}
		routed := got.Spec.Containers[len(got.Spec.Containers)-1].Image == want+":v1"
		shape := map[bool]string{true: "sent for another image", false: "its image alone"}[i%2 == 0]
		seq = append(seq, fmt.Sprintf("%d %s: routed %v", i, shape, routed))
		switch {
		case routed && firstRouted < 0:
			firstRouted, inARow = i, 1
		case routed:
			inARow++
		case firstRouted >= 0:
			t.Errorf("pod %d (%s) was admitted with %s unrouted after pod %d had it routed", i, shape, img, firstRouted)
			inARow = 0
		}
		return inARow >= 6, nil
	})
	if err != nil {
		t.Fatalf("%s never routed six pods in a row: %v\n%s", img, err, strings.Join(seq, "\n"))
	}
	if t.Failed() {
		t.Logf("pods:\n%s", strings.Join(seq, "\n"))
	}
}

// waitPodsSent waits for the resource's PodsSent condition to be True at its generation.
func waitPodsSent(t *testing.T, e env, obj client.Object, name string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return false, err
		}
		var conds []metav1.Condition
		switch o := obj.(type) {
		case *v1alpha1.ImageAlternative:
			conds = o.Status.Conditions
		case *v1alpha1.ImageMirror:
			conds = o.Status.Conditions
		}
		c := meta.FindStatusCondition(conds, v1alpha1.ConditionPodsSent)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != obj.GetGeneration() {
			return false, nil
		}
		got = *c
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: PodsSent never True at its generation: %v", name, err)
	}
	return got
}
