package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/probe"
)

// The chart's defaults the bound is computed with (charts/kuik/values.yaml: webhook.cacheTTL,
// webhook.replicaCount).
const (
	cacheTTL        = probe.DefaultTTL
	webhookReplicas = 2
	// candidates of the ImageAlternative: the upstream and the mirror, both probed on a miss.
	candidates = 2
)

// row5 rolls a Deployment out, then updates it, while its upstream flaps.
func (e *env) row5(ctx context.Context) error {
	replicas := *flagReplicas
	fmt.Printf("\n== row 5: the upstream flaps (%s up, %s down on average, jittered) during a %d-replica rollout and its rolling update\n", *flagFlap, *flagFlap, replicas)
	f, err := newFlapper()
	if err != nil {
		return err
	}
	defer f.down()
	if err := e.n.TrustPlainHTTP(f.addr); err != nil {
		return err
	}
	img, err := e.n.GuestImage("nodefaults/flap")
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(f.addr+"/acme/flap:v1", name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("pushing to the flapping registry: %w", err)
	}
	mirrorImage := e.mirror.PushImage(&benchutil.TB{}, "acme/flap:v1", img)
	s := &scenario{name: "row5-flap", upstream: f.addr + "/acme/flap", mirror: e.mirror.Host + "/acme/flap", tag: "v1"}
	// Down while the webhooks learn of the resource: a routed dry run says they have it.
	f.down()
	if err := e.setup(ctx, s, mirrorImage); err != nil {
		return err
	}
	if err := f.up(); err != nil {
		return err
	}
	// Let every cached probe result expire: the rollout starts on cold caches.
	time.Sleep(cacheTTL + time.Second)
	hooks, err := e.webhookPods(ctx)
	if err != nil {
		return err
	}
	if len(hooks) != webhookReplicas {
		return fmt.Errorf("%d webhook pods, want %d", len(hooks), webhookReplicas)
	}
	fmt.Printf("upstream %s (flapping), mirror %s; webhook pods %s, %s\n", s.upstream, s.mirror, hooks[0].Name, hooks[1].Name)

	flapCtx, stopFlap := context.WithCancel(ctx)
	flapDone := make(chan error, 1)
	go func() { flapDone <- f.flap(flapCtx, *flagFlap) }()
	stop := func() error {
		stopFlap()
		return <-flapDone
	}

	var failed []string
	phase := func(s *scenario, what string, act func() error, done func([]corev1.Pod) bool) error {
		before, err := e.webhookMetrics(ctx, hooks)
		if err != nil {
			return err
		}
		_ = f.requests()
		mirrorBefore := e.mirror.ManifestRequests()
		pullFailuresBefore, err := e.pullFailures(ctx, s.ns)
		if err != nil {
			return err
		}
		// From the list's version on: only the pods created from now on are ADDED.
		list, err := e.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + s.name})
		if err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
		w, err := e.cs.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + s.name, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("watching pods: %w", err)
		}
		defer w.Stop()
		start := time.Now()
		var first, last time.Duration
		added := 0
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added {
					at := time.Since(start)
					if added == 0 {
						first = at
					}
					last = at
					added++
				}
			}
		}()
		if err := act(); err != nil {
			return err
		}
		pods, waitErr := e.waitPods(ctx, s, *flagTimeout, done)
		took := time.Since(start)
		w.Stop()
		<-watched
		after, err := e.webhookMetrics(ctx, hooks)
		if err != nil {
			return err
		}
		pullFailures, err := e.pullFailures(ctx, s.ns)
		if err != nil {
			return err
		}
		c := count(pods)
		fmt.Printf("\n-- %s: %s after %s (flaps so far: %d down, %d up)\n", what, c, took.Round(time.Millisecond), f.downs.Load(), f.ups.Load())
		if waitErr != nil {
			failed = append(failed, fmt.Sprintf("%s: not every pod Running on a candidate: %v; last: %s", what, waitErr, c))
		}
		for i := range pods {
			p := &pods[i]
			if img := p.Spec.Containers[0].Image; img != s.upstream+":v1" && img != s.mirror+":v1" {
				failed = append(failed, fmt.Sprintf("%s: pod %s on %s, not a candidate", what, p.Name, img))
			}
		}
		var admissions, probes float64
		var perReplica []string
		for i, h := range hooks {
			a := after[i].Sum("kuik_webhook_admissions_total", `webhook="mutate-pods"`) - before[i].Sum("kuik_webhook_admissions_total", `webhook="mutate-pods"`)
			// Refresh-ahead probes (kuik_registry_probe_refreshes_total) are the prober's own,
			// in the background, bounded on their own: the bound is on what admissions cause.
			r := after[i].Sum("kuik_registry_probe_refreshes_total") - before[i].Sum("kuik_registry_probe_refreshes_total")
			p := after[i].Sum("kuik_registry_probes_total") - before[i].Sum("kuik_registry_probes_total") - r
			admissions, probes = admissions+a, probes+p
			perReplica = append(perReplica, fmt.Sprintf("%s %.0f admissions, %.0f probes (and %.0f refreshes)", h.Name, a, p, r))
		}
		beforeSum, afterSum := sumMaps(before), sumMaps(after)
		span := last - first + time.Second // admissions precede their ADDED events: a second of slack
		bound := webhookReplicas * candidates * (int(span/cacheTTL) + 1)
		fmt.Printf("pods admitted: %d (watch), webhook admissions %.0f (metrics), between +%s and +%s\n", added, admissions, first.Round(time.Millisecond), last.Round(time.Millisecond))
		fmt.Printf("per replica: %s\n", strings.Join(perReplica, "; "))
		fmt.Printf("kubelet pull failures (Failed events): %d\n", pullFailures-pullFailuresBefore)
		fmt.Printf("probes sent by the webhooks: %.0f (bound: %d replicas x %d candidates x (floor(%s / TTL %s) + 1) = %d); %.2f probes per admission\n",
			probes, webhookReplicas, candidates, span.Round(time.Millisecond), cacheTTL, bound, probes/max(admissions, 1))
		for _, k := range slices.Sorted(maps.Keys(afterSum)) {
			if strings.HasPrefix(k, "kuik_registry_probes_total") {
				if d := afterSum[k] - beforeSum[k]; d > 0 {
					fmt.Printf("    %s %.0f\n", strings.TrimPrefix(k, "kuik_registry_probes_total"), d)
				}
			}
		}
		reqs := f.requests()
		fmt.Printf("flapping registry, manifest requests it answered (up windows only): %v; mirror manifest requests: %d\n", reqs, e.mirror.ManifestRequests()-mirrorBefore)
		if probes > float64(bound) {
			failed = append(failed, fmt.Sprintf("%s: %.0f probes, beyond the bound %d of the cache and the collapsing", what, probes, bound))
		}
		fmt.Printf("ROW 5 RESULT (%s): %d/%d Running on a candidate (%d on the upstream, %d on the mirror); %.0f probes for %.0f admissions (bound %d)\n",
			what, c.running, replicas, c.unrouted, c.routed, probes, admissions, bound)
		return nil
	}

	allRunning := func(rev string) func([]corev1.Pod) bool {
		return func(pods []corev1.Pod) bool {
			if len(pods) != replicas {
				return false
			}
			for i := range pods {
				if pods[i].Annotations["nodefaults/rev"] != rev || !running(&pods[i]) {
					return false
				}
			}
			return true
		}
	}
	// A burst first: replicas bare pods created at once on cold caches, so that identical
	// probes are asked for concurrently, and must collapse into one per replica and candidate.
	burst := *s
	burst.name = s.name + "-burst"
	var createdIn []time.Duration
	err = phase(&burst, "burst of concurrent creates", func() error {
		var wg sync.WaitGroup
		errs := make([]error, replicas)
		createdIn = make([]time.Duration, replicas)
		for i := range replicas {
			wg.Go(func() {
				t := time.Now()
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%03d", i), Labels: map[string]string{"app": burst.name}, Annotations: map[string]string{"nodefaults/rev": "b"}},
					Spec:       podSpec(s.upstream+":"+s.tag, corev1.PullPolicy(*flagPullPolicy)),
				}
				_, errs[i] = e.cs.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{})
				createdIn[i] = time.Since(t)
			})
		}
		wg.Wait()
		slices.Sort(createdIn)
		fmt.Printf("%d creates sent at once: each answered in %s to %s\n", replicas, createdIn[0].Round(time.Millisecond), createdIn[replicas-1].Round(time.Millisecond))
		return errors.Join(errs...)
	}, allRunning("b"))
	if err != nil {
		return errors.Join(err, stop())
	}
	if err := e.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "app=" + burst.name}); err != nil {
		return errors.Join(fmt.Errorf("deleting the burst's pods: %w", err), stop())
	}
	time.Sleep(cacheTTL + time.Second)

	d := s.deployment(replicas, corev1.PullPolicy(*flagPullPolicy))
	d.Spec.Template.Annotations = map[string]string{"nodefaults/rev": "1"}
	// The update replaces one pod at a time: it spans many flaps and cache TTLs.
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
	}}
	err = phase(s, "rollout (create)", func() error {
		_, err := e.cs.AppsV1().Deployments(s.ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	}, allRunning("1"))
	if err == nil {
		err = phase(s, "rolling update", func() error {
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{"nodefaults/rev": "2"}}}}})
			_, err := e.cs.AppsV1().Deployments(s.ns).Patch(ctx, s.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		}, allRunning("2"))
	}
	err = errors.Join(err, stop())
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// webhookMetrics scrapes the counters of every webhook pod.
func (e *env) webhookMetrics(ctx context.Context, hooks []corev1.Pod) ([]benchutil.Metrics, error) {
	var out []benchutil.Metrics
	for _, h := range hooks {
		m, err := scrape(ctx, h.Status.PodIP)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func sumMaps(ms []benchutil.Metrics) benchutil.Metrics {
	out := benchutil.Metrics{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// pullFailures counts the kubelet's Failed events (pulls that failed) in the namespace, with
// their repetitions.
func (e *env) pullFailures(ctx context.Context, ns string) (int, error) {
	return e.events(ctx, ns, "Failed")
}

// events counts the namespace's events of this reason, with their repetitions.
func (e *env) events(ctx context.Context, ns, reason string) (int, error) {
	list, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		return 0, fmt.Errorf("listing events: %w", err)
	}
	n := 0
	for _, ev := range list.Items {
		n += int(max(ev.Count, 1))
	}
	return n, nil
}
