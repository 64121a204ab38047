package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var listOne = metav1.ListOptions{Limit: 1}

// Run starts a control plane for a test package, runs its tests and stops it, also on SIGINT
// or SIGTERM. Use it from TestMain:
//
//	var cp *testenv.ControlPlane
//	func TestMain(m *testing.M) { os.Exit(testenv.Run(m, testenv.Options{}, &cp)) }
//
// Under -short (make test-unit) it runs nothing: every test of such a package needs the
// control plane. A fuzzing worker process (go test -fuzz) starts none: it runs only the fuzz
// target, which must not need one; the coordinating process still does, for the tests -run
// selects.
func Run(m *testing.M, opts Options, into **ControlPlane) int {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return m.Run()
	}
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "testenv: -short: skipping tests that need a control plane")
		return 0
	}
	cp, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	*into = cp
	return RunThenStop(m, cp.Stop)
}

// RunThenStop runs the tests and then stop, which also runs (and the process exits 130) on
// SIGINT or SIGTERM, so an interrupted run still tears down what it started.
func RunThenStop(m *testing.M, stop func()) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		stop()
		os.Exit(130)
	}()
	defer stop()
	return m.Run()
}
