package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil/kuikenv"
)

// webhookProcess is kuik's webhook binary running under the chart's identity.
type webhookProcess struct {
	cmd         *exec.Cmd
	dir         string
	certDir     string
	port        int
	args        map[string]string
	metricsAddr string
	pprofAddr   string // serves net/http/pprof, when -profile is set
	exited      chan struct{}
}

func startWebhook(ctx context.Context, cp *testenv.ControlPlane, chart *kuikenv.Chart, port int) (*webhookProcess, error) {
	dir, err := os.MkdirTemp("", "kuik-bench-admission-")
	if err != nil {
		return nil, err
	}
	w := &webhookProcess{dir: dir, port: port, exited: make(chan struct{})}
	bin, err := benchutil.BuildBinary(ctx, dir, "./cmd/webhook")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// The chart's identity: a client certificate of its ServiceAccount's user and groups, as
	// the API server gives a real ServiceAccount token.
	sa, err := chart.ServiceAccount(kuikenv.ComponentWebhook)
	if err != nil {
		return nil, err
	}
	user, err := cp.CA.ClientPair("system:serviceaccount:"+chart.Namespace+":"+sa, "system:serviceaccounts", "system:serviceaccounts:"+chart.Namespace)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "webhook.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, cp.Config().Host, cp.CA.PEM, user); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	w.certDir = certDir
	pair, err := cp.CA.ServingPair()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	if err := pair.WriteFiles(certDir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	if w.args, err = chart.Args(kuikenv.ComponentWebhook); err != nil {
		return nil, err
	}
	if w.metricsAddr, err = kuikenv.FreeAddr(); err != nil {
		return nil, err
	}
	health, err := kuikenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	// The chart's arguments, with this machine's addresses and files.
	args := maps.Clone(w.args)
	args["kubeconfig"] = kubeconfig
	args["cert-dir"] = certDir
	args["webhook-bind-address"] = "127.0.0.1"
	args["webhook-port"] = strconv.Itoa(port)
	args["metrics-bind-address"] = w.metricsAddr
	args["health-probe-bind-address"] = health
	if *flagProfile != "" {
		if w.pprofAddr, err = kuikenv.FreeAddr(); err != nil {
			return nil, err
		}
		args["pprof-bind-address"] = w.pprofAddr
	}
	var argv []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		argv = append(argv, "--"+k+"="+args[k])
	}
	log, err := os.Create(filepath.Join(dir, "webhook.log"))
	if err != nil {
		return nil, err
	}
	w.cmd = exec.Command(bin, argv...)
	w.cmd.Stdout, w.cmd.Stderr = log, log
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-w.exited:
			return false, fmt.Errorf("the webhook exited (log %s)", log.Name())
		default:
		}
		return benchutil.GetOK(ctx, "http://"+health+"/readyz") == nil, nil
	})
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("the webhook never turned ready: %w", err)
	}
	return w, nil
}

func (w *webhookProcess) stop() {
	if w.cmd != nil && w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
}

// cpu is the webhook's user+system CPU time so far.
func (w *webhookProcess) cpu() (time.Duration, error) {
	return benchutil.ProcCPU(w.cmd.Process.Pid)
}

func (w *webhookProcess) scrape(ctx context.Context) (benchutil.Metrics, error) {
	return benchutil.Scrape(ctx, "http://"+w.metricsAddr+"/metrics")
}
