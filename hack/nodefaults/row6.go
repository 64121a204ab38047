package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// slowAdmission is what row 6 counts as a slow admission: five hinted waits, half the probe
// timeout.
const slowAdmission = 1.0 // seconds, a bound of kuik_webhook_admission_duration_seconds

// row6 rolls a Deployment out while its upstream hangs, then updates it once the secret-syncer's
// leader has shared the upstream as unavailable.
func (e *env) row6(ctx context.Context) error {
	replicas := *flagReplicas
	fmt.Printf("\n== row 6: the upstream hangs (accepts connections, never answers) during a %d-replica rollout, then its rolling update once the leader shares the hint\n", replicas)
	tb := &benchutil.TB{}
	defer tb.Close()
	hang := testutil.NewSilentRegistryAt(tb, testnode.NodeIP+":0")
	if err := e.n.TrustPlainHTTP(hang.Host); err != nil {
		return err
	}
	img, err := e.n.GuestImage("nodefaults/hang")
	if err != nil {
		return err
	}
	e.mirror.PushImage(tb, "acme/hang:v1", img)
	s := &scenario{name: "row6-hang", upstream: hang.Host + "/acme/hang", mirror: e.mirror.Host + "/acme/hang", tag: "v1"}
	// No dry run (setup's): its probe of the upstream would hint the host on the replica it
	// reached, and the rollout would start warm. The replicas' index gauges say when they
	// route with the resource.
	if err := e.create(ctx, s); err != nil {
		return err
	}
	hooks, err := e.webhookPods(ctx)
	if err != nil {
		return err
	}
	if len(hooks) != webhookReplicas {
		return fmt.Errorf("%d webhook pods, want %d", len(hooks), webhookReplicas)
	}
	if err := e.waitIndexed(ctx, hooks); err != nil {
		return err
	}
	fmt.Printf("upstream %s hangs; mirror %s; webhook pods %s, %s hold the resource and never probed the upstream\n", s.upstream, s.mirror, hooks[0].Name, hooks[1].Name)

	var failed []string
	// phase acts, waits until every pod of template rev is Running on the mirror or admitted
	// unrouted, and reports the admissions' durations against bound (admissions over
	// slowAdmission).
	phase := func(what, rev string, hooks []corev1.Pod, bound int, why string, act func() error) error {
		before, err := e.webhookMetrics(ctx, hooks)
		if err != nil {
			return err
		}
		apiBefore, err := benchutil.APIServerMetrics(ctx, e.cs)
		if err != nil {
			return err
		}
		syncBefore, _, syncErr := e.syncerMetrics(ctx)
		accepted, logFrom := hang.Accepted(), e.apiServerLogSize()
		start := time.Now()
		stopSampling := make(chan struct{})
		sampled := e.sampleSlow(ctx, hooks, before, start, stopSampling)
		if err := act(); err != nil {
			close(stopSampling)
			return err
		}
		pods, waitErr := e.waitPods(ctx, s, *flagTimeout, func(pods []corev1.Pod) bool {
			if len(pods) != replicas {
				return false
			}
			for i := range pods {
				if pods[i].Annotations["nodefaults/rev"] != rev || routed(&pods[i]) && !running(&pods[i]) {
					return false
				}
			}
			return true
		})
		took := time.Since(start)
		close(stopSampling)
		slowAt := <-sampled
		after, err := e.webhookMetrics(ctx, hooks)
		if err != nil {
			return err
		}
		apiAfter, err := benchutil.APIServerMetrics(ctx, e.cs)
		if err != nil {
			return err
		}
		c := count(pods)
		fmt.Printf("\n-- %s: %s after %s (load average %s)\n", what, c, took.Round(time.Millisecond), loadAverage())
		if waitErr != nil {
			failed = append(failed, fmt.Sprintf("%s: not every pod Running on the mirror or admitted unrouted: %v; last: %s", what, waitErr, c))
		}
		onMirror, unrouted := 0, 0
		for i := range pods {
			switch p := &pods[i]; p.Spec.Containers[0].Image {
			case s.mirror + ":" + s.tag:
				if running(p) {
					onMirror++
				}
			case s.upstream + ":" + s.tag:
				unrouted++
			default:
				failed = append(failed, fmt.Sprintf("%s: pod %s on %s, not a candidate", what, p.Name, p.Spec.Containers[0].Image))
			}
		}
		if unrouted > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d pods admitted unrouted (image still the upstream's)", what, unrouted))
		}

		// The webhook's own durations, both replicas, and the upstream's probes on each.
		total := admissionDurations(sumMaps(after), sumMaps(before))
		var perReplica []string
		registry := `registry="` + hang.Host + `"`
		// Whether each replica's slow admissions ended together: they then waited on one
		// probe (admissions concurrent with a replica's first probe join it).
		together := true
		for i, h := range hooks {
			d := admissionDurations(after[i], before[i])
			slowest := "none"
			if lo, hi := d.Slowest(); d.Count() > 0 {
				slowest = fmt.Sprintf("the slowest in (%gs, %gs]", lo, hi)
			}
			if at := slowAt[i]; len(at) > 0 {
				slowest += fmt.Sprintf(", those over %gs seen ending between +%s and +%s", slowAdmission, at[0].Round(100*time.Millisecond), at[len(at)-1].Round(100*time.Millisecond))
				together = together && at[len(at)-1]-at[0] <= probe.DefaultTimeout
			}
			probeTimes := after[i].Histogram("kuik_registry_probe_duration_seconds", registry).Since(before[i].Histogram("kuik_registry_probe_duration_seconds", registry))
			delta := func(name string) float64 { return after[i].Sum(name, registry) - before[i].Sum(name, registry) }
			perReplica = append(perReplica, fmt.Sprintf("%s: %.0f admissions, %.0f over %gs, %s; upstream probes ended %.0f (%.0f over 1s), refreshes started %.0f; hinted pass-overs %.0f",
				h.Name, d.Count(), d.Over(slowAdmission), slowAdmission, slowest, delta("kuik_registry_probes_total"), probeTimes.Over(1), delta("kuik_registry_probe_refreshes_total"), delta("kuik_webhook_hinted_pass_overs_total")))
		}
		slow := total.Over(slowAdmission)
		fmt.Printf("webhook admissions (kuik_webhook_admission_duration_seconds, both replicas): %.0f; over %gs: %.0f (bound %d: %s); over 2.5s (the admission budget): %.0f; p99 ≈ %s\n",
			total.Count(), slowAdmission, slow, bound, why, total.Over(2.5), seconds(total.Quantile(0.99)))
		for _, l := range perReplica {
			fmt.Printf("    %s\n", l)
		}
		// The API server's view of the same calls: what pod creation waited, and the calls
		// that failed and let the pod through unchanged (failurePolicy Ignore).
		api := apiAfter.Histogram("apiserver_admission_webhook_admission_duration_seconds", `type="admit"`, `operation="CREATE"`).Since(apiBefore.Histogram("apiserver_admission_webhook_admission_duration_seconds", `type="admit"`, `operation="CREATE"`))
		failOpen := apiAfter.Sum("apiserver_admission_webhook_fail_open_count", `type="admit"`) - apiBefore.Sum("apiserver_admission_webhook_fail_open_count", `type="admit"`)
		fmt.Printf("API server, mutating webhook calls on create: %.0f; over %gs: %.0f; p99 ≈ %s; failed open: %.0f\n", api.Count(), slowAdmission, api.Over(slowAdmission), seconds(api.Quantile(0.99)), failOpen)
		if failOpen > 0 {
			for _, l := range e.apiServerLog(logFrom, "ailed calling webhook", 5) {
				fmt.Printf("    kube-apiserver: %s\n", l)
			}
		}
		fmt.Printf("hanging upstream: %d connections accepted (webhook probes and the leader's checks), %d open at once at most (since the row's start)\n", hang.Accepted()-accepted, hang.MaxOpen())
		syncAfter, leader, err := e.syncerMetrics(ctx)
		if err = errors.Join(syncErr, err); err != nil {
			fmt.Printf("secret-syncer metrics: not scraped (%v)\n", err)
		} else {
			checks := []string{}
			for _, k := range slices.Sorted(maps.Keys(syncAfter)) {
				if rest, ok := strings.CutPrefix(k, "kuik_secret_syncer_availability_checks_total"); ok {
					checks = append(checks, fmt.Sprintf("%s %.0f (%+.0f in the phase)", rest, syncAfter[k], syncAfter[k]-syncBefore[k]))
				}
			}
			fmt.Printf("secret-syncer leader %s: kuik_secret_syncer_availability_checks_total %v; kuik_secret_syncer_unavailable_repositories %.0f (every resource's)\n",
				leader, checks, syncAfter["kuik_secret_syncer_unavailable_repositories"])
		}
		switch {
		case slow <= float64(bound):
		case bound > 0 && together:
			fmt.Printf("%.0f admissions over %gs, beyond the bound %d, but on each replica they ended within the probe timeout (%s) of each other: admissions concurrent with its first, unhinted probe joined it and waited as long; still one wait per replica\n",
				slow, slowAdmission, bound, probe.DefaultTimeout)
		default:
			failed = append(failed, fmt.Sprintf("%s: %.0f admissions over %gs, beyond %d (%s)", what, slow, slowAdmission, bound, why))
		}
		fmt.Printf("ROW 6 RESULT (%s): %d/%d Running on the mirror, %d admitted unrouted; %.0f of %.0f admissions over %gs (bound %d), p99 ≈ %s\n",
			what, onMirror, replicas, unrouted, slow, total.Count(), slowAdmission, bound, seconds(total.Quantile(0.99)))
		return nil
	}

	// The leader checks the upstream once pods routed away from it live: from the creation on,
	// note when it writes the upstream to status.unavailable.
	type written struct {
		u   v1alpha1.UnavailableRepository
		at  time.Duration
		err error
	}
	shared := make(chan written, 1)
	d := s.deployment(replicas, corev1.PullIfNotPresent)
	d.Spec.Template.Annotations = map[string]string{"nodefaults/rev": "1"}
	err = phase("rollout (create), cold webhooks", "1", hooks, webhookReplicas,
		"each replica may wait for the probe timeout once, before its own hint or the leader's exists", func() error {
			start := time.Now()
			go func() {
				u, err := e.waitUnavailable(ctx, s, *flagTimeout)
				shared <- written{u: u, at: time.Since(start), err: err}
			}()
			_, err := e.cs.AppsV1().Deployments(s.ns).Create(ctx, d, metav1.CreateOptions{})
			return err
		})
	if err != nil {
		return err
	}
	w := <-shared
	if w.err != nil {
		return errors.New(strings.Join(append(failed, w.err.Error()), "; "))
	}
	fmt.Printf("\nleader wrote %s to status.unavailable +%s after the Deployment's creation (reason %s, since %s, checkedAt %s): it computes live fallbacks %s after the first routed pod, then checks (up to %s)\n",
		w.u.Repository, w.at.Round(time.Millisecond), w.u.Reason, w.u.Since.Format(time.TimeOnly), w.u.CheckedAt.Format(time.TimeOnly), syncer.DefaultFallbackDelay, probe.DefaultTimeout)

	what := "rolling update, same webhook replicas"
	if *flagRestart {
		t := time.Now()
		if hooks, err = e.restartWebhooks(ctx, hooks); err != nil {
			return err
		}
		fmt.Printf("webhook Deployment restarted in %s: new pods %s, %s, with no hint of their own (they read the leader's with the resources)\n", time.Since(t).Round(time.Millisecond), hooks[0].Name, hooks[1].Name)
		what = "rolling update, restarted webhooks"
	}
	err = phase(what, "2", hooks, 0, "the leader's hint, and each replica's own once it has probed, cover every replica from its first admission", func() error {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{"nodefaults/rev": "2"}}}}})
		_, err := e.cs.AppsV1().Deployments(s.ns).Patch(ctx, s.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// sampleInterval is how often sampleSlow scrapes the webhook pods.
const sampleInterval = 250 * time.Millisecond

// sampleSlow scrapes the webhook pods every sampleInterval until stop is closed, and sends, for
// each pod, when each of its admissions over slowAdmission since before was first seen
// (since start).
func (e *env) sampleSlow(ctx context.Context, hooks []corev1.Pod, before []benchutil.Metrics, start time.Time, stop <-chan struct{}) <-chan [][]time.Duration {
	out := make(chan [][]time.Duration, 1)
	go func() {
		seen := make([][]time.Duration, len(hooks))
		tick := time.NewTicker(sampleInterval)
		defer tick.Stop()
		for done := false; ; {
			for i, h := range hooks {
				m, err := scrape(ctx, h.Status.PodIP)
				if err != nil {
					continue
				}
				at := time.Since(start)
				for n := int(admissionDurations(m, before[i]).Over(slowAdmission)); len(seen[i]) < n; {
					seen[i] = append(seen[i], at)
				}
			}
			if done {
				out <- seen
				return
			}
			select {
			case <-stop:
				done = true // one last scrape
			case <-tick.C:
			}
		}
	}()
	return out
}

// admissionDurations is the pod webhook's admission durations in after since before.
func admissionDurations(after, before benchutil.Metrics) benchutil.Histogram {
	const name, pods = "kuik_webhook_admission_duration_seconds", `webhook="mutate-pods"`
	return after.Histogram(name, pods).Since(before.Histogram(name, pods))
}

// waitIndexed waits until the index of every webhook pod holds every routing resource of the
// cluster (kuik_webhook_routing_resources), without sending it a pod.
func (e *env) waitIndexed(ctx context.Context, hooks []corev1.Pod) error {
	var alts v1alpha1.ImageAlternativeList
	var mirrors v1alpha1.ImageMirrorList
	if err := e.c.List(ctx, &alts); err != nil {
		return fmt.Errorf("listing ImageAlternatives: %w", err)
	}
	if err := e.c.List(ctx, &mirrors); err != nil {
		return fmt.Errorf("listing ImageMirrors: %w", err)
	}
	want := float64(len(alts.Items) + len(mirrors.Items))
	var last []float64
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := e.webhookMetrics(ctx, hooks)
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		last = last[:0]
		for _, m := range ms {
			last = append(last, m["kuik_webhook_routing_resources"])
		}
		return !slices.ContainsFunc(last, func(n float64) bool { return n != want }), nil
	})
	if err != nil {
		return fmt.Errorf("the webhook pods' indexes never held the %.0f routing resources (last %v): %w", want, last, err)
	}
	return nil
}

