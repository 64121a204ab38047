package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The kernel delivers PR_SET_PDEATHSIG when the *thread* that forked a child exits, not the
// process. Go may retire threads, so every child is forked from one goroutine locked to its
// thread for the life of the process.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd, detached bool) error {
	if detached {
		// A detached child outlives this process (the demo): its own session, no death signal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd.Start()
	}
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	// Keep what the caller asked for (namespaces, for instance) and add the death signal.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}

// process is one running control-plane binary.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

func startProcess(name, bin, logPath string, detached bool, args ...string) (*process, error) {
	return startCmd(name, exec.Command(bin, args...), logPath, detached)
}

func startCmd(name string, cmd *exec.Cmd, logPath string, detached bool) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s log: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := spawn(cmd, detached); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop asks the process to terminate, then kills its whole process group.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// logTail is the end of the process log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls check until it succeeds, the process exits, or the deadline passes.
func (p *process) waitFor(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%w); log:\n%s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (%w); log:\n%s", p.name, timeout, last, p.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts finds n distinct ports of 127.0.0.1 that nothing listens on right now. Another
// process may take one before it is bound; Start retries the whole start when that happens.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserving a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Spawn starts cmd so that it dies with this process however this process ends
// (PR_SET_PDEATHSIG, from a thread that lives as long as the process), in a process group of its
// own. The SysProcAttr the caller set (namespaces, for instance) is kept.
func Spawn(cmd *exec.Cmd) error { return spawn(cmd, false) }

// Process is a binary started by StartProcess: its output goes to a log file, and it dies with
// this process.
type Process struct{ p *process }

// StartProcess starts cmd (with the Env, Dir and SysProcAttr the caller set) through Spawn,
// its output going to logPath.
func StartProcess(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	p, err := startCmd(name, cmd, logPath, false)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Stop sends SIGTERM, and SIGKILL to the process group after 5 s. Safe on nil and twice.
func (p *Process) Stop() {
	if p != nil {
		p.p.stop()
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.p.exited }

// WaitFor polls check until it succeeds, the process exits or timeout passes; errors carry the
// end of the log.
func (p *Process) WaitFor(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	return p.p.waitFor(ctx, timeout, check)
}

// LogTail is the end of the process's log, for error messages.
func (p *Process) LogTail() string { return p.p.logTail() }
