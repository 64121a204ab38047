// Command syncer benchmarks the secret-syncer on a local control plane (internal/testenv):
//
//  1. convergence: time for one Always resource to reach N namespaces, against a bare client
//     doing the same N server-side applies with the same concurrency (the floor);
//  2. writes during an unchanged resync: apply requests sent and objects actually written
//     (watch MODIFIED events), for the periodic forced resync and for an event storm that
//     re-decides every pair;
//  3. OnFailure latency: pod admitted → Secret present, p50/p99;
//  4. memory: RSS of the secret-syncer binary (a subprocess) with P pods of which R rewritten.
//
// It prints figures and ratios; it asserts nothing. Run it with go run ./hack/bench/syncer.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var (
	flagNamespaces = flag.Int("namespaces", 2000, "namespaces for the Always convergence")
	flagWorkers    = flag.Int("workers", 16, "syncer workers, and the floor's concurrency")
	flagPods       = flag.Int("pods", 20000, "pods for the memory measure (0 skips it)")
	flagRewritten  = flag.Int("rewritten", 1000, "of which rewritten by an OnFailure resource")
	flagSamples    = flag.Int("latency-samples", 200, "OnFailure latency samples")
	flagDebounce   = flag.Duration("debounce", 200*time.Millisecond, "syncer debounce")
	flagResync     = flag.Duration("resync", time.Minute, "syncer resync period (phase 2 waits for one)")
	flagCPUProfile = flag.String("cpuprofile", "", "write a CPU profile of the convergence phase (syncer in-process) to this file")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	start := time.Now()
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
	if err := installCRDs(ctx, admin); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: crns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{"quay.io": "user:password", "registry.tld": "mirror:password"})},
	}
	if _, err := cs.CoreV1().Secrets(crns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		return err
	}

	// Namespaces.
	n := *flagNamespaces
	names := make([]string, n)
	t0 := time.Now()
	err = parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
		names[i] = fmt.Sprintf("bench-%05d", i)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"bench": "always"}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("created %d namespaces in %s\n", n, time.Since(t0).Round(time.Millisecond))

	// 1. Floor: a bare client, same concurrency, applying exactly what the syncer applies (the
	// same labels, type, data and a controller ownerReference), built by the syncer's own
	// functions, under another name.
	data := testutil.DockerConfigJSON(map[string]string{"quay.io/acme/foo": "user:password"})
	floor := func(name string) (time.Duration, error) {
		owner := &syncer.Resource{Kind: routing.KindImageAlternative, Name: name, UID: types.UID(name)}
		t0 := time.Now()
		err := parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
			ac := syncer.ApplyConfiguration(syncer.DesiredSecret(owner, names[i], data))
			_, err := cs.CoreV1().Secrets(names[i]).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "bench", Force: true})
			return err
		})
		return time.Since(t0), err
	}
	floor1, err := floor("bench-floor-1")
	if err != nil {
		return err
	}

	// The syncer, in-process, with a transport counting its Secret applies.
	var applyRequests, firstApply, lastApply atomic.Int64
	scfg := rest.CopyConfig(admin)
	scfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/secrets/") && r.Header.Get("Content-Type") == string(types.ApplyPatchType) {
				now := time.Now().UnixNano()
				if applyRequests.Add(1) == 1 {
					firstApply.Store(now)
				}
				lastApply.Store(now)
			}
			return rt.RoundTrip(r)
		})
	}
	sctx, stopSyncer := context.WithCancel(ctx)
	defer stopSyncer()
	syncerDone := make(chan error, 1)
	go func() {
		syncerDone <- syncer.Run(sctx, scfg, syncer.Options{
			Config: syncer.Config{
				ClusterResourceNamespace: crns,
				Workers:                  *flagWorkers,
				Debounce:                 *flagDebounce,
				ResyncPeriod:             *flagResync,
			},
			MetricsBindAddress: "0",
		})
	}()
	time.Sleep(2 * time.Second) // informers synced, nothing to do yet

	before := counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))
	always := testutil.NewImageAlternative("always").Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"bench": "always"}).
		Repository("quay.io/acme/foo").SecretRef("creds").Build()
	if *flagCPUProfile != "" {
		f, err := os.Create(*flagCPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	t0 = time.Now()
	if err := cl.Create(ctx, &always); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))-before >= float64(n), nil
	})
	if err != nil {
		return fmt.Errorf("convergence: %w", err)
	}
	converge := time.Since(t0)
	pprof.StopCPUProfile()
	applySpan := fmt.Sprintf("first apply request at +%s, last at +%s",
		time.Duration(firstApply.Load()-t0.UnixNano()).Round(time.Millisecond), time.Duration(lastApply.Load()-t0.UnixNano()).Round(time.Millisecond))
	floor2, err := floor("bench-floor-2")
	if err != nil {
		return err
	}
	list, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + routing.PullSecretName(routing.KindImageAlternative, always.Name)})
	if err != nil {
		return err
	}
	floorMean := (floor1 + floor2) / 2
	fmt.Printf("\n== 1. Always convergence on %d namespaces (%d workers, debounce %s)\n", n, *flagWorkers, *flagDebounce)
	fmt.Printf("floor (bare client, %d applies): %s before, %s after; mean %s\n", n, floor1.Round(time.Millisecond), floor2.Round(time.Millisecond), floorMean.Round(time.Millisecond))
	fmt.Printf("syncer: %s to %d Secrets (%d listed); %s\n", converge.Round(time.Millisecond), n, len(list.Items), applySpan)
	fmt.Printf("ratio syncer/floor: %.2fx against the mean floor, %.2fx against the faster run (goal <= 1.2x)\n",
		float64(converge)/float64(floorMean), float64(converge)/float64(min(floor1, floor2)))

	// 2. Writes during an unchanged resync.
	w, err := cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	var modified atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified || ev.Type == watch.Added || ev.Type == watch.Deleted {
				modified.Add(1)
			}
		}
	}()
	// (a) events that re-decide every pair without changing anything: hash skips.
	time.Sleep(time.Second)
	applyRequests.Store(0)
	skippedBefore := counter(metrics.SyncerAppliesSkipped)
	err = parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Namespaces().Patch(ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return counter(metrics.SyncerAppliesSkipped)-skippedBefore >= float64(n), nil
	})
	time.Sleep(time.Second)
	fmt.Printf("\n== 2. Writes when nothing changed\n")
	fmt.Printf("event storm re-deciding all %d pairs (namespace relabel): %d apply requests, %d Secret writes, %.0f applies skipped by the hash (goal 0 writes)\n",
		n, applyRequests.Load(), modified.Load(), counter(metrics.SyncerAppliesSkipped)-skippedBefore)
	// (b) the periodic resync re-applies every pair on purpose (it restores deleted or edited
	// Secrets); the API server turns each identical apply into a no-op.
	applyRequests.Store(0)
	modified.Store(0)
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2**flagResync+time.Minute, true, func(context.Context) (bool, error) {
		return applyRequests.Load() >= int64(n), nil
	})
	resyncTook := time.Duration(lastApply.Load() - firstApply.Load())
	time.Sleep(2 * time.Second)
	fmt.Printf("periodic forced resync: %d apply requests (by design, one per pair) in ~%s, %d Secret writes (goal 0)\n",
		applyRequests.Load(), resyncTook.Round(time.Millisecond), modified.Load())
	w.Stop()

	// 3. OnFailure latency: pod admitted → Secret present.
	// The pods' original, docker.io/acme/bar, stands for quay.io/acme/bar: the syncer counts only
	// records the webhook could have written.
	onFailure := testutil.NewImageAlternative("onfailure").Repository("docker.io/acme/bar").Repository("quay.io/acme/bar").SecretRef("creds").Build()
	if err := cl.Create(ctx, &onFailure); err != nil {
		return err
	}
	samples := *flagSamples
	latNS := make([]string, samples)
	err = parallel(ctx, samples, *flagWorkers, func(ctx context.Context, i int) error {
		latNS[i] = fmt.Sprintf("lat-%04d", i)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: latNS[i]}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	sw, err := cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kuik-inject-imagealternative-onfailure"})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	seen := map[string]chan struct{}{}
	for _, ns := range latNS {
		seen[ns] = make(chan struct{})
	}
	go func() {
		for ev := range sw.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			s := ev.Object.(*corev1.Secret)
			mu.Lock()
			if ch, ok := seen[s.Namespace]; ok {
				close(ch)
				delete(seen, s.Namespace)
			}
			mu.Unlock()
		}
	}()
	var lat []time.Duration
	for i, ns := range latNS {
		mu.Lock()
		ch := seen[ns]
		mu.Unlock()
		pod := rewrittenPod(ns, "p", "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		t0 := time.Now()
		select {
		case <-ch:
			lat = append(lat, time.Since(t0))
		case <-time.After(30 * time.Second):
			return fmt.Errorf("no secret in %s after 30s", ns)
		}
	}
	sw.Stop()
	slices.Sort(lat)
	fmt.Printf("\n== 3. OnFailure: pod admitted → Secret present (%d samples, debounce %s)\n", len(lat), *flagDebounce)
	fmt.Printf("p50 %s  p90 %s  p99 %s  max %s\n", pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))

	stopSyncer()
	if err := <-syncerDone; err != nil {
		return err
	}

	// 4. Memory of the secret-syncer binary.
	if *flagPods > 0 {
		if err := memory(ctx, cp, cs); err != nil {
			return err
		}
	}
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}

