// Command syncer benchmarks the secret-syncer on a local control plane (internal/testenv):
//
//  1. convergence: time for R Always resources to reach N namespaces, against a bare client
//     doing the same R×N server-side applies with the same concurrency (the floor); every
//     Secret is then checked (present in every namespace, exactly the expected content);
//  2. writes during an unchanged resync: apply requests sent and objects actually written
//     (watch MODIFIED events), for the periodic forced resync and for an event storm that
//     re-decides every pair;
//  3. OnFailure latency: pod admitted → Secret present, p50/p99;
//  4. a peer (-peer-cmd, -peer-secret; peer.go): on the same API server and namespaces, the
//     time until a peer's Secret exists in every namespace and the Secret writes it makes while
//     nothing changes, next to kuik's and the floor's;
//  5. memory: RSS of the secret-syncer binary (a subprocess) with P pods, spread over the N
//     namespaces, of which W rewritten; then with H hostile pods added (what any pod author
//     may write: ~2,000 labels, a 250 KiB kuik.enix.io/ annotation, a 512 KiB image, the
//     rewritten label) and one pod re-annotated in a loop with invented names, as a ratio of
//     the honest RSS measured just before (the floor), and again after a restart of the
//     syncer, which lists them all at once.
//
// It prints figures and ratios and asserts nothing about them; it exits non-zero when an outcome
// is wrong (a Secret missing or with the wrong content, a peer that never converges). Run it
// with go run ./hack/bench/syncer; the defaults take a few minutes, the issue 11 sizes are
// -namespaces 10000 -resources 3 -pods 50000 -rewritten 2000.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var (
	flagNamespaces    = flag.Int("namespaces", 2000, "namespaces for the Always convergence (the pods go there too)")
	flagResources     = flag.Int("resources", 3, "Always resources, each reaching every namespace")
	flagWorkers       = flag.Int("workers", 16, "syncer workers, and the floor's concurrency")
	flagCreateWorkers = flag.Int("create-workers", 32, "concurrency of the object creation (namespaces, pods), not measured")
	flagPods          = flag.Int("pods", 20000, "pods for the memory measure (0 skips it)")
	flagRewritten     = flag.Int("rewritten", 1000, "of which rewritten by an OnFailure resource")
	flagSamples       = flag.Int("latency-samples", 200, "OnFailure latency samples")
	flagDebounce      = flag.Duration("debounce", 200*time.Millisecond, "syncer debounce")
	flagResync        = flag.Duration("resync", 0, "syncer resync period (phase 2 waits for one); 0: 4× the first floor, at least 1m, so that no resync overlaps phase 1 or the storm")
	flagCPUProfile    = flag.String("cpuprofile", "", "write a CPU profile of the convergence phase (syncer in-process) to this file")
	flagHostile       = flag.Int("hostile-pods", 500, "after the memory measure, fat pods any pod author can write (~2,000 labels, a 250 KiB kuik.enix.io/ annotation, a 512 KiB image), measured against the honest RSS (0 skips)")
	flagReannotate    = flag.Int("reannotate", 50, "updates of one pod re-annotated with invented names, with -hostile-pods")
	flagInvented      = flag.Int("reannotate-names", 5000, "invented container and resource names per re-annotation")
	flagPeerCmd       = flag.String("peer-cmd", "", "a peer to compare with, run through sh -c with KUBECONFIG set (see peer.go)")
	flagPeerSecret    = flag.String("peer-secret", "", "the Secret the peer writes in every namespace (required with -peer-cmd)")
	flagPeerQuiet     = flag.Duration("peer-quiet", 30*time.Second, "quiet window over which kuik's and the peer's writes are counted")
	flagPeerTimeout   = flag.Duration("peer-timeout", 15*time.Minute, "how long the peer may take to reach every namespace")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *flagPeerCmd != "" && *flagPeerSecret == "" {
		fmt.Fprintln(os.Stderr, "bench: -peer-secret is required with -peer-cmd")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench holds what the phases share.
type bench struct {
	cp     *testenv.ControlPlane
	admin  *rest.Config
	cs     kubernetes.Interface // JSON, as the syncer's own client: the floor
	create kubernetes.Interface // protobuf, for the objects the phases need (not measured)
	cl     client.Client
	names  []string // the Always namespaces
	data   []byte   // the .dockerconfigjson every Always Secret holds
}

// timeout grows with the work: a minute plus 20ms per object.
func timeout(objects int) time.Duration {
	return time.Minute + time.Duration(objects)*20*time.Millisecond
}

func run(ctx context.Context) error {
	start := time.Now()
	cp, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	fmt.Printf("control plane ready in %s\n", time.Since(start).Round(time.Millisecond))
	b := &bench{cp: cp, admin: cp.Config()}
	b.admin.QPS, b.admin.Burst = -1, 0
	if b.cs, err = kubernetes.NewForConfig(b.admin); err != nil {
		return err
	}
	pcfg := rest.CopyConfig(b.admin)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if b.create, err = kubernetes.NewForConfig(pcfg); err != nil {
		return err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return err
	}
	if b.cl, err = client.New(b.admin, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	cs := b.cs
	if err := installCRDs(ctx, b.admin); err != nil {
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
	n, nres := *flagNamespaces, max(*flagResources, 1)
	b.names = make([]string, n)
	for i := range b.names {
		b.names[i] = fmt.Sprintf("bench-%05d", i)
	}
	names := b.names
	t0 := time.Now()
	err = benchutil.Parallel(ctx, n, *flagCreateWorkers, func(ctx context.Context, i int) error {
		_, err := b.create.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{"bench": "always"}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating namespaces: %w", err)
	}
	fmt.Printf("created %d namespaces in %s\n", n, time.Since(t0).Round(time.Millisecond))

	// 1. Floor: a bare client, same concurrency, applying exactly what the syncer applies (the
	// same labels, type, data and a controller ownerReference), built by the syncer's own
	// functions, under other names.
	b.data = testutil.DockerConfigJSON(map[string]string{"quay.io/acme/foo": "user:password"})
	floor1, err := b.floor(ctx, "bench-floor-1", nres)
	if err != nil {
		return err
	}
	if *flagResync == 0 {
		// A resync during phase 1 would compete with the second floor, one during the storm
		// would hide the hash skips.
		*flagResync = max(time.Minute, 4*floor1).Round(time.Second)
	}
	fmt.Printf("syncer resync period %s\n", *flagResync)

	// The syncer, in-process, with a transport counting its Secret applies.
	var applyRequests, firstApply, lastApply atomic.Int64
	scfg := rest.CopyConfig(b.admin)
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
	var always []v1alpha1.ImageAlternative
	for r := range nres {
		always = append(always, testutil.NewImageAlternative(fmt.Sprintf("always-%d", r)).Policy(v1alpha1.RewritePolicyAlways).
			NamespaceSelector(map[string]string{"bench": "always"}).
			Repository("quay.io/acme/foo").SecretRef("creds").Build())
	}
	if *flagCPUProfile != "" {
		f, err := os.Create(*flagCPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	pairs := nres * n
	t0 = time.Now()
	for i := range always {
		if err := b.cl.Create(ctx, &always[i]); err != nil {
			return err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout(pairs), true, func(context.Context) (bool, error) {
		return counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))-before >= float64(pairs), nil
	})
	if err != nil {
		return fmt.Errorf("convergence: %d of %d applies: %w", int(counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))-before), pairs, err)
	}
	converge := time.Since(t0)
	pprof.StopCPUProfile()
	applySpan := fmt.Sprintf("first apply request at +%s, last at +%s",
		time.Duration(firstApply.Load()-t0.UnixNano()).Round(time.Millisecond), time.Duration(lastApply.Load()-t0.UnixNano()).Round(time.Millisecond))
	floor2, err := b.floor(ctx, "bench-floor-2", nres)
	if err != nil {
		return err
	}
	var rv string
	for i := range always {
		if rv, err = b.checkSecrets(ctx, routing.PullSecretName(routing.KindImageAlternative, always[i].Name)); err != nil {
			return err
		}
	}
	floorMean := (floor1 + floor2) / 2
	fmt.Printf("\n== 1. Always convergence: %d resources x %d namespaces = %d Secrets (%d workers, debounce %s)\n", nres, n, pairs, *flagWorkers, *flagDebounce)
	fmt.Printf("floor (bare client, %d applies): %s before, %s after; mean %s\n", pairs, floor1.Round(time.Millisecond), floor2.Round(time.Millisecond), floorMean.Round(time.Millisecond))
	fmt.Printf("syncer: %s to %d Secrets (%.0f/s), every one present with the expected content; %s\n", converge.Round(time.Millisecond), pairs, float64(pairs)/converge.Seconds(), applySpan)
	fmt.Printf("ratio syncer/floor: %.2fx against the mean floor, %.2fx against the faster run (goal <= 1.15x)\n",
		float64(converge)/float64(floorMean), float64(converge)/float64(min(floor1, floor2)))

	// 2. Writes during an unchanged resync.
	w, err := cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer, ResourceVersion: rv})
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
	t0 = time.Now()
	err = benchutil.Parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Namespaces().Patch(ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	patched := time.Since(t0)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout(pairs), true, func(context.Context) (bool, error) {
		return counter(metrics.SyncerAppliesSkipped)-skippedBefore >= float64(pairs), nil
	})
	decided := time.Since(t0).Round(time.Millisecond).String()
	if err != nil {
		decided = "not all decided by the hash after " + decided
	} else {
		decided = "all decided after " + decided
	}
	time.Sleep(time.Second)
	fmt.Printf("\n== 2. Writes when nothing changed\n")
	fmt.Printf("event storm re-deciding all %d pairs (%d namespaces relabelled in %s, %s): %d apply requests, %d Secret writes, %.0f applies skipped by the hash (goal 0 writes)\n",
		pairs, n, patched.Round(time.Millisecond), decided, applyRequests.Load(), modified.Load(), counter(metrics.SyncerAppliesSkipped)-skippedBefore)
	// (b) the periodic resync re-applies every pair on purpose (it restores deleted or edited
	// Secrets); the API server turns each identical apply into a no-op.
	applyRequests.Store(0)
	modified.Store(0)
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2**flagResync+timeout(pairs), true, func(context.Context) (bool, error) {
		return applyRequests.Load() >= int64(pairs), nil
	})
	resyncRequests := applyRequests.Load()
	resyncTook := time.Duration(lastApply.Load() - firstApply.Load())
	time.Sleep(2 * time.Second)
	fmt.Printf("periodic forced resync: %d apply requests (by design, one per pair) in ~%s, %d Secret writes (goal 0)\n",
		resyncRequests, resyncTook.Round(time.Millisecond), modified.Load())
	w.Stop()

	// 3. OnFailure latency: pod admitted → Secret present.
	// The pods' original, docker.io/acme/bar, stands for quay.io/acme/bar: the syncer counts only
	// records the webhook could have written.
	onFailure := testutil.NewImageAlternative("onfailure").Repository("docker.io/acme/bar").Repository("quay.io/acme/bar").SecretRef("creds").Build()
	if err := b.cl.Create(ctx, &onFailure); err != nil {
		return err
	}
	samples := *flagSamples
	latNS := make([]string, samples)
	err = benchutil.Parallel(ctx, samples, *flagCreateWorkers, func(ctx context.Context, i int) error {
		latNS[i] = fmt.Sprintf("lat-%04d", i)
		_, err := b.create.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: latNS[i]}}, metav1.CreateOptions{})
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
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Printf("\n== 3. OnFailure: pod admitted → Secret present (%d samples, debounce %s)\n", len(lat), *flagDebounce)
		fmt.Printf("p50 %s  p90 %s  p99 %s  max %s\n", pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	}

	// 4. The peer, next to kuik and the floor.
	if *flagPeerCmd != "" {
		if err := b.peer(ctx, &applyRequests, stopSyncer, syncerDone); err != nil {
			return err
		}
	} else {
		stopSyncer()
		if err := <-syncerDone; err != nil {
			return err
		}
	}

	// 5. Memory of the secret-syncer binary.
	if *flagPods > 0 {
		if err := b.memory(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}

// floor applies, with a bare client and the syncer's concurrency, the Secrets res resources
// named prefix-<r> would have in every namespace, and returns how long it took.
func (b *bench) floor(ctx context.Context, prefix string, res int) (time.Duration, error) {
	owners := make([]*syncer.Resource, res)
	for r := range owners {
		name := fmt.Sprintf("%s-%d", prefix, r)
		owners[r] = &syncer.Resource{Kind: routing.KindImageAlternative, Name: name, UID: types.UID(name)}
	}
	n := len(b.names)
	t0 := time.Now()
	err := benchutil.Parallel(ctx, res*n, *flagWorkers, func(ctx context.Context, i int) error {
		ns := b.names[i%n]
		ac := syncer.ApplyConfiguration(syncer.DesiredSecret(owners[i/n], ns, b.data))
		_, err := b.cs.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "bench", Force: true})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("floor %s: %w", prefix, err)
	}
	return time.Since(t0), nil
}

