package testnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/enix/kuik/internal/testenv"
)

// The test binary runs three times, told apart by roleEnv:
//
//	(unset) the host process: records the host's state, makes the run directory and the
//	        kubelet's cgroups, starts the init below in new PID, mount and network
//	        namespaces, waits for it, then undoes what is left on the host (and what an earlier
//	        killed run left). It never runs the tests.
//	init    PID 1 of the new PID namespace: makes the mounts private, mounts a fresh /proc,
//	        shadows the kubelet's sysctls, gives the node a private /run and overlays over
//	        /var/lib and /var/log, brings up the node's network, starts the node role and
//	        reaps orphans (containerd's shims re-parent to it). When it exits, the kernel
//	        kills everything left in the namespace, and the mounts and network go with it.
//	node    starts the node and runs the tests.
const (
	roleEnv = "KUIK_TESTNODE_ROLE"
	runEnv  = "KUIK_TESTNODE_RUN"
	// keepEnv=1 keeps the run directory (logs, configuration) after the run.
	keepEnv = "KUIK_TESTNODE_KEEP"
	// requiredEnv=1 turns "cannot run here" into a failure instead of a skip (CI sets it).
	requiredEnv = "KUIK_NODE_REQUIRED"

	roleInit = "init"
	roleNode = "node"
)

// hostMain is the host process: it returns the exit code of the whole test binary.
func hostMain() int {
	root := stateRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		return 1
	}
	for _, line := range cleanupStale(root) {
		fmt.Fprintf(os.Stderr, "testnode: earlier run: %s\n", line)
	}
	run, err := os.MkdirTemp(root, "run-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		return 1
	}
	lock, err := lockRun(run, true)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: locking %s: %v\n", run, err)
		return 1
	}
	defer lock.Close()

	code := 1
	st, err := prepareHost(run)
	if err == nil {
		err = downloadModules()
	}
	if err == nil {
		err = buildGuest(run)
	}
	if err == nil {
		code, err = runInit(run)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		code = 1
	}
	if st == nil { // nothing was changed yet
		_ = os.RemoveAll(run)
		return code
	}
	done, problems := cleanupHost(run, st)
	for _, d := range done {
		fmt.Fprintf(os.Stderr, "testnode: cleanup: %s\n", d)
	}
	for _, p := range problems {
		fmt.Fprintf(os.Stderr, "testnode: cleanup problem: %s\n", p)
	}
	if len(problems) > 0 && code == 0 {
		code = 1
	}
	if os.Getenv(keepEnv) == "1" {
		fmt.Fprintf(os.Stderr, "testnode: %s=1: kept %s\n", keepEnv, run)
		return code
	}
	if err := os.RemoveAll(run); err != nil {
		fmt.Fprintf(os.Stderr, "testnode: removing %s: %v\n", run, err)
		code = 1
	}
	return code
}

// downloadModules fills the module cache with every module kuik's go.mod names, while the
// network is still the host's. Inside the node's namespaces nothing can be downloaded (there is
// no route out), and the runs build Go code there: kuik's images (internal/images), the
// credential-provider plugins the e2e tests push, anything a test compiles. go test and go run
// downloaded only what their own binary imports, so a module only the webhook's binary links
// (golang.org/x/crypto/x509roots/fallback) would be missing on a machine whose cache is empty.
func downloadModules() error {
	cmd := exec.Command(goBinary(), "mod", "download")
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("downloading kuik's modules before entering the node's namespaces: %w\n%s", err, b)
	}
	return nil
}

// offlineGoEnv is the go command's environment inside the node's namespaces: the module cache
// only (downloadModules filled it), so that a module missing from it fails at once and says so
// instead of timing out on a lookup that has no route.
var offlineGoEnv = []string{"GOPROXY=off"}

func goBinary() string {
	if gobin, err := exec.LookPath("go"); err == nil {
		return gobin
	}
	return filepath.Join(goroot(), "bin", "go")
}

// buildGuest compiles the images' program (./guest) for the node's platform, static.
func buildGuest(run string) error {
	out := filepath.Join(run, "bin", "guest")
	cmd := exec.Command(goBinary(), "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./internal/testnode/guest")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the guest program: %w\n%s", err, b)
	}
	return nil
}

func goroot() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	b, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "/usr/local/go"
	}
	return strings.TrimSpace(string(b))
}

// runInit starts this binary again as PID 1 of new PID, mount and network namespaces, passes
// it SIGINT and SIGTERM, and returns its exit code.
func runInit(run string) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("locating the test binary: %w", err)
	}
	cmd := exec.Command(exe, os.Args[1:]...) //nolint:gosec // this test binary again, with its own arguments
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(append(os.Environ(), offlineGoEnv...), roleEnv+"="+roleInit, runEnv+"="+run)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
	if err := testenv.Spawn(cmd); err != nil {
		return 1, fmt.Errorf("starting the node's namespaces: %w", err)
	}
	stop := forwardSignals(cmd.Process)
	defer stop()
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("waiting for the node's namespaces: %w", err)
	}
	return 0, nil
}

