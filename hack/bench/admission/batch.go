package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// scenario is one kind of pod.
type scenario struct {
	name string
	// image is the pod's image in round r.
	image func(r int) string
	// want is the image the admitted pod must have with the webhook installed.
	want func(r int) string
	// warm: the warm-up admits some of its pods (not when each round must find the cache cold).
	warm bool
	goal string
}

// batch is one scenario's pods of one round in one mode.
type batch struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration // webhook CPU over the batch
	// pod is what every admitted pod of the batch is, but for what tells pods apart (samePods).
	pod string
	counters
}

// tally is every batch of a scenario in one mode.
type tally struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration
	// pods is each round's batch.pod.
	pods map[int]string
	counters
}

func (t *tally) add(r int, b batch) {
	t.lat = append(t.lat, b.lat...)
	t.wall += b.wall
	t.cpu += b.cpu
	if t.pods == nil {
		t.pods = map[int]string{}
	}
	t.pods[r] = b.pod
	t.counters = t.plus(b.counters)
}

// counters are what the API server and kuik's webhook count of a batch's admissions.
type counters struct {
	// webhookCalls and webhookSeconds: the API server's calls of the pod webhook
	// (pods.kuik.enix.io, whichever mode it points at) and their time, as it measures them.
	webhookCalls, webhookSeconds float64
	// passes: the API server's admit passes of its in-tree admission chain (the calls of one of
	// its plugins, DefaultTolerationSeconds): a pod a webhook changes is admitted twice over,
	// for reinvocation.
	passes float64
	// kuikCalls, kuikSeconds, probes: kuik's admissions, their time in its handler, its
	// registry probes (all zero for the other modes).
	kuikCalls, kuikSeconds, probes float64
	// serveSeconds, admitSeconds: the API server's time serving the creates, and in its admit
	// step (the whole mutating chain, reinvocation included).
	serveSeconds, admitSeconds float64
	// conditionSeconds: the API server's time evaluating the pod webhook's matchConditions,
	// which it records only when they exclude the pod (not when they send it).
	conditionSeconds float64
	// hookSeconds: the webhook process's time serving the admission requests (controller-
	// runtime's, from the request read to the response written), in every installed mode.
	hookSeconds float64
}

func (c counters) plus(d counters) counters {
	return counters{c.webhookCalls + d.webhookCalls, c.webhookSeconds + d.webhookSeconds, c.passes + d.passes,
		c.kuikCalls + d.kuikCalls, c.kuikSeconds + d.kuikSeconds, c.probes + d.probes, c.serveSeconds + d.serveSeconds, c.admitSeconds + d.admitSeconds, c.conditionSeconds + d.conditionSeconds, c.hookSeconds + d.hookSeconds}
}

func (c counters) minus(d counters) counters {
	return counters{c.webhookCalls - d.webhookCalls, c.webhookSeconds - d.webhookSeconds, c.passes - d.passes,
		c.kuikCalls - d.kuikCalls, c.kuikSeconds - d.kuikSeconds, c.probes - d.probes, c.serveSeconds - d.serveSeconds, c.admitSeconds - d.admitSeconds, c.conditionSeconds - d.conditionSeconds, c.hookSeconds - d.hookSeconds}
}

// readCounters reads the counters from the API server and, if m is kuik, from kuik's webhook.
func readCounters(ctx context.Context, cs kubernetes.Interface, wh *webhookProcess, m mode) (counters, error) {
	api, err := benchutil.APIServerMetrics(ctx, cs)
	if err != nil {
		return counters{}, err
	}
	hook := `name="` + admitscope.WebhookName + `"`
	c := counters{
		webhookCalls:     api.Sum("apiserver_admission_webhook_admission_duration_seconds_count{", hook, `operation="CREATE"`, `type="admit"`),
		webhookSeconds:   api.Sum("apiserver_admission_webhook_admission_duration_seconds_sum{", hook, `operation="CREATE"`, `type="admit"`),
		passes:           api.Sum("apiserver_admission_controller_admission_duration_seconds_count{", `name="DefaultTolerationSeconds"`, `operation="CREATE"`, `type="admit"`),
		serveSeconds:     api.Sum("apiserver_request_duration_seconds_sum{", `resource="pods"`, `verb="POST"`, `subresource=""`, `dry_run=""`),
		admitSeconds:     api.Sum("apiserver_admission_step_admission_duration_seconds_sum{", `operation="CREATE"`, `type="admit"`),
		conditionSeconds: api.Sum("apiserver_admission_match_condition_evaluation_seconds_sum{", hook, `operation="CREATE"`),
	}
	if m == modeNone {
		return c, nil
	}
	k, err := wh.scrape(ctx)
	if err != nil {
		return counters{}, err
	}
	c.hookSeconds = k.Sum("controller_runtime_webhook_latency_seconds_sum{", `webhook="/mutate-pods"`)
	if m != modeKuik {
		return c, nil
	}
	c.kuikCalls = k.Sum("kuik_webhook_admissions_total{", `webhook="mutate-pods"`)
	c.kuikSeconds = k.Sum("kuik_webhook_admission_duration_seconds_sum{", `webhook="mutate-pods"`)
	c.probes = k.Sum("kuik_registry_probes_total{")
	return c, nil
}