// checkSecrets checks that the Secret name exists in every Always namespace with exactly the
// expected content, and returns the resource version of the list.
func (b *bench) checkSecrets(ctx context.Context, name string) (string, error) {
	list, err := b.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return "", fmt.Errorf("listing secrets %s: %w", name, err)
	}
	got := map[string]*corev1.Secret{}
	for i := range list.Items {
		got[list.Items[i].Namespace] = &list.Items[i]
	}
	var missing, wrong []string
	for _, ns := range b.names {
		s, ok := got[ns]
		switch {
		case !ok:
			missing = append(missing, ns)
		case s.Type != corev1.SecretTypeDockerConfigJson || string(s.Data[corev1.DockerConfigJsonKey]) != string(b.data):
			wrong = append(wrong, ns)
		}
	}
	if len(missing) > 0 || len(wrong) > 0 {
		return "", fmt.Errorf("secret %s: missing in %d namespaces %s, wrong content in %d %s", name, len(missing), head(missing), len(wrong), head(wrong))
	}
	return list.ResourceVersion, nil
}

func head(s []string) string {
	if len(s) > 5 {
		return fmt.Sprint(s[:5]) + "..."
	}
	return fmt.Sprint(s)
}

func (b *bench) memory(ctx context.Context) error {
	pods, rewritten := *flagPods, min(*flagRewritten, *flagPods)
	names := b.names
	if len(names) == 0 {
		return errors.New("memory: -namespaces 0 leaves no namespace for the pods")
	}
	n := len(names)
	// The rewritten pods first, one namespace each as far as there are namespaces, then the
	// plain ones round-robin.
	rewrittenNS := map[string]struct{}{}
	for j := range rewritten {
		rewrittenNS[names[j%n]] = struct{}{}
	}
	t0 := time.Now()
	err := benchutil.Parallel(ctx, pods, *flagCreateWorkers, func(ctx context.Context, i int) error {
		ns := names[i%n]
		var p *corev1.Pod
		if i < rewritten {
			p = rewrittenPod(ns, fmt.Sprintf("p-%05d", i), "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
		} else {
			p = plainPod(ns, fmt.Sprintf("p-%05d", i), i)
		}
		_, err := b.create.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	fmt.Printf("\n== 5. Memory: %d pods (%d rewritten, in %d namespaces) spread over the %d Always namespaces (%d resources); created in %s (%.0f/s)\n",
		pods, rewritten, len(rewrittenNS), n, max(*flagResources, 1), time.Since(t0).Round(time.Second), float64(pods)/time.Since(t0).Seconds())

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
	sub, err := startSubprocess(ctx, bin, b.cp.Kubeconfig, dir)
	if err != nil {
		return err
	}
	defer func() { sub.stop() }()
	t0 = time.Now()
	// Converged when every pair was applied (Always pairs, and the OnFailure pairs of the
	// rewritten pods' namespaces and of the latency samples) and the counters stand still.
	wantPairs := float64(max(*flagResources, 1)*n + len(rewrittenNS) + *flagSamples)
	if err := sub.converge(ctx, wantPairs, timeout(int(wantPairs)+pods/10)); err != nil {
		return err
	}
	port := sub.port
	converged := time.Since(t0)
	time.Sleep(5 * time.Second)
	rss, hwm, err := benchutil.ProcMemory(sub.cmd.Process.Pid)
	if err != nil {
		return err
	}
	m, _ := scrape(ctx, port)
	fmt.Printf("subprocess syncer converged in %s: %.0f pairs, %.0f applies\n", converged.Round(time.Millisecond),
		m["kuik_secret_syncer_pairs"], m[`kuik_secret_syncer_applies_total{result="success"}`])
	heap := ""
	if h, ok := m["go_memstats_heap_inuse_bytes"]; ok {
		heap = ", Go heap in use " + benchutil.MiB(int64(h))
	}
	fmt.Printf("RSS %s (peak %s)%s (goal RSS < 150 MiB)\n", benchutil.MiB(rss), benchutil.MiB(hwm), heap)
	if rss >= 150<<20 {
		fmt.Printf("FINDING: RSS over the 150 MiB goal\n")
	}
	if *flagHostile <= 0 {
		return nil
	}
	return b.hostile(ctx, sub, bin, dir, wantPairs, rss, int64(m["go_memstats_heap_inuse_bytes"]))
}

// subprocess is a secret-syncer binary run against the bench's control plane.
type subprocess struct {
	cmd  *exec.Cmd
	port int
	log  *os.File
}

func startSubprocess(ctx context.Context, bin, kubeconfig, dir string) (*subprocess, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+kubeconfig, "--cluster-resource-namespace="+crns,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=0",
		"--workers="+strconv.Itoa(*flagWorkers))
	logf, err := os.CreateTemp(dir, "syncer-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &subprocess{cmd: cmd, port: port, log: logf}, nil
}

func (s *subprocess) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = s.log.Close()
}

// converge waits until the syncer holds wantPairs pairs and its apply counters stand still.
func (s *subprocess) converge(ctx context.Context, wantPairs float64, limit time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		m, err := scrape(ctx, s.port)
		if err != nil {
			return false, nil
		}
		cur := fmt.Sprint(m[`kuik_secret_syncer_applies_total{result="success"}`]+m["kuik_secret_syncer_applies_skipped_total"], m["kuik_secret_syncer_queue_depth"])
		done := m["kuik_secret_syncer_pairs"] >= wantPairs && cur == last
		last = cur
		return done, nil
	})
	if err != nil {
		_ = s.log.Sync()
		return fmt.Errorf("subprocess syncer did not converge to %.0f pairs: %w\n%s", wantPairs, err, tail(s.log.Name()))
	}
	return nil
}

