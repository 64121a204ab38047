package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
)

// Lines the node process prints when it is done setting up, or failed.
const (
	readyLine  = "demo: ready"
	failedLine = "demo: failed"
)

func up(ctx context.Context, dir string) error {
	start := time.Now()
	if err := down(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	// A binary of its own: go run's disappears when up returns.
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "bin", "demo"), "./hack/demo")
	build.Dir, build.Stdout, build.Stderr = testenv.RepoRoot(), os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the demo: %w", err)
	}
	fmt.Println("==> starting the node (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy) in namespaces of its own")
	if err := testenv.SpawnDetached(dir, "node", filepath.Join(dir, "bin", "demo"), "node"); err != nil {
		return err
	}
	pid, err := nodePid(dir)
	if err != nil {
		return err
	}
	if err := follow(ctx, filepath.Join(dir, "node.log"), pid); err != nil {
		return fmt.Errorf("%w; the node's logs: %s — `make demo-down` cleans up", err, filepath.Join(dir, "node.log"))
	}
	// The node's network namespace is its first child's, PID 1 of its namespaces.
	initPid, err := childInOtherNetns(pid)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "netns.pid"), []byte(strconv.Itoa(initPid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the node's namespaces: %w", err)
	}
	fmt.Printf("demo: up in %.0fs\n", time.Since(start).Seconds())
	return nil
}

// follow prints the node process's log as it grows, until it says it is ready (nil), failed,
// or the process exits.
func follow(ctx context.Context, path string, pid int) error {
	var off int64
	var partial string
	for {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("reading the node's log: %w", err)
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return fmt.Errorf("reading the node's log: %w", err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading the node's log: %w", err)
		}
		off += int64(len(b))
		lines := strings.Split(partial+string(b), "\n")
		partial, lines = lines[len(lines)-1], lines[:len(lines)-1]
		for _, l := range lines {
			fmt.Println(l)
			switch {
			case l == readyLine:
				return nil
			case strings.HasPrefix(l, failedLine):
				return errors.New("the demo failed")
			}
		}
		if syscall.Kill(pid, 0) != nil {
			return errors.New("the node process exited")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodePid(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		return 0, fmt.Errorf("reading the node's pid: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("no pid recorded for the node")
	}
	pid, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		return 0, fmt.Errorf("reading the node's pid: %w", err)
	}
	return pid, nil
}

// childInOtherNetns finds the child of pid that lives in another network namespace than ours.
func childInOtherNetns(pid int) (int, error) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("reading our network namespace: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && ns != self {
			return child, nil
		}
	}
	return 0, fmt.Errorf("no process of pid %d in the node's network namespace", pid)
}

// down ends the node process (SIGTERM: it stops the node, its namespaces go, and it undoes
// what is left on the host), then removes the demo's directory.
func down(dir string) error {
	if pid, err := nodePid(dir); err == nil && isDemoNode(pid) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Minute)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			fmt.Fprintln(os.Stderr, "demo: the node did not stop in time: killed")
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(time.Second)
			// Its namespaces died with it; what it left on the host goes now.
			for _, l := range testnode.CleanStaleRuns() {
				fmt.Fprintln(os.Stderr, "demo:", l)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	fmt.Println("demo: stopped, and", dir, "removed")
	return nil
}

// isDemoNode says whether pid is the demo's node process (and not a recycled pid).
func isDemoNode(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return len(args) == 2 && filepath.Base(args[0]) == "demo" && args[1] == "node"
}