// waitUnavailable waits until the scenario's ImageAlternative lists its upstream in
// status.unavailable.
func (e *env) waitUnavailable(ctx context.Context, s *scenario, timeout time.Duration) (v1alpha1.UnavailableRepository, error) {
	var found v1alpha1.UnavailableRepository
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ia := &v1alpha1.ImageAlternative{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: s.name}, ia); err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		i := slices.IndexFunc(ia.Status.Unavailable, func(u v1alpha1.UnavailableRepository) bool { return u.Repository == s.upstream })
		if i >= 0 {
			found = ia.Status.Unavailable[i]
		}
		return i >= 0, nil
	})
	if err != nil {
		return found, fmt.Errorf("the leader never wrote %s to status.unavailable of %s: %w", s.upstream, s.name, err)
	}
	return found, nil
}

// restartWebhooks restarts the webhook Deployment (a new pod template annotation) and returns
// its new pods once kuik is Available again.
func (e *env) restartWebhooks(ctx context.Context, old []corev1.Pod) ([]corev1.Pod, error) {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{"nodefaults/restart": time.Now().Format(time.RFC3339Nano)}}}}})
	if _, err := e.cs.AppsV1().Deployments(e.kuik.Namespace).Patch(ctx, e.kuik.Webhook, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("restarting the webhook Deployment: %w", err)
	}
	if err := e.kuik.WaitAvailable(ctx, e.cs, *flagTimeout); err != nil {
		return nil, fmt.Errorf("the webhook did not come back after its restart: %w", err)
	}
	// Available is not settled: the old pods may still be terminating (their container gone,
	// a connection to them refused) and kube-proxy may still send new connections there. Wait
	// until they are gone from the node and the Service, and kube-proxy has synced since.
	var hooks []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.cs.CoreV1().Pods(e.kuik.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		hooks = list.Items
		slices.SortFunc(hooks, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		ips := map[string]bool{}
		for i := range hooks {
			p := &hooks[i]
			if p.DeletionTimestamp != nil || !running(p) || slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.Name == p.Name }) {
				return false, nil
			}
			ips[p.Status.PodIP] = true
		}
		eps, err := e.cs.DiscoveryV1().EndpointSlices(e.kuik.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + e.kuik.WebhookService})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		n := 0
		for _, s := range eps.Items {
			for _, ep := range s.Endpoints {
				for _, a := range ep.Addresses {
					if !ips[a] {
						return false, nil
					}
					n++
				}
			}
		}
		return len(hooks) == webhookReplicas && n == webhookReplicas, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the webhook pods after the restart: %d, want %d new ones Running, alone behind the Service: %w", len(hooks), webhookReplicas, err)
	}
	e.waitProxySync(ctx)
	return hooks, nil
}

