package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testnode"
)

// row4 kills one webhook replica during a rollout whose upstream is down.
func (e *env) row4(ctx context.Context) error {
	replicas := *flagReplicas
	killAfter := *flagKillAfter
	if killAfter <= 0 {
		killAfter = max(1, replicas/5)
	}
	fmt.Printf("\n== row 4: a webhook replica killed (%s) during a %d-replica rollout, upstream down\n", *flagKill, replicas)
	down, err := freeAddr()
	if err != nil {
		return err
	}
	if err := e.n.TrustPlainHTTP(down); err != nil {
		return err
	}
	img, err := e.n.GuestImage("nodefaults/kill")
	if err != nil {
		return err
	}
	mirrorImage := e.mirror.PushImage(&benchutil.TB{}, "acme/kill:v1", img)
	s := &scenario{name: "row4-kill", upstream: down + "/acme/kill", mirror: e.mirror.Host + "/acme/kill", tag: "v1"}
	if err := e.setup(ctx, s, mirrorImage); err != nil {
		return err
	}
	hooks, err := e.webhookPods(ctx)
	if err != nil {
		return err
	}
	if len(hooks) != 2 {
		return fmt.Errorf("%d webhook pods, want the chart's 2", len(hooks))
	}
	// The API server keeps its (HTTP/2) connection to the webhook Service, and kube-proxy
	// balances connections, not requests: one replica answers the API server's calls until
	// that connection breaks. Dry runs say which.
	served, err := e.answeredBy(ctx, s, hooks, 20)
	if err != nil {
		return err
	}
	busy := 0
	if served[1] > served[0] {
		busy = 1
	}
	victim, survivor := hooks[busy], hooks[1-busy]
	if *flagVictim == "idle" {
		victim, survivor = survivor, victim
	}
	fmt.Printf("20 dry-run pods answered by %s: %d, %s: %d\n", hooks[0].Name, served[0], hooks[1].Name, served[1])
	fmt.Printf("upstream %s refuses connections; mirror %s; victim (%s) %s, survivor %s\n", s.upstream, s.mirror, *flagVictim, victim.Name, survivor.Name)

	w, err := e.cs.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + s.name})
	if err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	defer w.Stop()
	start := time.Now()
	if _, err := e.cs.AppsV1().Deployments(s.ns).Create(ctx, s.deployment(replicas, corev1.PullIfNotPresent), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the Deployment: %w", err)
	}
	// Kill the victim once killAfter pods are admitted, and note which pods were admitted
	// before and after.
	type admitted struct {
		at     time.Duration
		routed bool
	}
	seen := map[string]admitted{}
	var killedAt, killDone time.Duration
	deadline := time.After(*flagTimeout)
	for len(seen) < replicas {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the pod watch ended")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Added || !isPod {
				continue
			}
			seen[p.Name] = admitted{at: time.Since(start), routed: routed(p)}
			if len(seen) == killAfter && killedAt == 0 {
				// The kill lands while ctr runs: pods admitted from its start on count as after.
				killedAt = time.Since(start)
				if err := e.kill(ctx, &victim); err != nil {
					return err
				}
				killDone = time.Since(start)
			}
		case <-deadline:
			return fmt.Errorf("%d of %d pods admitted in %s", len(seen), replicas, *flagTimeout)
		}
	}
	admittedIn := time.Since(start)
	before, after, unroutedAfter := 0, 0, 0
	var firstUnrouted, lastUnrouted time.Duration
	for _, a := range seen {
		if a.at <= killedAt {
			before++
			continue
		}
		after++
		if !a.routed {
			unroutedAfter++
			if firstUnrouted == 0 || a.at < firstUnrouted {
				firstUnrouted = a.at
			}
			lastUnrouted = max(lastUnrouted, a.at)
		}
	}
	fmt.Printf("%d pods admitted in %s; victim killed between +%s and +%s, after pod %d; %d admitted before the kill, %d after, of which %d unrouted",
		replicas, admittedIn.Round(time.Millisecond), killedAt.Round(time.Millisecond), killDone.Round(time.Millisecond), killAfter, before, after, unroutedAfter)
	if unroutedAfter > 0 {
		fmt.Printf(" (admitted between +%s and +%s)", firstUnrouted.Round(time.Millisecond), lastUnrouted.Round(time.Millisecond))
	}
	fmt.Println()

	if err := e.kuik.WaitAvailable(ctx, e.cs, *flagTimeout); err != nil {
		return fmt.Errorf("the webhook did not come back: %w", err)
	}
	fmt.Printf("webhook Deployment Available again (both replicas Ready behind the Service) %s after the kill\n", (time.Since(start) - killedAt).Round(100*time.Millisecond))

	// Settle: the routed pods run from the mirror, the unrouted ones fail to pull.
	pods, err := e.waitPods(ctx, s, *flagTimeout, func(pods []corev1.Pod) bool {
		for i := range pods {
			p := &pods[i]
			if routed(p) && !running(p) || !routed(p) && waiting(p) != "ImagePullBackOff" && waiting(p) != "ErrImagePull" {
				return false
			}
		}
		return len(pods) == replicas
	})
	settled := count(pods)
	fmt.Printf("settled +%s: %s\n", time.Since(start).Round(time.Millisecond), settled)
	if err != nil {
		return fmt.Errorf("the rollout did not settle (every routed pod Running, every unrouted one failing to pull): %w; last: %s", err, settled)
	}
	for i := range pods {
		p := &pods[i]
		if routed(p) && p.Spec.Containers[0].Image != e.mirror.Host+"/acme/kill:v1" {
			return fmt.Errorf("pod %s routed to %s, want the mirror", p.Name, p.Spec.Containers[0].Image)
		}
		if !routed(p) && p.Spec.Containers[0].Image != s.upstream+":v1" {
			return fmt.Errorf("unrouted pod %s has image %s, want the upstream's", p.Name, p.Spec.Containers[0].Image)
		}
	}
	refused, err := e.events(ctx, s.ns, "FailedCreate")
	if err != nil {
		return err
	}
	fmt.Printf("ReplicaSet creates refused by the API server (FailedCreate events, with repeats): %d\n", refused)

	hooks, err = e.webhookPods(ctx)
	if err != nil {
		return err
	}
	for _, h := range hooks {
		fmt.Printf("webhook pod %s: ready, %d restarts\n", h.Name, h.Status.ContainerStatuses[0].RestartCount)
	}

	// Do the stuck pods recover by themselves? The kubelet retries the same dead upstream.
	time.Sleep(*flagObserve)
	pods, err = e.pods(ctx, s)
	if err != nil {
		return err
	}
	observed := count(pods)
	fmt.Printf("after %s more: %s\n", *flagObserve, observed)
	stuck := []string{}
	for i := range pods {
		if !routed(&pods[i]) && !running(&pods[i]) {
			stuck = append(stuck, pods[i].Name)
		}
	}
	fmt.Printf("ROW 4 RESULT: admitted unrouted %d / stuck (ImagePullBackOff %d, ErrImagePull %d) %d / Running %d (of %d); recovered by themselves: %d\n",
		settled.unrouted, observed.backoff, observed.errPull, len(stuck), observed.running, replicas, settled.unrouted-len(stuck))

	// What an operator does: delete the stuck pods; the ReplicaSet creates them again, through
	// the webhook (both replicas up), and they are routed.
	if len(stuck) > 0 {
		t := time.Now()
		for _, name := range stuck {
			if err := e.cs.CoreV1().Pods(s.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				return fmt.Errorf("deleting stuck pod %s: %w", name, err)
			}
		}
		pods, err = e.waitPods(ctx, s, *flagTimeout, func(pods []corev1.Pod) bool {
			c := count(pods)
			return c.pods == replicas && c.running == replicas
		})
		c := count(pods)
		fmt.Printf("operator deleted the %d stuck pods: %s, %s later\n", len(stuck), c, time.Since(t).Round(time.Millisecond))
		if err != nil {
			return fmt.Errorf("not every pod runs after deleting the stuck ones: %w; last: %s", err, c)
		}
	}
	fmt.Printf("row 4: every pod Running %s after the Deployment's creation\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// kill ends the victim webhook replica as -kill says.
func (e *env) kill(ctx context.Context, victim *corev1.Pod) error {
	switch *flagKill {
	case "sigkill":
		return e.sigkill(ctx, victim)
	case "delete":
		if err := e.cs.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return fmt.Errorf("deleting webhook pod %s: %w", victim.Name, err)
		}
		return nil
	}
	return fmt.Errorf("-kill %q: want sigkill or delete", *flagKill)
}

// freeAddr is an address of the node where nothing listens (it was free a moment ago).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", testnode.NodeIP+":0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	return addr, nil
}

// answeredBy creates n dry-run pods of the scenario and counts, from their metrics, how many
// each webhook pod answered.
func (e *env) answeredBy(ctx context.Context, s *scenario, hooks []corev1.Pod, n int) ([]int, error) {
	count := func() ([]float64, error) {
		var out []float64
		for _, h := range hooks {
			m, err := scrape(ctx, h.Status.PodIP)
			if err != nil {
				return nil, err
			}
			out = append(out, m.Sum("kuik_webhook_admissions_total", `webhook="mutate-pods"`))
		}
		return out, nil
	}
	before, err := count()
	if err != nil {
		return nil, err
	}
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: podSpec(s.upstream+":"+s.tag, corev1.PullIfNotPresent)}
	for range n {
		if _, err := e.cs.CoreV1().Pods(s.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return nil, fmt.Errorf("dry-run pod: %w", err)
		}
	}
	after, err := count()
	if err != nil {
		return nil, err
	}
	out := make([]int, len(hooks))
	for i := range hooks {
		out[i] = int(after[i] - before[i])
	}
	return out, nil
}
