// Command keeper benchmarks the keeper binary (cmd/keeper, a subprocess) on a local control
// plane (internal/testenv) with two real registries (internal/testutil): the source, holding
// -images tiny images, and the keep-enabled mirror.
//
//  1. idle: the keeper's RSS with no pod and no ImageMirror, after -settle (the floor);
//  2. convergence: -pods pods (never scheduled: there is no node) spread over -namespaces
//     namespaces, running the -images images round-robin, and one ImageMirror with spec.keep;
//     the time until status.keep.present reaches -images, then the RSS and its peak, and their
//     excess over the idle floor (issue 21's goal: RSS < 150 MiB at 50,000 pods and 5,000
//     images);
//  3. an unchanged resync: with every image kept, from the end of one self-heal pass to the end
//     of the next (several plan passes, one of them triggered by a pod update that changes no
//     image), the registry requests the keeper sends: the goal is 0 to the source, 0 writes
//     and one HEAD per kept tag to the mirror.
//
// The source is reached as src.test through an HTTP proxy ($HTTP_PROXY of the subprocess; the
// mirror and the API server, on loopback, bypass it): a mirror cannot name an image whose host
// has a port. An ImageAlternative whose one repository no pod runs declares src.test insecure.
//
// It prints figures and ratios and asserts nothing about them; it exits non-zero when an outcome
// is wrong (the mirror never holds every image). Run it with go run ./hack/bench/keeper; the
// defaults are issue 21's sizes and take several minutes; -pods 500 -images 50 is a smoke.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
)

const releaseNamespace = "kuik-system"

var (
	flagPods          = flag.Int("pods", 50_000, "pods, spread over the namespaces, running the images round-robin")
	flagImages        = flag.Int("images", 5_000, "distinct images in the source, each run by some pod")
	flagNamespaces    = flag.Int("namespaces", 50, "namespaces the pods are spread over")
	flagCreateWorkers = flag.Int("create-workers", 32, "concurrency of the pod creation and image pushes, not measured")
	flagWorkers       = flag.Int("workers", 16, "the keeper's --workers")
	flagPlanInterval  = flag.Duration("plan-interval", 2*time.Second, "the keeper's --plan-interval")
	flagSelfHeal      = flag.Duration("self-heal-interval", 20*time.Second, "the keeper's --self-heal-interval: the resync window spans one")
	flagSettle        = flag.Duration("settle", 10*time.Second, "wait before reading the keeper's memory")
	flagVerbosity     = flag.Int("v", 0, "the keeper's log verbosity (its log is printed on a failure)")
	flagBin           = flag.String("bin", "", "a keeper binary to run instead of building ./cmd/keeper")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "keeper bench:", err)
		os.Exit(1)
	}
}

// timeout grows with the work: two minutes plus 20 ms per pod and 100 ms per image.
func timeout() time.Duration {
	return 2*time.Minute + time.Duration(*flagPods)*20*time.Millisecond + time.Duration(*flagImages)*100*time.Millisecond
}

// run follows the method: the control plane, the registries and the source's images, the
// keeper idle, then the pods and the mirror, convergence, memory, and the resync window.
func run(ctx context.Context) (err error) {
	if *flagImages < 1 || *flagPods < *flagImages || *flagNamespaces < 1 {
		return errors.New("-images must be positive, -pods at least -images, -namespaces positive")
	}
	start := time.Now()
	tb := &benchutil.TB{}
	defer tb.Close()
	defer benchutil.Recover(&err)

	cp, err := benchutil.StartControlPlane(ctx, os.Stdout, testenv.Options{CRDs: true})
	if err != nil {
		return err
	}
	defer cp.Stop()
	w, err := newWorld(ctx, cp, tb)
	if err != nil {
		return err
	}
	if err := w.pushImages(ctx); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "kuik-bench-keeper-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin := *flagBin
	if bin == "" {
		if bin, err = benchutil.BuildBinary(ctx, dir, "./cmd/keeper"); err != nil {
			return err
		}
	}
	k, err := startKeeper(ctx, bin, cp.Kubeconfig, dir, w.proxyURL)
	if err != nil {
		return err
	}
	defer k.stop()

	// 1. Idle.
	if err := k.ready(ctx, time.Minute); err != nil {
		return err
	}
	time.Sleep(*flagSettle)
	idle, err := k.memory(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\n== 1. Idle (no pod, no ImageMirror)\n%s\n", idle)

	// 2. Convergence.
	t0 := time.Now()
	if err := w.createPods(ctx); err != nil {
		return err
	}
	fmt.Printf("\n== 2. Convergence: %d pods in %d namespaces running %d images, created in %s\n",
		*flagPods, *flagNamespaces, *flagImages, time.Since(t0).Round(time.Second))
	w.src.Reset()
	w.mirror.Reset()
	t0 = time.Now()
	if err := w.createMirror(ctx); err != nil {
		return err
	}
	if err := w.waitPresent(ctx, k, timeout()); err != nil {
		return err
	}
	converged := time.Since(t0)
	fmt.Printf("status.keep.present = %d in %s (%.0f images/s); during it: %d source and %d mirror requests, %s uploaded\n",
		*flagImages, converged.Round(time.Millisecond), float64(*flagImages)/converged.Seconds(),
		len(w.src.Requests()), len(w.mirror.Requests()), benchutil.MiB(w.mirror.UploadedBytes()))
	if err := k.still(ctx, timeout()); err != nil {
		return err
	}
	time.Sleep(*flagSettle)
	full, err := k.memory(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%s (goal RSS < 150 MiB)\n", full)
	fmt.Printf("above idle: RSS +%s (%.2f× idle), peak +%s\n",
		benchutil.MiB(full.rss-idle.rss), benchutil.Ratio(full.rss, idle.rss), benchutil.MiB(full.hwm-idle.rss))
	if full.rss >= 150<<20 {
		fmt.Println("FINDING: RSS over the 150 MiB goal")
	}

	// 3. An unchanged resync.
	if err := w.resync(ctx, k); err != nil {
		return err
	}
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}
