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
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
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

// timeout grows with the work: a minute plus 20ms per object.
func timeout(objects int) time.Duration {
	return time.Minute + time.Duration(objects)*20*time.Millisecond
}

// run follows the method: a control plane with the namespaces, then the phases in order,
// each printing its figures next to its floor.
func run(ctx context.Context) error {
	start := time.Now()
	b, err := newBench(ctx)
	if err != nil {
		return err
	}
	defer b.cp.Stop()
	if err := b.createNamespaces(ctx); err != nil {
		return err
	}
	// 1. Always convergence, between two floors; the syncer runs in-process from here to phase 4.
	sy, rv, err := b.convergence(ctx)
	if err != nil {
		return err
	}
	defer sy.stop()
	// 2. Writes when nothing changed.
	if err := b.unchangedWrites(ctx, sy, rv); err != nil {
		return err
	}
	// 3. OnFailure latency: pod admitted → Secret present.
	if err := b.onFailureLatency(ctx); err != nil {
		return err
	}
	// 4. The peer, next to kuik and the floor.
	if *flagPeerCmd != "" {
		if err := b.peer(ctx, &sy.applyRequests, sy.stop, sy.done); err != nil {
			return err
		}
	} else {
		sy.stop()
		if err := <-sy.done; err != nil {
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

// plainPod is a pod no resource rewrote, of a realistic size (~3 KiB).
func plainPod(ns, name string, i int) *corev1.Pod {
	return benchutil.PlainPod(ns, name, "registry.example/team/app:v"+strconv.Itoa(i%13), i)
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

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(time.Millisecond)
}
