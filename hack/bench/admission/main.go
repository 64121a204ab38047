// Command admission measures pod admission as users see it: pods created through a real
// kube-apiserver (internal/testenv) per second, and the p50/p99 latency of each create, with
// kuik's mutating webhook installed, with it not installed (the floor), with a no-op webhook
// installed in its place (controller-runtime's webhook server admitting every pod unchanged,
// behind the same webhook configuration: what calling any webhook costs), and with a
// same-patch webhook (the no-op one returning, for each scenario's pods, the JSON patch kuik's
// webhook answered for one of them: what calling a webhook and applying kuik's patch costs),
// on the same control plane in the same run, for
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
// /proc/<pid>/stat) over the installed batches and its RSS are reported, and the other
// webhooks' CPU beside it; so are, per pod, the API server's calls of the webhook and their
// time as it measures them, its admit passes (a changed pod is admitted twice over, for
// reinvocation), and kuik's admissions, handler time and probes.
//
// Each round runs the four modes in another order (a balanced Latin square over four rounds)
// to spread the drift of a shared machine over all. Pods are never scheduled (there is no
// node): creation is what `kubectl apply` waits for. It prints figures and ratios; it asserts
// no timing, but it checks every admitted pod (rewritten exactly when kuik or the same-patch
// webhook is installed and kuik must rewrite it; the same-patch webhook's pods identical to
// kuik's, the no-op webhook's to the floor's) and exits non-zero when one is wrong.
//
// Run it with go run ./hack/bench/admission (-pods 120 -rounds 3 for a smoke run).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
)

const crns = "kuik-system"

var (
	flagPods        = flag.Int("pods", 2000, "pods per scenario and per mode (installed, not installed), spread over the rounds")
	flagConcurrency = flag.Int("concurrency", 8, "pods created at once")
	flagRounds      = flag.Int("rounds", 8, "rounds; each runs every scenario in every mode, in a rotating order")
	flagScenarios   = flag.String("scenarios", "", "run only the scenarios whose name this regular expression matches (all by default)")

	flagMatchConditions = flag.Bool("match-conditions", false, "give kuik's pod webhook the matchConditions the secret-syncer's leader writes for the routing resources (webhook.mutating.matchConditions): pods no resource covers are not sent")

	flagProfile = flag.String("profile", "", "directory to write CPU profiles of kuik's webhook and of the no-op and same-patch ones into, one a second of each batch they serve (go tool pprof -top DIR/kuik-covered-rewritten-*)")

	flagServeNoop   = flag.Bool("serve-noop", false, "serve the no-op webhook (this program runs itself so)")
	flagNoopPort    = flag.Int("noop-port", 0, "port of the no-op webhook")
	flagNoopCertDir = flag.String("noop-cert-dir", "", "tls.crt and tls.key of the no-op webhook")
	flagNoopMetrics = flag.String("noop-metrics-addr", "", "address the no-op webhook serves its metrics on")
	flagNoopPprof   = flag.String("noop-pprof-addr", "", "address the no-op webhook serves net/http/pprof on")
	flagNoopPatches = flag.String("noop-patches", "", "serve the same-patch webhook: the patches, by namespace and image, written by the main program")
)

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *flagServeNoop {
		if *flagNoopPprof != "" {
			servePprof(*flagNoopPprof)
		}
		if err := serveNoop(*flagNoopPort, *flagNoopCertDir, *flagNoopPatches, *flagNoopMetrics); err != nil {
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

// run follows the method: a control plane, kuik's webhook as the chart installs it and the
// no-op webhook beside it, the routing resources, an unmeasured warm-up, then the rounds, each
// running every scenario in every mode, and the report.
func run(ctx context.Context) (err error) {
	if *flagPods < *flagRounds || *flagConcurrency < 1 || *flagRounds < 1 {
		return errors.New("-pods must be at least -rounds, -concurrency and -rounds positive")
	}
	if *flagProfile != "" {
		if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
			return err
		}
	}
	start := time.Now()
	tb := &benchutil.TB{}
	defer tb.Close()
	defer benchutil.Recover(&err)

	cp, err := benchutil.StartControlPlane(ctx, os.Stdout, testenv.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	s, err := newStack(ctx, cp, tb)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := s.routingResources(ctx); err != nil {
		return err
	}
	scenarios, err := s.scenarios()
	if err != nil {
		return err
	}
	if err := s.namespaces(ctx, len(scenarios)); err != nil {
		return err
	}
	if err := s.warmUp(ctx, scenarios); err != nil {
		return err
	}
	if err := s.samePatch(ctx, scenarios); err != nil {
		return err
	}
	res, err := s.rounds(ctx, scenarios, start)
	if err != nil {
		return err
	}
	if err := s.report(ctx, scenarios, res); err != nil {
		return err
	}
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return nil
}
