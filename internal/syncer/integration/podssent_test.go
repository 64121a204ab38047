package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	e := harness(t)
	n := name(t)
	reg := testutil.NewRegistry(t, "", "")
	for _, img := range []string{"base", "app", "other"} {
		reg.Push(t, n+"/"+img+":v1")
	}
	down, err := kuikenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	upstream := func(img string) string { return down + "/" + n + "/" + img }
	mirror := func(img string) string { return reg.Host + "/" + n + "/" + img }

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
	config := installPodWebhookAt(t, e, port, map[string]any{"kuik-test.example/gate": n})
	hook, err := kuikenv.StartWebhook(t.Context(), cp, chart, port, webhook.Config{ProbeTimeout: time.Second, CacheTTL: time.Minute, MatchConditionsGate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Stop(10 * time.Second) })

	opts := syncerConfig()
	opts.MatchConditionsOf = config
	// A long debounce widens the time between a change and the conditions that cover it:
	// the gate must hold whatever it is.
	opts.Debounce = time.Second
	opts.MatchConditionsSettle = 300 * time.Millisecond
	stop := startSyncer(t, opts)
	defer stop()

	ns := createNamespace(t, e, map[string]string{"kuik-test.example/gate": n})
	alternative := func(name, img string) v1alpha1.ImageAlternative {
		return testutil.NewImageAlternative(name).Repository(upstream(img)).Repository(mirror(img)).Insecure().Build()
	}
	base := alternative(n+"-base", "base")
	create(t, e, &base)
	waitPodsSent(t, e, &v1alpha1.ImageAlternative{}, base.Name)

	app := alternative(n+"-app", "app")
	create(t, e, &app)
	observeFirstRoutedOn(t, e, ns, upstream("base"), mirror("base"), upstream("app"), mirror("app"))
	sent := waitPodsSent(t, e, &v1alpha1.ImageAlternative{}, app.Name)
	if sent.Reason != string(admitscope.ReasonFiltered) {
		t.Errorf("PodsSent reason %q, want %s", sent.Reason, admitscope.ReasonFiltered)
	}

	// An edit that points the resource at another image: the same from its first pod on.
	var cur v1alpha1.ImageAlternative
	if err := e.cl.Get(t.Context(), client.ObjectKey{Name: app.Name}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec = alternative(app.Name, "other").Spec
	if err := e.cl.Update(t.Context(), &cur); err != nil {
		t.Fatal(err)
	}
	observeFirstRoutedOn(t, e, ns, upstream("base"), mirror("base"), upstream("other"), mirror("other"))
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
