// Command badinput sends bad input to kuik through a real API server (internal/testenv), with
// kuik's webhook (in-process, under the chart's identity, RBAC and webhook configurations,
// kuikenv.StartWebhook) and secret-syncer (in-process, under its ServiceAccount) running:
//
//  1. a flood of routing resources at the schema's limits: R ImageAlternatives of 32 entries
//     (the last one on a private registry, the 31 before it down) and R ImageMirrors of 64
//     excludeImages; then bad routing resources, each of which must be refused at admission
//     with a message naming the field;
//  2. pods: 100 containers each, all covered by the flood; images of 4 KiB references; invalid
//     UTF-8 in kuik's annotations (kuik.enix.io/*), sent as protobuf so the bytes reach the API
//     server as they are, and as JSON; annotations just under the API server's 256 KiB limit on
//     a covered pod; plain uncovered pods (the floor); and pods under all R mirrors at once;
//  3. Secrets referenced by secretRef: one of ~1 MiB (thousands of entries) and ones with
//     undecodable entries (not base64, no colon, numbers for strings, a Secret that is no JSON
//     at all), used by Always resources and by the flood's private entries.
//
// It prints the admission latency per kind of pod (p50/p99/max, created through the API
// server, against the floor and the webhook's timeoutSeconds and admission budget) and the
// webhook's own admission-duration histogram. It exits non-zero when an outcome is wrong: kuik
// not ready or gone, a pod or a valid resource refused, a bad resource admitted or refused
// without naming the field, a kuik-inject-* Secret that does not decode as dockerconfigjson, a
// patched pod whose annotations are not valid UTF-8 or whose kuik annotations are not JSON.
// Creations slower than the webhook's timeoutSeconds are counted and printed, not failed.
//
//	go run ./hack/badinput            # R=200, 20 pods of 100 containers per kind
//	go run ./hack/badinput -smoke     # R=20, 3 pods per kind (< 2 min)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
)

const crns = "kuik-system"

var (
	flagSmoke     = flag.Bool("smoke", false, "small sizes for CI: -resources 20 -pods 3")
	flagResources = flag.Int("resources", 200, "ImageAlternatives of 32 entries, and as many ImageMirrors of 64 excludeImages")
	flagPods      = flag.Int("pods", 20, "pods per kind")
	flagWorkers   = flag.Int("workers", 8, "concurrent creations")
	flagProfile   = flag.String("cpuprofile", "", "write a CPU profile of the pods phase (kuik in-process) to this file")
)

func main() {
	flag.Parse()
	if *flagSmoke {
		*flagResources, *flagPods = 20, 3
	}
	ctrllog.SetLogger(logr.Discard())
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "badinput: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("\nbadinput: every outcome correct")
}

// run follows the method: kuik as the chart installs it, then each phase of bad input, then
// the checks of what kuik wrote; every wrong outcome is collected and reported at the end.
func run(ctx context.Context) (err error) {
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
	if err := w.secrets(ctx); err != nil {
		return err
	}
	k, err := w.startKuik(ctx, cp)
	if err != nil {
		return err
	}
	defer k.stop()

	// 1. Routing resources: the flood, then the bad ones.
	if err := w.routingFlood(ctx); err != nil {
		return err
	}
	w.badRouting(ctx)
	// 2. Pods.
	stopProfile, err := startProfile()
	if err != nil {
		return err
	}
	if err := w.pods(ctx, k.timeout, k.budget); err != nil {
		return err
	}
	stopProfile()
	// 3-5. What kuik wrote, whether it still runs, and its own histogram.
	if err := w.checkSecrets(ctx); err != nil {
		return err
	}
	if err := w.checkPods(ctx); err != nil {
		return err
	}
	w.checkAlive(ctx, "at the end")
	histogram()
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return w.fail.err()
}

// startProfile starts the CPU profile of -cpuprofile, if any.
func startProfile() (stop func(), err error) {
	if *flagProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(*flagProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	return pprof.StopCPUProfile, nil
}

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(time.Millisecond)
}