// waitProxySync waits until kube-proxy has no endpoint change pending
// (kubeproxy_sync_proxy_rules_endpoint_changes_pending on its metrics address), then one
// minimum sync period (1 s); 2 s when its metrics cannot be read.
func (e *env) waitProxySync(ctx context.Context) {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := benchutil.Scrape(ctx, "http://127.0.0.1:10249/metrics")
		if err != nil {
			return false, err
		}
		pending, ok := m["kubeproxy_sync_proxy_rules_endpoint_changes_pending"]
		if !ok {
			return false, errors.New("no kubeproxy_sync_proxy_rules_endpoint_changes_pending")
		}
		return pending == 0, nil
	})
	if err != nil {
		fmt.Printf("kube-proxy's pending changes not read (%v): waiting 2s instead\n", err)
		time.Sleep(time.Second)
	}
	time.Sleep(time.Second)
}

// syncerMetrics scrapes the secret-syncer's leader (the pod holding its Lease) and names it.
func (e *env) syncerMetrics(ctx context.Context) (benchutil.Metrics, string, error) {
	holder, err := e.kuik.LeaseHolder(ctx, e.cs)
	if err != nil {
		return nil, "", err
	}
	list, err := e.cs.CoreV1().Pods(e.kuik.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=secret-syncer"})
	if err != nil {
		return nil, "", fmt.Errorf("listing secret-syncer pods: %w", err)
	}
	for _, p := range list.Items {
		// The Lease's holder is the pod's hostname (its name), "_", a UUID.
		if strings.HasPrefix(holder, p.Name+"_") {
			m, err := scrape(ctx, p.Status.PodIP)
			return m, p.Name, err
		}
	}
	return nil, "", fmt.Errorf("no secret-syncer pod holds the Lease (holder %q)", holder)
}

// apiServerLogSize is the size of the API server's log now.
func (e *env) apiServerLogSize() int64 {
	fi, err := os.Stat(filepath.Join(e.n.ControlPlane.Dir, "kube-apiserver.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// apiServerLog is the API server's log lines from offset holding sub, the first n of them,
// each cut at 400 bytes.
func (e *env) apiServerLog(offset int64, sub string, n int) []string {
	b, err := os.ReadFile(filepath.Join(e.n.ControlPlane.Dir, "kube-apiserver.log"))
	if err != nil || offset > int64(len(b)) {
		return nil
	}
	var out []string
	for l := range strings.Lines(string(b[offset:])) {
		if strings.Contains(l, sub) && len(out) < n {
			out = append(out, strings.TrimSpace(l[:min(len(l), 400)]))
		}
	}
	return out
}

// seconds is s seconds, to the millisecond (the microsecond under 10 ms).
func seconds(s float64) time.Duration {
	d := time.Duration(s * float64(time.Second))
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// loadAverage is the host's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