func memory(ctx context.Context, cp *testenv.ControlPlane, cs kubernetes.Interface) error {
	pods, rewritten := *flagPods, *flagRewritten
	const podNamespaces = 100
	t0 := time.Now()
	err := parallel(ctx, podNamespaces, *flagWorkers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pods-%03d", i)}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	every := max(pods/max(rewritten, 1), 1)
	err = parallel(ctx, pods, *flagWorkers, func(ctx context.Context, i int) error {
		ns := fmt.Sprintf("pods-%03d", i%podNamespaces)
		var p *corev1.Pod
		if rewritten > 0 && i%every == 0 && i/every < rewritten {
			// Spread over every namespace.
			ns = fmt.Sprintf("pods-%03d", (i/every)%podNamespaces)
			p = rewrittenPod(ns, fmt.Sprintf("p-%05d", i), "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
		} else {
			p = plainPod(ns, fmt.Sprintf("p-%05d", i), i)
		}
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("\n== 4. Memory: %d pods (%d rewritten) in %d namespaces, plus %d Always namespaces; created in %s\n",
		pods, rewritten, podNamespaces, *flagNamespaces, time.Since(t0).Round(time.Second))

	dir, err := os.MkdirTemp("", "kuik-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin := filepath.Join(dir, "secret-syncer")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/secret-syncer")
	build.Dir = testenv.RepoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building secret-syncer: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+cp.Kubeconfig, "--cluster-resource-namespace="+crns,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=0",
		"--workers="+strconv.Itoa(*flagWorkers))
	logf, err := os.Create(filepath.Join(dir, "syncer.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Converged when every pair was applied (Always namespaces + namespaces of rewritten pods)
	// and the counters stand still.
	wantPairs := float64(*flagNamespaces + min(rewritten, podNamespaces) + *flagSamples)
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := scrape(ctx, port)
		if err != nil {
			return false, nil
		}
		cur := m[`kuik_secret_syncer_applies_total{result="success"}`] + m["kuik_secret_syncer_applies_skipped_total"]
		done := m["kuik_secret_syncer_pairs"] >= wantPairs && fmt.Sprint(cur) == last
		last = fmt.Sprint(cur)
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("subprocess syncer did not converge (log in %s): %w", logf.Name(), err)
	}
	converged := time.Since(t0)
	time.Sleep(5 * time.Second)
	rss, hwm, err := procMemory(cmd.Process.Pid)
	if err != nil {
		return err
	}
	m, _ := scrape(ctx, port)
	fmt.Printf("subprocess syncer converged in %s: %.0f pairs, %.0f applies\n", converged.Round(time.Millisecond),
		m["kuik_secret_syncer_pairs"], m[`kuik_secret_syncer_applies_total{result="success"}`])
	fmt.Printf("RSS %s (peak %s), Go heap in use %s (goal RSS < 100 MiB)\n", mib(rss), mib(hwm), mib(int64(m["go_memstats_heap_inuse_bytes"])))
	return nil
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

func scrape(ctx context.Context, port int) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
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
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

func freePort() (int, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)].Round(time.Millisecond)
}

func counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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

// plainPod is a pod no resource rewrote, of a realistic size (~3 KiB).
func plainPod(ns, name string, i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{"app": "bench", "pod-template-hash": strconv.Itoa(i % 97)},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1024)},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.example/team/app:v" + strconv.Itoa(i%13),
			Args:  []string{"--listen=:8080", "--log-level=info"},
		}}},
	}
	for j := range 20 {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%02d", j), Value: strings.Repeat("v", 40)})
	}
	return p
}

// rewrittenPod is a plain pod as the webhook admits it after rewriting its container.
func rewrittenPod(ns, name, image, by string, i int) *corev1.Pod {
	p := plainPod(ns, name, i)
	p.Labels[v1alpha1.LabelRewritten] = "true"
	p.Annotations[v1alpha1.AnnotationRewrittenBy] = `{"app":"` + by + `"}`
	p.Annotations[v1alpha1.AnnotationOriginalImages] = `{"app":"docker.io/acme/bar:v1"}`
	p.Spec.Containers[0].Image = image
	return p
}

func installCRDs(ctx context.Context, cfg *rest.Config) error {
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD in config/crd: %w", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
