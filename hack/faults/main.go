// Command faults runs the control-plane faults of the campaign (issue 11, rows 1–3) against a
// local control plane (internal/testenv) and real secret-syncer binaries (built from
// ./cmd/secret-syncer, run as subprocesses with the chart's flags, under the chart's
// ServiceAccount with a real token):
//
//	apiserver-kill  kube-apiserver SIGKILLed in the middle of an Always convergence over N
//	                namespaces and started again on the same etcd: the syncer recovers without
//	                a restart, every Secret ends correct; time to converge after the return.
//	syncer-kill     the syncer SIGKILLed in the middle of the convergence and started again:
//	                every pair converges; apply requests and Secret writes per pair.
//	leader-kill     two replicas with leader election, the leader SIGKILLed: takeover time, only
//	                one replica writes at a time, OnFailure entries kept through their retention
//	                (and the Secret written just before the kill: is it ever decided again?).
//	all             the three, each on a control plane of its own.
//
// It prints its figures against a floor measured in the same run and asserts nothing about
// timings; it exits non-zero when an outcome is wrong (a Secret missing or wrong, a pair
// written more than once, a syncer that had to be restarted, a retained entry lost).
//
//	go run ./hack/faults all            # N=2000
//	go run ./hack/faults -smoke all     # N=50, for CI
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
)

const crns = "kuik-system"

var (
	flagNamespaces = flag.Int("namespaces", 2000, "namespaces of the Always convergence")
	flagOutage     = flag.Duration("outage", 5*time.Second, "apiserver-kill: how long kube-apiserver stays down")
	flagRetention  = flag.Duration("retention", 45*time.Second, "leader-kill: the syncers' --retention (must exceed the takeover, ~15-17s)")
	flagSmoke      = flag.Bool("smoke", false, "small sizes for CI: 50 namespaces, a 3s outage, a 25s retention; the faults run at once")
	flagKeepLogs   = flag.Bool("keep", false, "keep the syncers' logs and the control plane's directory")
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./hack/faults [flags] apiserver-kill|syncer-kill|leader-kill|all\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if *flagSmoke {
		*flagNamespaces, *flagOutage, *flagRetention = 50, 3*time.Second, 25*time.Second
	}
	run, ok := selectFaults(flag.Args())
	if !ok {
		flag.Usage()
		os.Exit(2)
	}
	start := time.Now()
	bin, cleanup, err := buildSyncer(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	defer cleanup()
	fmt.Printf("secret-syncer built in %s\n", time.Since(start).Round(time.Millisecond))
	failed := runFaults(run, bin)
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		cleanup()
		fmt.Fprintf(os.Stderr, "faults: failed: %s\n", strings.Join(failed, ", "))
		os.Exit(1)
	}
}

// faults are the rows this program runs, by name.
var faults = map[string]func(context.Context, string, io.Writer) error{
	"apiserver-kill": apiserverKill,
	"syncer-kill":    syncerKill,
	"leader-kill":    leaderKill,
}

// selectFaults is the faults named by the one argument ("all": the three, in row order).
func selectFaults(args []string) ([]string, bool) {
	if len(args) != 1 {
		return nil, false
	}
	if args[0] == "all" {
		return []string{"apiserver-kill", "syncer-kill", "leader-kill"}, true
	}
	return args, faults[args[0]] != nil
}

// runFaults runs each fault on a control plane of its own and returns the failed ones. Under
// -smoke they run at once, their output printed in order; otherwise one after the other, so
// that their figures do not mix.
func runFaults(run []string, bin string) (failed []string) {
	outs := make([]bytes.Buffer, len(run))
	errs := make([]error, len(run))
	var wg sync.WaitGroup
	for i, f := range run {
		var w io.Writer = os.Stdout
		if *flagSmoke {
			w = &outs[i]
		}
		fn := func() {
			printf(w, "\n== %s (N=%d)\n", f, *flagNamespaces)
			if errs[i] = faults[f](context.Background(), bin, w); errs[i] != nil {
				printf(w, "FAILED %s: %v\n", f, errs[i])
			}
		}
		if *flagSmoke {
			wg.Go(fn)
		} else {
			fn()
		}
	}
	wg.Wait()
	for i, f := range run {
		_, _ = os.Stdout.Write(outs[i].Bytes())
		if errs[i] != nil {
			failed = append(failed, f)
		}
	}
	return failed
}

// buildSyncer builds ./cmd/secret-syncer into a directory cleanup removes.
func buildSyncer(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "kuik-faults-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	bin, err := benchutil.BuildBinary(ctx, dir, "./cmd/secret-syncer")
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return bin, cleanup, nil
}

func since(t0, t time.Time) string { return t.Sub(t0).Round(time.Millisecond).String() }

var errOutcome = errors.New("outcome wrong")

// printf writes to a fault's output; a failed write to stdout or a buffer is not worth a stop.
func printf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
