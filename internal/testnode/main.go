package testnode

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main runs body on a node from a program rather than a test binary (the demo). As with Run,
// the program starts itself again in the node's namespaces, with its own arguments; there the
// node starts, body runs with it until it returns or the program gets SIGINT or SIGTERM (ctx
// ends), and the node stops. The first process then undoes what the run left on the host. It
// returns the program's exit code.
func Main(opts Options, body func(ctx context.Context, n *Node) int) int {
	switch os.Getenv(roleEnv) {
	case roleInit:
		return initMain()
	case roleNode:
		return programMain(opts, body)
	}
	if reason := unavailable(); reason != "" {
		fmt.Fprintf(os.Stderr, "testnode: the node cannot run here: %s\n", reason)
		return 1
	}
	return hostMain()
}

func programMain(opts Options, body func(ctx context.Context, n *Node) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	n, err := Start(startCtx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		return 1
	}
	defer n.Stop()
	for _, t := range n.Timings {
		fmt.Fprintf(os.Stderr, "testnode: %-40s %6.2fs\n", t.Name, t.Since.Seconds())
	}
	return body(ctx, n)
}

// CleanStaleRuns removes what runs killed before they could clean up left on the host
// (cgroups, run directories), as every run does when it starts, and reports it.
func CleanStaleRuns() []string { return cleanupStale(stateRoot()) }
