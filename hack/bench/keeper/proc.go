package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
)

// keeperProc is the keeper binary run against the bench's control plane.
type keeperProc struct {
	cmd                  *exec.Cmd
	metrics, healthProbe int
	log                  *os.File
}

// startKeeper runs bin with the bench's intervals, a pacer no local registry limits, and
// $HTTP_PROXY set to the proxy that reaches src.test.
func startKeeper(ctx context.Context, bin, kubeconfig, dir, proxy string) (*keeperProc, error) {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return nil, err
	}
	k := &keeperProc{metrics: ports[0], healthProbe: ports[1]}
	k.cmd = exec.CommandContext(ctx, bin, "--kubeconfig="+kubeconfig, "--namespace="+releaseNamespace,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(k.metrics),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(k.healthProbe),
		"--workers="+strconv.Itoa(*flagWorkers),
		"--plan-interval="+flagPlanInterval.String(), "--self-heal-interval="+flagSelfHeal.String(),
		"--status-interval=1s", "-v="+strconv.Itoa(*flagVerbosity), "--pacer-rate=10000", "--pacer-burst=10000")
	k.cmd.Env = append(os.Environ(), "HTTP_PROXY="+proxy, "http_proxy="+proxy, "NO_PROXY=", "no_proxy=")
	if k.log, err = os.CreateTemp(dir, "keeper-*.log"); err != nil {
		return nil, err
	}
	k.cmd.Stdout, k.cmd.Stderr = k.log, k.log
	if err := k.cmd.Start(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *keeperProc) stop() {
	_ = k.cmd.Process.Kill()
	_ = k.cmd.Wait()
	_ = k.log.Close()
}

// tail is the keeper's own metrics and the end of its log, for a failure.
func (k *keeperProc) tail() string {
	_ = k.log.Sync()
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := k.scrape(ctx); err == nil {
		for _, series := range slices.Sorted(maps.Keys(m)) {
			if strings.HasPrefix(series, "kuik_keeper_") {
				fmt.Fprintf(&b, "%s %g\n", series, m[series])
			}
		}
	}
	return b.String() + benchutil.Tail(k.log.Name())
}

// ready waits for /readyz.
func (k *keeperProc) ready(ctx context.Context, limit time.Duration) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", k.healthProbe)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		return benchutil.GetOK(ctx, url) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the keeper never got ready: %w\n%s", err, k.tail())
	}
	return nil
}

func (k *keeperProc) scrape(ctx context.Context) (benchutil.Metrics, error) {
	return benchutil.Scrape(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", k.metrics))
}

// mem is a reading of the keeper's memory; heap is -1 when its /metrics has no Go collector.
type mem struct{ rss, hwm, heap int64 }

// String is the reading, for printing.
func (m mem) String() string {
	heap := "no go_memstats on its /metrics"
	if m.heap >= 0 {
		heap = benchutil.MiB(m.heap)
	}
	return fmt.Sprintf("RSS %s (peak %s), Go heap in use %s", benchutil.MiB(m.rss), benchutil.MiB(m.hwm), heap)
}

func (k *keeperProc) memory(ctx context.Context) (mem, error) {
	rss, hwm, err := benchutil.ProcMemory(k.cmd.Process.Pid)
	if err != nil {
		return mem{}, err
	}
	m, err := k.scrape(ctx)
	if err != nil {
		return mem{}, err
	}
	heap, ok := m["go_memstats_heap_inuse_bytes"]
	if !ok {
		heap = -1
	}
	return mem{rss: rss, hwm: hwm, heap: int64(heap)}, nil
}

// still waits until the copies and the queue stand still for two readings a second apart.
func (k *keeperProc) still(ctx context.Context, limit time.Duration) error {
	var last string
	same := 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		m, err := k.scrape(ctx)
		if err != nil {
			return false, nil
		}
		cur := fmt.Sprint(m.Sum("kuik_keeper_copies_total"), m.Sum("kuik_keeper_queue_depth"))
		if cur == last {
			same++
		} else {
			same = 0
		}
		last = cur
		return same >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("the keeper's copies never stood still: %w\n%s", err, k.tail())
	}
	return nil
}

// selfHealEnd waits until the self-heal checks counter is at least atLeast and has stood still
// for 1.5 s (the end of a pass), and returns it.
func (k *keeperProc) selfHealEnd(ctx context.Context, atLeast float64, limit time.Duration) (float64, error) {
	var last float64 = -1
	var since time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		m, err := k.scrape(ctx)
		if err != nil {
			return false, nil
		}
		cur := m.Sum("kuik_keeper_self_heal_checks_total")
		if cur != last {
			last, since = cur, time.Now()
			return false, nil
		}
		return cur >= atLeast && time.Since(since) >= 1500*time.Millisecond, nil
	})
	if err != nil {
		return 0, fmt.Errorf("no self-heal pass ended with %.0f checks or more (last %.0f): %w\n%s", atLeast, last, err, k.tail())
	}
	return last, nil
}
