package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Detached processes (the demo's): their pids go to dir/pids, and StopDetached ends them.

func (cp *ControlPlane) writePids() error {
	var pids []string
	for _, p := range []*process{cp.etcd, cp.apiserver, cp.kcm, cp.scheduler} {
		if p != nil {
			pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
		}
	}
	return AppendPids(cp.Dir, pids...)
}

// AppendPids records processes that StopDetached must end.
func AppendPids(dir string, pids ...string) error {
	f, err := os.OpenFile(filepath.Join(dir, "pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("recording pids: %w", err)
	}
	defer f.Close()
	for _, p := range pids {
		if _, err := fmt.Fprintln(f, p); err != nil {
			return fmt.Errorf("recording pids: %w", err)
		}
	}
	return nil
}

// StopDetached ends every process recorded in dir/pids, last started first.
func StopDetached(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading pids: %w", err)
	}
	lines := strings.Fields(string(b))
	for i := len(lines) - 1; i >= 0; i-- {
		pid, err := strconv.Atoi(lines[i])
		if err != nil {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for range 50 {
			if syscall.Kill(pid, 0) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return os.Remove(filepath.Join(dir, "pids"))
}

// SpawnDetached starts bin in its own session, logging to dir/<name>.log, and records its pid
// in dir/pids so that StopDetached ends it (the demo's webhook, syncer and registry).
func SpawnDetached(dir, name, bin string, args ...string) error {
	p, err := startProcess(name, bin, filepath.Join(dir, name+".log"), true, args...)
	if err != nil {
		return err
	}
	return AppendPids(dir, strconv.Itoa(p.cmd.Process.Pid))
}

// LogTail is the end of dir/<name>.log, for error messages.
func LogTail(dir, name string) string {
	return (&process{logPath: filepath.Join(dir, name+".log")}).logTail()
}
