// Command admission measures pod admission as users see it: pods created through a real
// kube-apiserver (internal/testenv) per second, and the p50/p99 latency of each create, with
// kuik's mutating webhook installed and with it not installed (the floor), on the same control
// plane in the same run, for
//
//   - uncovered: pods no routing resource covers (the webhook is called and changes nothing);
//   - covered, original up: the pod's image is covered and its registry is up (probe cache warm,
//     no patch);
//   - covered, rewritten: the pod's original is down (connection refused, cached) and the
//     webhook rewrites it to the alternative on a registry that is up (probe cache warm, a patch);
//   - covered, upstream hangs: the original is on a listener that accepts and never answers,
//     under a fresh tag each round, so the first pods of every round wait for the probe timeout.
//
// The webhook runs as a subprocess (go build ./cmd/webhook) with the chart's arguments, under
// the chart's ServiceAccount identity (a client certificate of that user) and RBAC, called by
// the chart's webhook configurations pointed at 127.0.0.1. Its CPU (user+sys from
// /proc/<pid>/stat) over the installed batches and its RSS are reported.
//
// Rounds alternate installed/not installed (ABBA) to spread the drift of a shared machine
// over both. Pods are never scheduled (there is no node): creation is what `kubectl apply`
// waits for. It prints figures and ratios; it asserts no timing, but it checks every admitted
// pod (rewritten exactly when it must be) and exits non-zero when one is wrong.
//
// Run it with go run ./hack/bench/admission (-pods 200 for a smoke run).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var (
	flagPods        = flag.Int("pods", 2000, "pods per scenario and per mode (installed, not installed), spread over the rounds")
	flagConcurrency = flag.Int("concurrency", 8, "pods created at once")
	flagRounds      = flag.Int("rounds", 8, "rounds; each runs every scenario installed and not installed, in alternating order")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "admission bench:", err)
		os.Exit(1)
	}
}

// scenario is one kind of pod.
type scenario struct {
	name string
	// image is the pod's image in round r.
	image func(r int) string
	// want is the image the admitted pod must have with the webhook installed.
	want func(r int) string
}

// batch is one scenario's pods of one round in one mode.
type batch struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration // webhook CPU over the batch
}

// tally is every batch of a scenario in one mode.
type tally struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration
}

func (t *tally) add(b batch) {
	t.lat = append(t.lat, b.lat...)
	t.wall += b.wall
	t.cpu += b.cpu
}

