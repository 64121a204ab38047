// Command demo runs kuik on a local control plane, end to end, for a person to look at:
//
//	go run ./hack/demo up     # make demo
//	go run ./hack/demo down   # make demo-down
//
// up builds etcd, kube-apiserver and kube-controller-manager (cached), starts them on
// 127.0.0.1, installs the chart with the Helm SDK, runs the webhook and the secret-syncer as
// local processes under the chart's ServiceAccount identities (so the chart's RBAC and the
// ValidatingAdmissionPolicy really apply), starts a local OCI registry with basic auth holding
// a tiny image, applies an ImageAlternative with a secretRef, creates a pod whose upstream is
// unreachable, and prints what kuik did. Everything keeps running until `down`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/enix/kuik/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo up|down|registry")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, stateDir())
	case "down":
		err = down(stateDir())
	case "registry":
		err = serveRegistry(ctx, os.Args[2:])
	default:
		err = errors.New("usage: demo up|down|registry")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// stateDir holds the demo's cluster, binaries, certificates, kubeconfigs and logs.
func stateDir() string {
	if d := os.Getenv("KUIK_DEMO_DIR"); d != "" {
		return d
	}
	return filepath.Join(testenv.RepoRoot(), "_output", "demo")
}

func down(dir string) error {
	if err := testenv.StopDetached(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	fmt.Println("demo: stopped, and", dir, "removed")
	return nil
}
