package testnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/enix/kuik/internal/testenv"
)

// skipReason says why the node cannot run here; set by Run when it does not start one.
var skipReason string

// Run starts a node for a test package, runs its tests on it and stops it. Use it from
// TestMain:
//
//	var node *testnode.Node
//	func TestMain(m *testing.M) { os.Exit(testnode.Run(m, testnode.Options{}, &node)) }
//
// and begin each test with testnode.Require(t, node). Where the node cannot run (not Linux,
// not root, a binary missing) the tests skip with the reason, or fail when KUIK_NODE_REQUIRED=1.
// Under -short nothing runs.
func Run(m *testing.M, opts Options, into **Node) int {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "testnode: -short: skipping tests that need a node")
		return 0
	}
	switch os.Getenv(roleEnv) {
	case roleInit:
		return initMain()
	case roleNode:
		return nodeMain(m, opts, into)
	}
	if reason := unavailable(); reason != "" {
		if os.Getenv(requiredEnv) == "1" {
			fmt.Fprintf(os.Stderr, "testnode: %s=1 but the node cannot run here: %s\n", requiredEnv, reason)
			return 1
		}
		fmt.Fprintf(os.Stderr, "testnode: skipping the node tests: %s\n", reason)
		skipReason = reason
		return m.Run()
	}
	return hostMain()
}

func nodeMain(m *testing.M, opts Options, into **Node) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	n, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		return 1
	}
	*into = n
	for _, t := range n.Timings {
		fmt.Fprintf(os.Stderr, "testnode: %-40s %6.2fs\n", t.Name, t.Since.Seconds())
	}
	return testenv.RunThenStop(m, n.Stop)
}

// Require skips the test, with the reason, when Run could not start a node here.
func Require(t testing.TB, n *Node) *Node {
	t.Helper()
	if n == nil {
		if skipReason == "" {
			t.Fatal("testnode: no node: call testnode.Run from TestMain")
		}
		t.Skip("testnode: " + skipReason)
	}
	return n
}