// settle waits for the counters to stand still, then measures the subprocess' memory.
func (s *subprocess) settle(ctx context.Context, wantPairs float64, limit time.Duration) (rss, hwm, heap int64, err error) {
	if err := s.converge(ctx, wantPairs, limit); err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(5 * time.Second)
	if rss, hwm, err = benchutil.ProcMemory(s.cmd.Process.Pid); err != nil {
		return 0, 0, 0, err
	}
	m, _ := scrape(ctx, s.port)
	return rss, hwm, int64(m["go_memstats_heap_inuse_bytes"]), nil
}

// hostile adds the pods of a tenant who wants the syncer's memory, and one pod re-annotated in
// a loop with invented names, then measures the syncer against the honest floor, and again
// after a restart.
func (b *bench) hostile(ctx context.Context, sub *subprocess, bin, dir string, wantPairs float64, floorRSS, floorHeap int64) error {
	names := b.names
	t0 := time.Now()
	err := benchutil.Parallel(ctx, *flagHostile, min(*flagCreateWorkers, 8), func(ctx context.Context, i int) error {
		ns := names[i%len(names)]
		_, err := b.create.CoreV1().Pods(ns).Create(ctx, fatPod(ns, fmt.Sprintf("fat-%05d", i), i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating hostile pods: %w", err)
	}
	created := time.Since(t0)
	ns := names[0]
	loop := rewrittenPod(ns, "reannotated", "quay.io/acme/bar:v1", "ImageAlternative/onfailure", 0)
	if _, err := b.create.CoreV1().Pods(ns).Create(ctx, loop, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the re-annotated pod: %w", err)
	}
	for round := range *flagReannotate {
		// Containers the pod lacks, each naming a resource that does not exist, new ones each
		// round (the original-images record only for the real container: the rewritten-by
		// annotation alone makes the fan-out, and both must fit the API server's 256 KiB).
		by, orig := map[string]string{"app": "ImageAlternative/onfailure"}, map[string]string{"app": "docker.io/acme/bar:v1"}
		for j := range *flagInvented {
			by[fmt.Sprintf("g%d", j)] = fmt.Sprintf("ImageAlternative/i%d-%d", round, j)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.AnnotationRewrittenBy: mustJSON(by), v1alpha1.AnnotationOriginalImages: mustJSON(orig),
		}}})
		if err != nil {
			return err
		}
		if _, err := b.cs.CoreV1().Pods(ns).Patch(ctx, loop.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("re-annotating: %w", err)
		}
	}
	fmt.Printf("\n== 5b. Hostile pods: %d fat pods created in %s, one pod re-annotated %d times with %d invented names each\n",
		*flagHostile, created.Round(time.Second), *flagReannotate, *flagInvented)
	limit := timeout(int(wantPairs) + *flagHostile)
	rss, hwm, heap, err := sub.settle(ctx, wantPairs, limit)
	if err != nil {
		return err
	}
	fmt.Printf("RSS %s (peak %s), Go heap in use %s: %.2f× the honest RSS floor %s (heap %.2f×)\n",
		benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(heap), float64(rss)/float64(floorRSS), benchutil.MiB(floorRSS), ratio(heap, floorHeap))
	// A restart lists every pod again, the fat ones included.
	sub.stop()
	restarted, err := startSubprocess(ctx, bin, b.cp.Kubeconfig, dir)
	if err != nil {
		return err
	}
	defer restarted.stop()
	rss, hwm, heap, err = restarted.settle(ctx, wantPairs, limit)
	if err != nil {
		return err
	}
	fmt.Printf("after a restart: RSS %s (peak %s), Go heap in use %s: %.2f× the honest RSS floor (heap %.2f×)\n",
		benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(heap), float64(rss)/float64(floorRSS), ratio(heap, floorHeap))
	if rss >= 150<<20 {
		fmt.Printf("FINDING: RSS over the 150 MiB goal with the hostile pods\n")
	}
	return nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fatPod is what any pod author may create: the rewritten label and a record, ~2,000 labels, a
// 250 KiB kuik.enix.io/ annotation, a 512 KiB image, and a nodeSelector nothing matches (it
// costs no node). The API server admits it at ~800 KiB.
func fatPod(ns, name string, i int) *corev1.Pod {
	p := rewrittenPod(ns, name, "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
	for j := range 2000 {
		p.Labels[fmt.Sprintf("tenant.example/l-%04d", j)] = strings.Repeat("v", 40)
	}
	p.Annotations["kuik.enix.io/notes"] = strings.Repeat("n", 250<<10)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "fat", Image: "registry.example/" + strings.Repeat("x", 512<<10)})
	p.Spec.NodeSelector = map[string]string{"bench.example/nothing": "matches"}
	return p
}

// tail is the end of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
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

func counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(time.Millisecond)
}
