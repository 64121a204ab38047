// Command admission measures pod admission as users see it: pods created through a real
// kube-apiserver (internal/testenv) per second, and the p50/p99 latency of each create, with
// kuik's mutating webhook installed, with it not installed (the floor), and with a no-op
// webhook installed in its place (controller-runtime's webhook server admitting every pod
// unchanged, behind the same webhook configuration: what calling any webhook costs), on the
// same control plane in the same run, for
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
// /proc/<pid>/stat) over the installed batches and its RSS are reported, and the no-op
// webhook's CPU beside it.
//
// Each round runs the three modes in another order (rotated, reversed every other round) to
// spread the drift of a shared machine over all. Pods are never scheduled (there is no node):
// creation is what `kubectl apply` waits for. It prints figures and ratios; it asserts no
// timing, but it checks every admitted pod (rewritten exactly when kuik is installed and must
// rewrite it) and exits non-zero when one is wrong.
//
// Run it with go run ./hack/bench/admission (-pods 120 -rounds 3 for a smoke run).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/benchutil"
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
	flagRounds      = flag.Int("rounds", 8, "rounds; each runs every scenario in every mode, in a rotating order")

	flagServeNoop   = flag.Bool("serve-noop", false, "serve the no-op webhook (this program runs itself so)")
	flagNoopPort    = flag.Int("noop-port", 0, "port of the no-op webhook")
	flagNoopCertDir = flag.String("noop-cert-dir", "", "tls.crt and tls.key of the no-op webhook")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *flagServeNoop {
		if err := serveNoop(*flagNoopPort, *flagNoopCertDir); err != nil {
			fmt.Fprintln(os.Stderr, "no-op webhook:", err)
			os.Exit(1)
		}
		return
	}
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
	noop, err := startNoop(ctx, wh.certDir, cp.CA.PEM)
	if err != nil {
		return err
	}
	defer noop.stop()
	noopHooks, err := chart.WebhookConfigurations(noop.port, cp.CA.PEM)
	if err != nil {
		return err
	}
	configs := map[mode]*unstructured.Unstructured{}
	for _, h := range noopHooks {
		if h.GetKind() == "MutatingWebhookConfiguration" {
			configs[modeNoop] = h
		}
	}
	configs[modeKuik] = mutating
	sentinel, warned, err := sentinelClient(cp)
	if err != nil {
		return err
	}
	procs := map[mode]*webhookProcess{modeNone: wh, modeNoop: noop, modeKuik: wh}

	// Warm-up, unmeasured: connections, the API server's webhook client, the probe cache.
	current := modeKuik
	if err := waitMode(ctx, sentinel, warned, down, reg.Host, current); err != nil {
		return err
	}
	for i, s := range scenarios[:3] {
		if _, err := createBatch(ctx, cs, wh, i, s, -1, *flagConcurrency*2, current); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	per := *flagPods / *flagRounds
	tallies := map[mode][]tally{}
	for _, m := range modes {
		tallies[m] = make([]tally, len(scenarios))
	}
	var idle time.Duration // kuik's CPU over the batches it was not installed for
	fmt.Printf("\n%d rounds of %d pods per scenario and mode, %d creators\n", *flagRounds, per, *flagConcurrency)
	for r := range *flagRounds {
		// Each round runs the three modes in another order: rotated, and reversed every other.
		order := []mode{modes[r%3], modes[(r+1)%3], modes[(r+2)%3]}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			if m != current {
				if err := setMode(ctx, cs, admin, configs, m); err != nil {
					return err
				}
				if err := waitMode(ctx, sentinel, warned, down, reg.Host, m); err != nil {
					return err
				}
				current = m
			}
			for i, s := range scenarios {
				b, err := createBatch(ctx, cs, procs[m], i, s, r, per, m)
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", r, s.name, m, err)
				}
				tallies[m][i].add(b)
				if m == modeNone {
					idle += b.cpu
				}
			}
			fmt.Printf("round %d %-22s done at +%s\n", r, m, time.Since(start).Round(time.Second))
		}
	}
	rss, hwm, err := benchutil.ProcMemory(wh.cmd.Process.Pid)
	if err != nil {
		return err
	}
	metrics, err := wh.scrape(ctx)
	if err != nil {
		return err
	}

	fmt.Printf("\n== 7. Pod admission through the API server (%d pods per cell, %d creators, %d rounds in rotating order)\n", per**flagRounds, *flagConcurrency, *flagRounds)
	fmt.Printf("%-24s %-22s %7s %9s %9s %9s %13s\n", "scenario", "mutating webhook", "pods/s", "p50", "p99", "max", "webhook CPU")
	for i, s := range scenarios {
		for _, m := range modes {
			t := &tallies[m][i]
			lat := sorted(t.lat)
			cpu := "-"
			if m != modeNone {
				cpu = fmt.Sprintf("%.0f µs/pod", float64(t.cpu.Microseconds())/float64(len(lat)))
			}
			fmt.Printf("%-24s %-22s %7.0f %9s %9s %9s %13s\n", s.name, m, float64(len(lat))/t.wall.Seconds(),
				pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(10*time.Microsecond), cpu)
		}
	}
	for i, s := range scenarios {
		var counts []string
		for _, m := range modes {
			if n := slower(tallies[m][i].lat, time.Second); n > 0 {
				counts = append(counts, fmt.Sprintf("%d with %s", n, m))
			}
		}
		if len(counts) > 0 {
			fmt.Printf("%s: pods over 1s: %s\n", s.name, strings.Join(counts, ", "))
		}
	}
	fmt.Printf("\nratios of p50 (p99) and throughput\n")
	fmt.Printf("%-24s %19s %19s %19s   %s\n", "scenario", "kuik / none", "noop / none", "kuik / noop", "goal (kuik / none p50)")
	goals := []string{"<= 1.03x", "<= 1.10x", "<= 1.10x", "bounded by the probe timeout"}
	for i, s := range scenarios {
		cell := func(a, b mode) string {
			x, y := &tallies[a][i], &tallies[b][i]
			la, lb := sorted(x.lat), sorted(y.lat)
			tput := (float64(len(la)) / x.wall.Seconds()) / (float64(len(lb)) / y.wall.Seconds())
			return fmt.Sprintf("%.2fx (%.2fx) %.2fx", ratio(pct(la, 50), pct(lb, 50)), ratio(pct(la, 99), pct(lb, 99)), tput)
		}
		fmt.Printf("%-24s %19s %19s %19s   %s\n", s.name, cell(modeKuik, modeNone), cell(modeNoop, modeNone), cell(modeKuik, modeNoop), goals[i])
	}
	for _, m := range []mode{modeNoop, modeKuik} {
		var wall, cpu time.Duration
		var pods int
		for i := range scenarios {
			wall += tallies[m][i].wall
			cpu += tallies[m][i].cpu
			pods += len(tallies[m][i].lat)
		}
		fmt.Printf("\n%s: CPU %s over %d admissions in %s (%.0f µs/pod, %.1f%% of a core at %.0f pods/s)", m,
			cpu.Round(time.Millisecond), pods, wall.Round(time.Millisecond), float64(cpu.Microseconds())/float64(pods),
			100*cpu.Seconds()/wall.Seconds(), float64(pods)/wall.Seconds())
	}
	fmt.Printf("\nkuik's webhook: %s CPU while not installed; RSS %s (peak %s), Go heap in use %s\n",
		idle.Round(time.Millisecond), benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(int64(metrics["go_memstats_heap_inuse_bytes"])))
	fmt.Printf("kuik's metrics: admissions patched %.0f, unchanged %.0f, error %.0f; probes to the hanging upstream %.0f (connections %d)\n",
		metrics[`kuik_webhook_admissions_total{result="patched",webhook="mutate-pods"}`], metrics[`kuik_webhook_admissions_total{result="unchanged",webhook="mutate-pods"}`],
		metrics[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`], sumPrefix(metrics, `kuik_registry_probes_total{registry="`+silent.Host), silent.Accepted())
	if e := metrics[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`]; e > 0 {
		return fmt.Errorf("the webhook answered %.0f admissions with an internal error", e)
	}
	fmt.Printf("every admitted pod checked: rewritten exactly when kuik was installed and had to\n")
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}

// mode is which mutating webhook the API server calls for pods.
type mode int

const (
	modeNone mode = iota
	modeNoop
	modeKuik
)

var modes = []mode{modeNone, modeNoop, modeKuik}

func (m mode) String() string {
	return [...]string{"none (the floor)", "no-op (same stack)", "kuik"}[m]
}

func slower(d []time.Duration, than time.Duration) int {
	n := 0
	for _, l := range d {
		if l > than {
			n++
		}
	}
	return n
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
func createBatch(ctx context.Context, cs kubernetes.Interface, wh *webhookProcess, i int, s scenario, r, n int, m mode) (batch, error) {
	ns := nsName(i)
	image, want := s.image(max(r, 0)), s.want(max(r, 0))
	if r < 0 {
		image, want = s.image(*flagRounds), s.want(*flagRounds)
	}
	if m != modeKuik {
		want = image
	}
	lat := make([]time.Duration, n)
	cpu0, err := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	t0 := time.Now()
	err = benchutil.Parallel(ctx, n, *flagConcurrency, func(ctx context.Context, j int) error {
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

// setMode points kuik's MutatingWebhookConfiguration at kuik or at the no-op webhook, or
// deletes it.
func setMode(ctx context.Context, cs kubernetes.Interface, admin *rest.Config, configs map[mode]*unstructured.Unstructured, m mode) error {
	if m != modeNone {
		return testenv.Apply(ctx, admin, []*unstructured.Unstructured{configs[m].DeepCopy()})
	}
	err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, configs[modeKuik].GetName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the mutating webhook configuration: %w", err)
	}
	return nil
}

// sentinelClient is a client whose last warning from the API server warned holds.
func sentinelClient(cp *testenv.ControlPlane) (kubernetes.Interface, *atomic.Value, error) {
	warned := &atomic.Value{}
	warned.Store("")
	cfg := cp.Config()
	cfg.WarningHandler = warningFunc(func(text string) { warned.Store(text) })
	cs, err := kubernetes.NewForConfig(cfg)
	return cs, warned, err
}

type warningFunc func(string)

func (f warningFunc) HandleWarningHeader(_ int, _ string, text string) { f(text) }

// waitMode waits until the API server calls the webhook of mode m for pods: a dry-run pod of a
// down original in the sentinel namespace is rewritten exactly when it calls kuik, and warned
// about exactly when it calls the no-op webhook.
func waitMode(ctx context.Context, cs kubernetes.Interface, warned *atomic.Value, down, up string, m mode) error {
	image := down + "/acme/app:v1"
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		warned.Store("")
		got, err := cs.CoreV1().Pods("sentinel").Create(ctx, plainPod("sentinel", "sentinel", image, 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		rewritten := got.Spec.Containers[0].Image == up+"/acme/app:v1"
		noop := warned.Load().(string) == noopWarning
		last = fmt.Sprintf("image %s, warning %q", got.Spec.Containers[0].Image, warned.Load())
		return rewritten == (m == modeKuik) && noop == (m == modeNoop), nil
	})
	if err != nil {
		return fmt.Errorf("the API server never turned to calling %s (sentinel: %s): %w", m, last, err)
	}
	return nil
}

// noopWarning is what the no-op webhook warns about pods of the sentinel namespace, so that
// waitMode can tell it is called.
const noopWarning = "no-op webhook"

// serveNoop is the no-op webhook: controller-runtime's webhook server, as kuik's uses it,
// admitting every pod unchanged.
func serveNoop(port int, certDir string) error {
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	srv.Register("/mutate-pods", &ctrlwebhook.Admission{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		if req.Namespace == "sentinel" {
			return admission.Allowed("").WithWarnings(noopWarning)
		}
		return admission.Allowed("")
	})})
	return srv.Start(context.Background())
}

// startNoop runs this program as the no-op webhook, serving with the certificate in certDir
// (of the CA caPEM).
func startNoop(ctx context.Context, certDir string, caPEM []byte) (*webhookProcess, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		return nil, err
	}
	w := &webhookProcess{port: port, exited: make(chan struct{})}
	w.cmd = exec.Command(self, "-serve-noop", "-noop-port="+strconv.Itoa(port), "-noop-cert-dir="+certDir)
	w.cmd.Stdout, w.cmd.Stderr = io.Discard, os.Stderr
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-w.exited:
			return false, errors.New("the no-op webhook exited")
		default:
		}
		// A full handshake, so the server logs no handshake error.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("the no-op webhook never listened: %w", err)
	}
	return w, nil
}

// webhookProcess is kuik's webhook binary running under the chart's identity.
type webhookProcess struct {
	cmd         *exec.Cmd
	dir         string
	certDir     string
	port        int
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
	w.certDir = certDir
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
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
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

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(10 * time.Microsecond)
}
