package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/enix/kuik/internal/benchutil"
)

// report prints the figures of every cell, their ratios against the floor and the no-op
// webhook, the webhooks' CPU and kuik's memory; it fails when kuik answered an admission with
// an internal error.
func (s *stack) report(ctx context.Context, scenarios []scenario, res *results) error {
	rss, hwm, err := benchutil.ProcMemory(s.wh.cmd.Process.Pid)
	if err != nil {
		return err
	}
	metrics, err := s.wh.scrape(ctx)
	if err != nil {
		return err
	}

	printCells(scenarios, res)
	printRatios(scenarios, res)
	printCounters(scenarios, res, s.askedPatches)
	printCPU(scenarios, res)
	fmt.Printf("\nkuik's webhook: %s CPU while not installed; RSS %s (peak %s), Go heap in use %s\n",
		res.idle.Round(time.Millisecond), benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(int64(metrics["go_memstats_heap_inuse_bytes"])))
	fmt.Printf("kuik's metrics: admissions patched %.0f, unchanged %.0f, error %.0f; probes to the hanging upstream %.0f (connections %d)\n",
		metrics[`kuik_webhook_admissions_total{result="patched",webhook="mutate-pods"}`], metrics[`kuik_webhook_admissions_total{result="unchanged",webhook="mutate-pods"}`],
		metrics[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`], metrics.Sum(`kuik_registry_probes_total{registry="`+s.silent.Host), s.silent.Accepted())
	if e := metrics[`kuik_webhook_admissions_total{result="error",webhook="mutate-pods"}`]; e > 0 {
		return fmt.Errorf("the webhook answered %.0f admissions with an internal error", e)
	}
	fmt.Printf("every admitted pod checked: rewritten exactly when kuik or the same-patch webhook was installed and kuik had to; the same-patch webhook's pods identical to kuik's, the no-op webhook's to the floor's\n")
	return nil
}

// printCells prints each scenario's throughput, latency and webhook CPU per mode.
func printCells(scenarios []scenario, res *results) {
	fmt.Printf("\n== 7. Pod admission through the API server (%d pods per cell, %d creators, %d rounds in rotating order)\n", res.per**flagRounds, *flagConcurrency, *flagRounds)
	fmt.Printf("%-24s %-22s %7s %9s %9s %9s %13s\n", "scenario", "mutating webhook", "pods/s", "p50", "p99", "max", "webhook CPU")
	for i, s := range scenarios {
		for _, m := range modes {
			t := &res.tallies[m][i]
			lat := benchutil.Sorted(t.lat)
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
			if n := benchutil.Over(res.tallies[m][i].lat, time.Second); n > 0 {
				counts = append(counts, fmt.Sprintf("%d with %s", n, m))
			}
		}
		if len(counts) > 0 {
			fmt.Printf("%s: pods over 1s: %s\n", s.name, strings.Join(counts, ", "))
		}
	}
}

// printRatios prints kuik and the no-op webhook against the floor and each other, and kuik
// against the same-patch webhook.
func printRatios(scenarios []scenario, res *results) {
	fmt.Printf("\nratios of p50 (p99) and throughput\n")
	fmt.Printf("%-24s %19s %19s %19s %19s %19s   %s\n", "scenario", "kuik / none", "noop / none", "kuik / noop", "same / noop", "kuik / same", "goal")
	for i, s := range scenarios {
		cell := func(a, b mode) string {
			x, y := &res.tallies[a][i], &res.tallies[b][i]
			la, lb := benchutil.Sorted(x.lat), benchutil.Sorted(y.lat)
			tput := (float64(len(la)) / x.wall.Seconds()) / (float64(len(lb)) / y.wall.Seconds())
			return fmt.Sprintf("%.2fx (%.2fx) %.2fx", benchutil.Ratio(pct(la, 50), pct(lb, 50)), benchutil.Ratio(pct(la, 99), pct(lb, 99)), tput)
		}
		fmt.Printf("%-24s %19s %19s %19s %19s %19s   %s\n", s.name, cell(modeKuik, modeNone), cell(modeNoop, modeNone), cell(modeKuik, modeNoop),
			cell(modeSame, modeNoop), cell(modeKuik, modeSame), s.goal)
	}
}

// printCounters prints, per pod created, what the API server and kuik counted: the webhook's
// calls and their mean time as the API server measures them, its time evaluating the pod
// webhook's matchConditions, the API server's admit passes,
// kuik's admissions, their mean time in its handler and its probes; and kuik's patch of each
// scenario, which the same-patch webhook returns.
func printCounters(scenarios []scenario, res *results, patches map[int][]byte) {
	fmt.Printf("\nper pod created, the API server: time serving it, in its admit step, evaluating kuik's matchConditions (it records that time only when they exclude the pod), webhook calls (their mean time; the webhook server's own time), admit passes; kuik: admissions (their mean time in its handler), probes\n")
	fmt.Printf("%-24s %-22s %10s %10s %10s %22s %10s %7s %24s %8s\n", "scenario", "mutating webhook", "served in", "admit step", "conditions", "webhook calls", "its server", "passes", "kuik admissions", "probes")
	for i, s := range scenarios {
		for _, m := range modes {
			t := &res.tallies[m][i]
			pods := float64(len(t.lat))
			kuik := "-"
			probes := "-"
			if m == modeKuik {
				kuik = fmt.Sprintf("%.2f (%s)", t.kuikCalls/pods, mean(t.kuikSeconds, t.kuikCalls))
				probes = fmt.Sprintf("%.3f", t.probes/pods)
			}
			fmt.Printf("%-24s %-22s %10s %10s %10s %22s %10s %7.2f %24s %8s\n", s.name, m, mean(t.serveSeconds, pods), mean(t.admitSeconds, pods), mean(t.conditionSeconds, pods),
				fmt.Sprintf("%.2f (%s)", t.webhookCalls/pods, mean(t.webhookSeconds, t.webhookCalls)), mean(t.hookSeconds, t.webhookCalls), t.passes/pods, kuik, probes)
		}
	}
	for i, s := range scenarios {
		if len(patches[i]) > 0 {
			fmt.Printf("kuik's patch for %s (%d bytes): %s\n", s.name, len(patches[i]), patches[i])
		}
	}
}

// mean is seconds/n as a duration, "-" for n = 0.
func mean(seconds, n float64) string {
	if n == 0 {
		return "-"
	}
	return time.Duration(seconds / n * float64(time.Second)).Round(10 * time.Microsecond).String()
}

// printCPU prints each installed webhook's CPU per admission.
func printCPU(scenarios []scenario, res *results) {
	for _, m := range []mode{modeNoop, modeSame, modeKuik} {
		var wall, cpu time.Duration
		var pods int
		for i := range scenarios {
			wall += res.tallies[m][i].wall
			cpu += res.tallies[m][i].cpu
			pods += len(res.tallies[m][i].lat)
		}
		fmt.Printf("\n%s: CPU %s over %d admissions in %s (%.0f µs/pod, %.1f%% of a core at %.0f pods/s)", m,
			cpu.Round(time.Millisecond), pods, wall.Round(time.Millisecond), float64(cpu.Microseconds())/float64(pods),
			100*cpu.Seconds()/wall.Seconds(), float64(pods)/wall.Seconds())
	}
}

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(10 * time.Microsecond)
}
