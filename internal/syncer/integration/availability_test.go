package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	prometheustestutil "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The syncer's leader checks what is ahead of live fallbacks and writes the repositories that
// give no answer to status.unavailable; a webhook replica that never probed the hanging
// original then waits only the hinted wait for it, not the probe timeout. A rate-limited
// original is an answer: never written. When the original answers again, its entry goes and
// pods go back to it.
func TestAHintTheLeaderWroteIsUsedByAReplicaThatNeverProbedTheOriginal(t *testing.T) {
	e := harness(t)
	n := name(t)
	mirror := testutil.NewRegistry(t, "", "")
	mirror.Push(t, n+"/app:v1")
	up := testutil.NewRegistry(t, "", "")
	up.Push(t, n+"/app:v1")
	up.SetBehavior(testutil.Hang)
	limited := testutil.NewRegistry(t, "", "")
	limited.SetBehavior(testutil.RateLimit)
	hanging := v1alpha1.ImageAlternative{}
	for _, r := range []struct {
		name, original string
	}{{n, up.Host}, {n + "-limited", limited.Host}} {
		ia := testutil.NewImageAlternative(r.name).Repository(r.original + "/" + n + "/app").Repository(mirror.Host + "/" + n + "/app").Insecure().Build()
		create(t, e, &ia)
		if r.name == n {
			hanging = ia
		}
	}

	chart, err := kuikenv.RenderValues(crns, chartValues)
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.Apply(t.Context(), cp.Config(), chart.Identity(kuikenv.ComponentWebhook)); err != nil {
		t.Fatal(err)
	}
	// Two replicas, each behind a configuration of its own (one namespace label each), the
	// API server waiting 10 s for them: a probe timeout of 4 s shows plainly.
	const probeTimeout = 4 * time.Second
	replica := func(label string, ttl time.Duration) string {
		port, err := kuikenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		installNamedPodWebhook(t, e, chart, n+"-"+label, port, map[string]any{"kuik-test.example/replica": n + "-" + label})
		hook, err := kuikenv.StartWebhook(t.Context(), cp, chart, port, webhook.Config{ProbeTimeout: probeTimeout, CacheTTL: ttl, HintedWait: probe.DefaultHintedWait, HintMaxAge: probe.DefaultHintMaxAge})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hook.Stop(10 * time.Second) })
		return createNamespace(t, e, map[string]string{"kuik-test.example/replica": n + "-" + label})
	}
	nsA := replica("a", time.Minute)
	nsB := replica("b", time.Second)

	opts := syncerConfig()
	opts.FallbackDelay = 200 * time.Millisecond
	opts.Availability = syncer.AvailabilityOptions{Interval: 500 * time.Millisecond, Timeout: time.Second}
	t.Cleanup(startSyncer(t, opts))

	answered := prometheustestutil.ToFloat64(metrics.AvailabilityChecks.WithLabelValues("answered"))
	paused := prometheustestutil.ToFloat64(metrics.AvailabilityChecks.WithLabelValues("paused"))
	// Replica A routes live pods away from both originals, paying the probe timeout.
	for i, original := range []string{up.Host, limited.Host} {
		eventually(t, "replica A routes "+original, func(ctx context.Context) error {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: fmt.Sprintf("p%d-", i), Namespace: nsA},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: original + "/" + n + "/app:v1"}}},
			}
			if err := e.cl.Create(ctx, p); err != nil {
				return err
			}
			if want := mirror.Host + "/" + n + "/app:v1"; p.Spec.Containers[0].Image != want {
				return fmt.Errorf("admitted with %s", p.Spec.Containers[0].Image)
			}
			return nil
		})
	}

	// The leader finds the hanging original giving no answer, and writes it.
	upRepo := up.Host + "/" + n + "/app"
	eventually(t, "status.unavailable names the hanging original", func(ctx context.Context) error {
		got := unavailableOf(ctx, t, e, hanging.Name)
		if len(got) != 1 || got[0].Repository != upRepo || got[0].Reason != v1alpha1.UnavailableTimeout {
			return fmt.Errorf("status.unavailable %+v", got)
		}
		return nil
	})
	// The rate-limited original's check is an answer (the hanging one's are timeouts; the
	// mirror is not ahead of anything), and its 429 pauses the host's checks.
	eventually(t, "the rate-limited original checked", func(context.Context) error {
		if got := prometheustestutil.ToFloat64(metrics.AvailabilityChecks.WithLabelValues("answered")); got < answered+1 {
			return fmt.Errorf("%v checks answered", got-answered)
		}
		return nil
	})
	eventually(t, "the rate-limited host paused", func(context.Context) error {
		if got := prometheustestutil.ToFloat64(metrics.AvailabilityChecks.WithLabelValues("paused")); got < paused+1 {
			return errors.New("no check paused yet")
		}
		return nil
	})
	if got := unavailableOf(t.Context(), t, e, n+"-limited"); len(got) != 0 {
		t.Errorf("a rate-limited original written as unavailable: %+v", got)
	}

	// Replica B has never probed the original: the hint alone shortens its wait.
	time.Sleep(time.Second) // for B's informer to see the status
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "b-", Namespace: nsB},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: upRepo + ":v1"}}},
	}
	start := time.Now()
	if err := e.cl.Create(t.Context(), p, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if want := mirror.Host + "/" + n + "/app:v1"; p.Spec.Containers[0].Image != want {
		t.Errorf("replica B admitted %s, want %s", p.Spec.Containers[0].Image, want)
	}
	if took >= probeTimeout/2 {
		t.Errorf("replica B took %s for a pod whose original the leader found hanging (probe timeout %s): the hint was not used", took, probeTimeout)
	}

	// The original answers again: its entry goes, and B routes pods to it.
	up.SetBehavior(testutil.Serve)
	eventually(t, "status.unavailable emptied", func(ctx context.Context) error {
		if got := unavailableOf(ctx, t, e, hanging.Name); len(got) != 0 {
			return fmt.Errorf("status.unavailable %+v", got)
		}
		return nil
	})
	eventually(t, "replica B routes to the original again", func(ctx context.Context) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "b-", Namespace: nsB},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: upRepo + ":v1"}}},
		}
		if err := e.cl.Create(ctx, p, client.DryRunAll); err != nil {
			return err
		}
		if p.Spec.Containers[0].Image != upRepo+":v1" {
			return fmt.Errorf("admitted with %s", p.Spec.Containers[0].Image)
		}
		return nil
	})
}

