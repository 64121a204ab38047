package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
)

// syncerProc is a secret-syncer subprocess.
type syncerProc struct {
	name    string
	p       *testenv.Process
	metrics int
	log     string
}

// startSyncer runs the secret-syncer binary with the chart's flags (leader election as the
// chart sets it, its retention), the syncer's token kubeconfig and extra flags, and waits until
// its metrics endpoint answers.
func (e *env) startSyncer(ctx context.Context, name string, extra ...string) (*syncerProc, error) {
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + e.kubeconfig,
		"--cluster-resource-namespace=" + e.chartArgs["cluster-resource-namespace"],
		"--leader-elect=" + e.chartArgs["leader-elect"],
		"--retention=" + e.chartArgs["retention"],
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[1]),
		"-v=1",
	}
	args = append(args, extra...)
	s := &syncerProc{name: name, metrics: ports[0], log: filepath.Join(e.dir, name+".log")}
	if s.p, err = testenv.StartProcess(name, exec.Command(e.bin, args...), s.log); err != nil {
		return nil, err
	}
	err = s.p.WaitFor(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := s.scrape(ctx)
		return err
	})
	if err != nil {
		s.p.Stop()
		return nil, err
	}
	return s, nil
}

// kill sends SIGKILL to the syncer's process group and waits for its exit.
func (s *syncerProc) kill() time.Time {
	_ = syscall.Kill(-s.p.Pid(), syscall.SIGKILL)
	<-s.p.Exited()
	return time.Now()
}

func (s *syncerProc) alive() bool {
	select {
	case <-s.p.Exited():
		return false
	default:
		return true
	}
}

func (s *syncerProc) scrape(ctx context.Context) (benchutil.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return benchutil.Scrape(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", s.metrics))
}

// applies is the syncer's count of successful Secret applies (-1 when it does not answer).
func (s *syncerProc) applies(ctx context.Context) float64 {
	m, err := s.scrape(ctx)
	if err != nil {
		return -1
	}
	return m[`kuik_secret_syncer_applies_total{result="success"}`]
}

// leader reports whether the syncer holds the lease, by controller-runtime's metric.
func (s *syncerProc) leader(ctx context.Context) bool {
	m, err := s.scrape(ctx)
	if err != nil {
		return false
	}
	for k, v := range m {
		if strings.HasPrefix(k, "leader_election_master_status") && v == 1 {
			return true
		}
	}
	return false
}

// waitApplies waits until the syncer's successful applies reach n.
func waitApplies(ctx context.Context, s *syncerProc, n float64, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !s.alive() {
			return false, fmt.Errorf("%s exited; log:\n%s", s.name, s.p.LogTail())
		}
		return s.applies(ctx) >= n, nil
	})
}

// waitLeader waits until the syncer holds the lease and returns when that was first seen.
func waitLeader(ctx context.Context, s *syncerProc, timeout time.Duration) (time.Time, error) {
	var t time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if s.leader(ctx) {
			t = time.Now()
			return true, nil
		}
		return false, nil
	})
	return t, err
}
