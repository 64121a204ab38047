// Command demo runs kuik on a real single-node cluster, end to end, for a person to look at:
//
//	go run ./hack/demo up     # make demo
//	go run ./hack/demo down   # make demo-down
//
// up starts, detached, a process holding a node (internal/testnode: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd, the kubelet and kube-proxy in network,
// mount and PID namespaces of its own), builds kuik's images from source, installs the chart
// with them (internal/kuiknode), starts a registry with basic authentication holding a tiny
// image, applies an ImageAlternative whose upstream is down, and shows a user's pod routed to
// the private registry and Running through the Secret the syncer injected, and the same pod
// without kuik stuck in ImagePullBackOff. Everything keeps running until `down`, which ends
// that process: the node goes with its namespaces, and the process undoes what is left on the
// host (cgroups, its directories).
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
	"github.com/enix/kuik/internal/testnode"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demo up|down")
		os.Exit(2)
	}
	// The detached process holding the node (and, started again by testnode, its namespaces).
	if os.Args[1] == "node" {
		os.Exit(testnode.Main(testnode.Options{}, func(ctx context.Context, n *testnode.Node) int {
			if err := serve(ctx, n, stateDir()); err != nil {
				fmt.Printf("demo: failed: %v\n", err)
				return 1
			}
			return 0
		}))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, stateDir())
	case "down":
		err = down(stateDir())
	default:
		err = errors.New("usage: demo up|down")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// stateDir holds the demo's binary, kubeconfig, kubectl wrapper and logs.
func stateDir() string {
	if d := os.Getenv("KUIK_DEMO_DIR"); d != "" {
		return d
	}
	return filepath.Join(testenv.RepoRoot(), "_output", "demo")
}