func unavailableOf(ctx context.Context, t *testing.T, e env, name string) []v1alpha1.UnavailableRepository {
	t.Helper()
	var ia v1alpha1.ImageAlternative
	if err := e.cl.Get(ctx, client.ObjectKey{Name: name}, &ia); err != nil {
		t.Fatal(err)
	}
	return ia.Status.Unavailable
}

// installNamedPodWebhook installs the chart's pod webhook under its own name, calling port,
// for the namespaces with nsLabels, with a 10 s timeout.
func installNamedPodWebhook(t *testing.T, e env, chart *kuikenv.Chart, name string, port int, nsLabels map[string]any) {
	t.Helper()
	hooks, err := chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(hooks, func(h *unstructured.Unstructured) bool { return h.GetKind() == "MutatingWebhookConfiguration" })
	if i < 0 {
		t.Fatal("the chart has no MutatingWebhookConfiguration")
	}
	h := hooks[i]
	h.SetName(name)
	ws, _, _ := unstructured.NestedSlice(h.Object, "webhooks")
	w := ws[0].(map[string]any)
	w["namespaceSelector"] = map[string]any{"matchLabels": nsLabels}
	w["timeoutSeconds"] = int64(10)
	if err := unstructured.SetNestedSlice(h.Object, ws[:1], "webhooks"); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Apply(t.Context(), cp.Config(), []*unstructured.Unstructured{h}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