func forwardSignals(p *os.Process) (stop func()) {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				_ = p.Signal(s)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

// initMain is PID 1 of the node's namespaces.
func initMain() int {
	run := os.Getenv(runEnv)
	st, err := readState(run)
	if err == nil {
		err = setupMounts(run, st)
	}
	if err == nil {
		err = setupNetwork()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: preparing the node's namespaces: %v\n", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testnode: %v\n", err)
		return 1
	}
	cmd := exec.Command(exe, os.Args[1:]...) //nolint:gosec // this test binary again, with its own arguments
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), roleEnv+"="+roleNode)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := testenv.Spawn(cmd); err != nil {
		fmt.Fprintf(os.Stderr, "testnode: starting the tests: %v\n", err)
		return 1
	}
	stop := forwardSignals(cmd.Process)
	defer stop()
	// Reap every child: the tests' process, and orphans (shims, whose parent exited).
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testnode: waiting for the tests: %v\n", err)
			return 1
		}
		if pid != cmd.Process.Pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// setupMounts runs in the new mount namespace, before anything else is started in it.
func setupMounts(run string, st *hostState) error {
	// Nothing mounted here may propagate to the host.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// The PID namespace's own /proc, so that pids read there are the ones processes see.
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// The kubelet sets these kernel-wide tunables; it reads and writes a file of the run instead.
	shadows := filepath.Join(run, "sysctl")
	if err := os.MkdirAll(shadows, 0o700); err != nil {
		return fmt.Errorf("creating sysctl shadows: %w", err)
	}
	for k, v := range st.Sysctls {
		f := filepath.Join(shadows, strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing sysctl shadow: %w", err)
		}
		if err := syscall.Mount(f, filepath.Join("/proc/sys", k), "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("shadowing sysctl %s: %w", k, err)
		}
	}
	// A private /run (shim sockets, mount's utab, the xtables lock), and /var/lib and /var/log
	// (libcni's cache, the kubelet's device-plugin socket and log symlinks) written to the run.
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting a private /run: %w", err)
	}
	// The node's directory under a short path, whatever TMPDIR is: unix socket paths are
	// limited to 107 bytes.
	for _, d := range []string{filepath.Join(run, "node"), nodeDir(run)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating the node directory: %w", err)
		}
	}
	if err := syscall.Mount(filepath.Join(run, "node"), nodeDir(run), "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mounting the node directory: %w", err)
	}
	for _, d := range []string{"/var/lib", "/var/log"} {
		lower, err := os.Stat(d)
		if err != nil {
			continue
		}
		base := filepath.Join(run, "host", strings.ReplaceAll(strings.Trim(d, "/"), "/", "-"))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		for _, p := range []string{upper, work} {
			if err := os.MkdirAll(p, 0o750); err != nil {
				return fmt.Errorf("creating overlay for %s: %w", d, err)
			}
		}
		// The overlay's root takes the upper directory's mode.
		if err := os.Chmod(upper, lower.Mode().Perm()); err != nil {
			return fmt.Errorf("creating overlay for %s: %w", d, err)
		}
		opts := "lowerdir=" + d + ",upperdir=" + upper + ",workdir=" + work
		if err := syscall.Mount("overlay", d, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlaying %s: %w", d, err)
		}
	}
	return nil
}

// nodeDir is where the node's namespaces see <run>/node: a short path in their private /run.
func nodeDir(run string) string { return "/run/kuik-" + filepath.Base(run) }

// setupNetwork gives the new network namespace its loopback and the node's address, on a veth
// pair whose two ends stay in the namespace (this kernel has no dummy links). Nothing links the
// namespace to the host's: there is no route out.
func setupNetwork() error {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "node0", "type", "veth", "peer", "name", "node0-peer"},
		{"addr", "add", NodeIP + "/" + strings.Split(NodeCIDR, "/")[1], "dev", "node0"},
		{"link", "set", "node0", "up"},
		{"link", "set", "node0-peer", "up"},
		// Processes of the node (the API server calling a webhook through its Service) reach
		// ClusterIPs as on a real node, where its default route carries them until kube-proxy's
		// DNAT: a route for the Service network only, still none out.
		{"route", "add", testenv.ServiceCIDR, "dev", "node0", "src", NodeIP},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := exec.CommandContext(ctx, ipCommand(), args...).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, b)
		}
	}
	return nil
}

func ipCommand() string {
	if p, err := exec.LookPath("ip"); err == nil {
		return p
	}
	return "/usr/sbin/ip"
}
