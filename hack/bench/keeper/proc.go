package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
		"--status-interval=1s", "--pacer-rate=10000", "--pacer-burst=10000")
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

// tail is the end of the keeper's log.
func (k *keeperProc) tail() string {
	_ = k.log.Sync()
	return benchutil.Tail(k.log.Name())
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

// mem is a reading of the keeper's memory.
type mem struct{ rss, hwm, heap int64 }

func (k *keeperProc) memory(ctx context.Context) (mem, error) {
	rss, hwm, err := benchutil.ProcMemory(k.cmd.Process.Pid)
	if err != nil {
		return mem{}, err
	}
	m, err := k.scrape(ctx)
	if err != nil {
		return mem{}, err
	}
	return mem{rss: rss, hwm: hwm, heap: int64(m["go_memstats_heap_inuse_bytes"])}, nil
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