func run(ctx context.Context) (err error) {
	if *flagPods < *flagRounds || *flagConcurrency < 1 || *flagRounds < 1 {
		return errors.New("-pods must be at least -rounds, -concurrency and -rounds positive")
	}
	start := time.Now()
	tb := &programTB{}
	defer tb.close()
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(fatal); ok {
				err = f
				return
			}
			panic(r)
		}
	}()

	cp, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	fmt.Printf("control plane ready in %s\n", time.Since(start).Round(time.Millisecond))
	admin := cp.Config()
	admin.QPS, admin.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return err
	}
	cl, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	// Registries: one up (go-containerregistry's), one that accepts and never answers, and a
	// port nothing listens on.
	reg := testutil.NewRegistry(tb, "", "")
	reg.Push(tb, "acme/up:v1")
	reg.Push(tb, "acme/app:v1")
	for r := range *flagRounds + 1 {
		reg.Push(tb, "acme/hang:r"+strconv.Itoa(r))
	}
	silent := testutil.NewSilentRegistry(tb)
	down, err := kuikenv.FreeAddr()
	if err != nil {
		return err
	}

	// The webhook as the chart installs it, as a subprocess.
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return err
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		return err
	}
	hooks, err := chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		return err
	}
	var mutating *unstructured.Unstructured
	for _, h := range hooks {
		if h.GetKind() == "MutatingWebhookConfiguration" {
			mutating = h
		}
	}
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": crns}}}
	objs := append([]*unstructured.Unstructured{nsObj}, chart.CRDs()...)
	objs = append(objs, chart.Identity(kuikenv.ComponentWebhook)...)
	objs = append(objs, chart.AdmissionPolicy()...)
	if err := testenv.Apply(ctx, admin, append(objs, hooks...)); err != nil {
		return err
	}
	wh, err := startWebhook(ctx, cp, chart, port)
	if err != nil {
		return err
	}
	defer wh.stop()
	fmt.Printf("webhook subprocess (pid %d) ready; probe timeout %s, cache TTL %s (the chart's)\n", wh.cmd.Process.Pid, wh.args["probe-timeout"], wh.args["cache-ttl"])

	// Routing resources, through the validating webhook.
	ias := []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("up").Repository(reg.Host + "/acme/up").Insecure().Repository(down + "/acme/up").Insecure().Build(),
		testutil.NewImageAlternative("rewritten").Repository(down + "/acme/app").Insecure().Repository(reg.Host + "/acme/app").Insecure().Build(),
		testutil.NewImageAlternative("hang").Repository(silent.Host + "/acme/hang").Insecure().Repository(reg.Host + "/acme/hang").Insecure().Build(),
	}
	for i := range ias {
		if err := cl.Create(ctx, &ias[i]); err != nil {
			return fmt.Errorf("creating ImageAlternative %s: %w", ias[i].Name, err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := wh.scrape(ctx)
		return err == nil && m["kuik_webhook_routing_resources"] == float64(len(ias)), nil
	})
	if err != nil {
		return fmt.Errorf("the webhook never indexed the %d routing resources: %w", len(ias), err)
	}

	scenarios := []scenario{
		{name: "uncovered", image: fixed("registry.example/team/app:v1"), want: fixed("registry.example/team/app:v1")},
		{name: "covered, original up", image: fixed(reg.Host + "/acme/up:v1"), want: fixed(reg.Host + "/acme/up:v1")},
		{name: "covered, rewritten", image: fixed(down + "/acme/app:v1"), want: fixed(reg.Host + "/acme/app:v1")},
		{name: "covered, upstream hangs", image: func(r int) string { return silent.Host + "/acme/hang:r" + strconv.Itoa(r) },
			want: func(r int) string { return reg.Host + "/acme/hang:r" + strconv.Itoa(r) }},
	}
	for i := range scenarios {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sentinel"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// Warm-up, unmeasured: connections, the API server's webhook client, the probe cache.
	installed := true
	if err := waitInstalled(ctx, cs, down, reg.Host, true); err != nil {
		return err
	}
	for i, s := range scenarios[:3] {
		if _, err := createBatch(ctx, cs, wh, i, s, -1, *flagConcurrency*2, true); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	per := *flagPods / *flagRounds
	with := make([]tally, len(scenarios))
	without := make([]tally, len(scenarios))
	cpu0, err := wh.cpu()
	if err != nil {
		return err
	}
	var cpuIdle time.Duration // webhook CPU over the not-installed batches
	fmt.Printf("\n%d rounds of %d pods per scenario and mode, %d creators\n", *flagRounds, per, *flagConcurrency)
	for r := range *flagRounds {
		// ABBA: installed first in even rounds, not installed first in odd ones.
		order := []bool{true, false}
		if r%2 == 1 {
			order = []bool{false, true}
		}
		for _, mode := range order {
			if mode != installed {
				if err := setInstalled(ctx, cs, admin, mutating, mode); err != nil {
					return err
				}
				if err := waitInstalled(ctx, cs, down, reg.Host, mode); err != nil {
					return err
				}
				installed = mode
			}
			for i, s := range scenarios {
				b, err := createBatch(ctx, cs, wh, i, s, r, per, mode)
				if err != nil {
					return fmt.Errorf("round %d, %s, installed=%t: %w", r, s.name, mode, err)
				}
				if mode {
					with[i].add(b)
				} else {
					without[i].add(b)
					cpuIdle += b.cpu
				}
			}
			fmt.Printf("round %d installed=%-5t done at +%s\n", r, mode, time.Since(start).Round(time.Second))
		}
	}
	cpu1, err := wh.cpu()
	if err != nil {
		return err
	}
	rss, hwm, err := procMemory(wh.cmd.Process.Pid)
	if err != nil {
		return err
	}
	m, err := wh.scrape(ctx)
	if err != nil {
		return err
	}

	fmt.Printf("\n== 7. Pod admission through the API server (%d pods per cell, %d creators, %d rounds alternating)\n", per**flagRounds, *flagConcurrency, *flagRounds)
	fmt.Printf("%-26s %-13s %9s %9s %9s %9s %12s\n", "scenario", "kuik", "pods/s", "p50", "p99", "max", "webhook CPU")
	for i, s := range scenarios {
		for _, row := range []struct {
			mode string
			t    *tally
		}{{"not installed", &without[i]}, {"installed", &with[i]}} {
			lat := slices.Clone(row.t.lat)
			slices.Sort(lat)
			cpu := "-"
			if row.mode == "installed" {
				cpu = fmt.Sprintf("%.0f µs/pod", float64(row.t.cpu.Microseconds())/float64(len(lat)))
			}
			fmt.Printf("%-26s %-13s %9.0f %9s %9s %9s %12s\n", s.name, row.mode, float64(len(lat))/row.t.wall.Seconds(),
				pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(10*time.Microsecond), cpu)
		}
	}
	for i, s := range scenarios {
		slow := func(d []time.Duration) int {
			n := 0
			for _, l := range d {
				if l > time.Second {
					n++
				}
			}
			return n
		}
		if n := slow(with[i].lat); n > 0 || slow(without[i].lat) > 0 {
			fmt.Printf("%s: %d pods installed and %d not installed took over 1s\n", s.name, n, slow(without[i].lat))
		}
	}
	fmt.Printf("\nratios installed / not installed (the floor)\n")
	fmt.Printf("%-26s %9s %9s %12s   %s\n", "scenario", "p50", "p99", "throughput", "goal")
	goals := []string{"p50 <= 1.03x", "p50 <= 1.10x", "p50 <= 1.10x", "bounded by the probe timeout"}
	for i, s := range scenarios {
		a, b := sorted(with[i].lat), sorted(without[i].lat)
		tw := float64(len(a)) / with[i].wall.Seconds()
		tn := float64(len(b)) / without[i].wall.Seconds()
		fmt.Printf("%-26s %8.2fx %8.2fx %11.2fx   %s\n", s.name, ratio(pct(a, 50), pct(b, 50)), ratio(pct(a, 99), pct(b, 99)), tw/tn, goals[i])
	}
	var wallWith time.Duration
	var podsWith int
	for i := range with {
		wallWith += with[i].wall
		podsWith += len(with[i].lat)
	}
	cpuWith := cpu1 - cpu0 - cpuIdle
	fmt.Printf("\nwebhook: CPU %s over %d installed admissions in %s (%.0f µs/pod, %.1f%% of a core at %.0f pods/s); %s idle during the not-installed batches\n",
		cpuWith.Round(time.Millisecond), podsWith, wallWith.Round(time.Millisecond), float64(cpuWith.Microseconds())/float64(podsWith),
		100*cpuWith.Seconds()/wallWith.Seconds(), float64(podsWith)/wallWith.Seconds(), cpuIdle.Round(time.Millisecond))
	fmt.Printf("webhook: RSS %s (peak %s), Go heap in use %s\n", mib(rss), mib(hwm), mib(int64(m["go_memstats_heap_inuse_bytes"])))
	fmt.Printf("webhook metrics: admissions patched %.0f, unchanged %.0f, error %.0f; probes to the hanging upstream %.0f (connections %d)\n",
		m[`kuik_webhook_admissions_total{result="patched",webhook="mutate-pods"}`], m[`kuik_webhook_admissions_total{result="unchanged",webhook="mutate-pods"}`],
		m[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`], sumPrefix(m, `kuik_registry_probes_total{registry="`+silent.Host), silent.Accepted())
	if e := m[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`]; e > 0 {
		return fmt.Errorf("the webhook answered %.0f admissions with an internal error", e)
	}
	fmt.Printf("every admitted pod checked: rewritten exactly when it had to be\n")
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}

func fixed(s string) func(int) string { return func(int) string { return s } }

func nsName(i int) string { return "bench-" + strconv.Itoa(i) }

func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func sumPrefix(m map[string]float64, prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// createBatch creates n pods of scenario s (round r; -1 is the warm-up) with concurrency
// creators, checks each admitted pod, then deletes them.
func createBatch(ctx context.Context, cs kubernetes.Interface, wh *webhookProcess, i int, s scenario, r, n int, installed bool) (batch, error) {
	ns := nsName(i)
	image, want := s.image(max(r, 0)), s.want(max(r, 0))
	if r < 0 {
		image, want = s.image(*flagRounds), s.want(*flagRounds)
	}
	if !installed {
		want = image
	}
	lat := make([]time.Duration, n)
	cpu0, err := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	t0 := time.Now()
	err = parallel(ctx, n, *flagConcurrency, func(ctx context.Context, j int) error {
		p := plainPod(ns, fmt.Sprintf("r%d-%05d", r+1, j), image, j)
		t := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		lat[j] = time.Since(t)
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		return check(got, image, want)
	})
	wall := time.Since(t0)
	cpu1, cerr := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	if cerr != nil {
		return batch{}, cerr
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return batch{}, fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	return batch{lat: lat, wall: wall, cpu: cpu1 - cpu0}, nil
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

// setInstalled creates or deletes kuik's MutatingWebhookConfiguration.
func setInstalled(ctx context.Context, cs kubernetes.Interface, admin *rest.Config, mutating *unstructured.Unstructured, on bool) error {
	if on {
		return testenv.Apply(ctx, admin, []*unstructured.Unstructured{mutating.DeepCopy()})
	}
	err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mutating.GetName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the mutating webhook configuration: %w", err)
	}
	return nil
}

// waitInstalled waits until the API server calls the webhook (installed) or no longer does:
// a dry-run pod of a down original is rewritten exactly when it calls it.
func waitInstalled(ctx context.Context, cs kubernetes.Interface, down, up string, installed bool) error {
	image := down + "/acme/app:v1"
	want := image
	if installed {
		want = up + "/acme/app:v1"
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods("sentinel").Create(ctx, plainPod("sentinel", "sentinel", image, 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = got.Spec.Containers[0].Image
		return last == want, nil
	})
	if err != nil {
		return fmt.Errorf("the API server never turned to installed=%t (sentinel image %s): %w", installed, last, err)
	}
	return nil
}

// webhookProcess is kuik's webhook binary running under the chart's identity.
type webhookProcess struct {
	cmd         *exec.Cmd
	dir         string
	args        map[string]string
	metricsAddr string
	exited      chan struct{}
}

func startWebhook(ctx context.Context, cp *testenv.ControlPlane, chart *kuikenv.Chart, port int) (*webhookProcess, error) {
	dir, err := os.MkdirTemp("", "kuik-bench-admission-")
	if err != nil {
		return nil, err
	}
	w := &webhookProcess{dir: dir, exited: make(chan struct{})}
	bin := filepath.Join(dir, "webhook")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/webhook")
	build.Dir = testenv.RepoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("building the webhook: %w", err)
	}
	// The chart's identity: a client certificate of its ServiceAccount's user and groups, as
	// the API server gives a real ServiceAccount token.
	sa, err := chart.ServiceAccount(kuikenv.ComponentWebhook)
	if err != nil {
		return nil, err
	}
	user, err := cp.CA.ClientPair("system:serviceaccount:"+chart.Namespace+":"+sa, "system:serviceaccounts", "system:serviceaccounts:"+chart.Namespace)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "webhook.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, cp.Config().Host, cp.CA.PEM, user); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	pair, err := cp.CA.ServingPair()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := pair.WriteFiles(certDir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	if w.args, err = chart.Args(kuikenv.ComponentWebhook); err != nil {
		return nil, err
	}
	if w.metricsAddr, err = kuikenv.FreeAddr(); err != nil {
		return nil, err
	}
	health, err := kuikenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	// The chart's arguments, with this machine's addresses and files.
	args := maps.Clone(w.args)
	args["kubeconfig"] = kubeconfig
	args["cert-dir"] = certDir
	args["webhook-bind-address"] = "127.0.0.1"
	args["webhook-port"] = strconv.Itoa(port)
	args["metrics-bind-address"] = w.metricsAddr
	args["health-probe-bind-address"] = health
	var argv []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		argv = append(argv, "--"+k+"="+args[k])
	}
	log, err := os.Create(filepath.Join(dir, "webhook.log"))
	if err != nil {
		return nil, err
	}
	w.cmd = exec.Command(bin, argv...)
	w.cmd.Stdout, w.cmd.Stderr = log, log
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-w.exited:
			return false, fmt.Errorf("the webhook exited (log %s)", log.Name())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+health+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("the webhook never turned ready: %w", err)
	}
	return w, nil
}

func (w *webhookProcess) stop() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
	_ = os.RemoveAll(w.dir)
}

// cpu is the webhook's user+system CPU time so far (/proc/<pid>/stat, clock ticks of 10 ms).
func (w *webhookProcess) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the webhook's CPU: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count after it.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", w.cmd.Process.Pid, s)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %w", w.cmd.Process.Pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func (w *webhookProcess) scrape(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

func procMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = v * 1024
		case "VmHWM:":
			hwm = v * 1024
		}
	}
	return rss, hwm, s.Err()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)].Round(10 * time.Microsecond)
}

// parallel runs fn for 0..n-1 on workers goroutines, stopping at the first error.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// plainPod is a pod of a realistic size (~3 KiB) with one container of image.
func plainPod(ns, name, image string, i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{"app": "bench", "pod-template-hash": strconv.Itoa(i % 97)},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1024)},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: image,
			Args:  []string{"--listen=:8080", "--log-level=info"},
		}}},
	}
	for j := range 20 {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%02d", j), Value: strings.Repeat("v", 40)})
	}
	return p
}

// fatal is a programTB failure.
type fatal struct{ msg string }

func (f fatal) Error() string { return f.msg }

// programTB lets this program use internal/testutil's real servers outside a test: Fatal
// panics with a fatal that run recovers into its error, Cleanup runs at close.
type programTB struct {
	testing.TB
	cleanups []func()
}

func (t *programTB) Helper()                   {}
func (t *programTB) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *programTB) Fatal(args ...any)         { panic(fatal{fmt.Sprint(args...)}) }
func (t *programTB) Fatalf(f string, a ...any) { panic(fatal{fmt.Sprintf(f, a...)}) }
func (t *programTB) Errorf(f string, a ...any) { panic(fatal{fmt.Sprintf(f, a...)}) }
func (t *programTB) Logf(string, ...any)       {}

func (t *programTB) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