func fixed(s string) func(int) string { return func(int) string { return s } }

func nsName(i int) string { return "bench-" + strconv.Itoa(i) }

// roundPrefix starts the names of round r's pods (r0 for the warm-up's), up to a "-".
func roundPrefix(r int) string { return "r" + strconv.Itoa(r+1) }

// createBatch creates n pods of scenario s (round r; -1 is the warm-up) with concurrency
// creators, checks each admitted pod (and that all are alike), then deletes them.
func createBatch(ctx context.Context, cs kubernetes.Interface, wh *webhookProcess, i int, s scenario, r, n int, m mode) (batch, error) {
	ns := nsName(i)
	image, want := s.image(max(r, 0)), s.want(max(r, 0))
	if r < 0 {
		image, want = s.image(*flagRounds), s.want(*flagRounds)
	}
	if m != modeKuik && m != modeSame {
		want = image
	}
	lat := make([]time.Duration, n)
	pods := make([]string, n)
	c0, err := readCounters(ctx, cs, wh, m)
	if err != nil {
		return batch{}, err
	}
	cpu0, err := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	var prof *profiler
	if m != modeNone && r >= 0 {
		prof = startProfile(ctx, wh.pprofAddr, m, s, r)
	}
	t0 := time.Now()
	err = benchutil.Parallel(ctx, n, *flagConcurrency, func(ctx context.Context, j int) error {
		p := benchutil.PlainPod(ns, roundPrefix(r)+fmt.Sprintf("-%05d", j), image, j)
		t := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		lat[j] = time.Since(t)
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		if pods[j], err = alike(got); err != nil {
			return err
		}
		return check(got, image, want)
	})
	wall := time.Since(t0)
	cpu1, cerr := wh.cpu()
	if prof != nil {
		if perr := prof.end(); perr != nil && err == nil {
			err = fmt.Errorf("profiling: %w", perr)
		}
	}
	if err != nil {
		return batch{}, err
	}
	if cerr != nil {
		return batch{}, cerr
	}
	for j := range pods {
		if pods[j] != pods[0] {
			return batch{}, fmt.Errorf("two pods of one batch admitted differently: %s and %s", pods[0], pods[j])
		}
	}
	c1, err := readCounters(ctx, cs, wh, m)
	if err != nil {
		return batch{}, err
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return batch{}, fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	return batch{lat: lat, wall: wall, cpu: cpu1 - cpu0, pod: pods[0], counters: c1.minus(c0)}, nil
}

// alike is the admitted pod p without what tells the pods of a batch apart (their name and
// template hash) or what the API server stamps on each (uid, resourceVersion, timestamps).
func alike(p *corev1.Pod) (string, error) {
	q := p.DeepCopy()
	q.Name, q.UID, q.ResourceVersion, q.CreationTimestamp, q.ManagedFields = "", "", "", metav1.Time{}, nil
	delete(q.Labels, "pod-template-hash")
	b, err := json.Marshal(q)
	return string(b), err
}

// check verifies an admitted pod: its image is want, and it carries kuik's rewrite marks
// exactly when the webhook rewrote it.
func check(p *corev1.Pod, original, want string) error {
	if got := p.Spec.Containers[0].Image; got != want {
		return fmt.Errorf("pod %s admitted with image %s, want %s", p.Name, got, want)
	}
	rewritten := p.Labels[v1alpha1.LabelRewritten] == "true"
	if rewritten != (want != original) {
		return fmt.Errorf("pod %s: label %s=%q, rewritten %t", p.Name, v1alpha1.LabelRewritten, p.Labels[v1alpha1.LabelRewritten], want != original)
	}
	return nil
}
