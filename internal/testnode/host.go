package testnode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What a run changes on the host outside the namespaces it makes, recorded before the change
// in <run>/state.json so that the run itself, or a later one if this one was killed, undoes it.
type hostState struct {
	// CgroupRoot is the kubelet's cgroupRoot, a directory of each cgroup hierarchy.
	CgroupRoot string `json:"cgroupRoot"`
	// Cgroups are the directories this run created for CgroupRoot (removed depth-first).
	Cgroups []string `json:"cgroups"`
	// Sysctls are the values, before the run, of the sysctls the kubelet sets (paths under
	// /proc/sys). The kubelet only ever writes shadow files bound over them in the run's mount
	// namespace; the values are checked, and put back if they changed.
	Sysctls map[string]string `json:"sysctls"`
	// Absent are host paths the node's daemons write to whatever their configuration says,
	// which did not exist before the run: the run's private /run and /var overlays keep them
	// absent, and cleanup checks that they still are.
	Absent []string `json:"absent"`
}

// kubeletSysctls are the kernel tunables the kubelet sets when protectKernelDefaults is false
// (setupKernelTunables in pkg/kubelet/cm).
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hardcodedPaths are where containerd, the kubelet, libcni, mount(8) and kube-proxy write
// regardless of their configured directories (shim sockets in /run/containerd/s, libcni's
// cache, the kubelet's container-log symlinks and device-plugin socket, mount's utab, the
// xtables lock), and the defaults this harness configures away.
var hardcodedPaths = []string{
	"/run/containerd", "/run/mount", "/run/netns", "/run/nri", "/run/xtables.lock",
	"/var/lib/cni", "/var/lib/kubelet", "/var/lib/containerd", "/var/log/containers", "/var/log/pods",
	"/usr/libexec/kubernetes", "/etc/cni", "/opt/cni", "/opt/containerd", "/etc/kubernetes",
}

// stateRoot holds one directory per run: <root>/run-*/{lock,state.json,...}.
func stateRoot() string { return filepath.Join(os.TempDir(), "kuik-testnode") }

// lockRun takes the run's lock, held for the life of the process that made the run: a later
// run that can take it knows the run's owner is gone.
func lockRun(run string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(run, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening run lock: %w", err)
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// prepareHost records the host's state, then creates the kubelet's cgroupRoot in every cgroup
// hierarchy (the kubelet requires it to exist in each).
func prepareHost(run string) (*hostState, error) {
	for _, hidden := range []string{"/run", "/var/run", "/var/lib", "/var/log"} {
		if run == hidden || strings.HasPrefix(run, hidden+"/") {
			return nil, fmt.Errorf("the run directory %s is under %s, which the node's mount namespace replaces: set TMPDIR elsewhere", run, hidden)
		}
	}
	st := &hostState{CgroupRoot: "kuik-testnode-" + strings.TrimPrefix(filepath.Base(run), "run-"), Sysctls: map[string]string{}}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		st.Sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, p := range hardcodedPaths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			st.Absent = append(st.Absent, p)
		}
	}
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	// Record before creating, so that a crash in between still gets cleaned.
	for _, h := range hierarchies {
		st.Cgroups = append(st.Cgroups, filepath.Join(h, st.CgroupRoot))
	}
	if err := writeState(run, st); err != nil {
		return nil, err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, st.CgroupRoot)
		if err := os.Mkdir(dir, 0o750); err != nil {
			return st, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		// A new cpuset cgroup (v1) has no CPU nor memory node until given its parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o600); err != nil {
					return st, fmt.Errorf("initialising %s: %w", dir, err)
				}
			}
		}
	}
	return st, nil
}

func writeState(run string, st *hostState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding run state: %w", err)
	}
	tmp := filepath.Join(run, ".state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing run state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(run, "state.json")); err != nil {
		return fmt.Errorf("writing run state: %w", err)
	}
	return nil
}

func readState(run string) (*hostState, error) {
	b, err := os.ReadFile(filepath.Join(run, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("reading run state: %w", err)
	}
	var st hostState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decoding run state: %w", err)
	}
	return &st, nil
}

// cgroupHierarchies lists the mount points of cgroup (v1) and cgroup2 file systems.
func cgroupHierarchies() ([]string, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			hs = append(hs, m.point)
		}
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup file system is mounted")
	}
	return hs, nil
}

type mount struct{ point, fstype string }

func readMountinfo() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var ms []mount
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		ms = append(ms, mount{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return ms, s.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cleanupHost undoes what a finished (or killed) run left on the host, and reports what it
// found. By then the run's PID namespace is gone, so its processes, mounts and network are too;
// what is left is global: cgroup directories, sysctls, and anything that escaped, which is
// reported as a problem.
func cleanupHost(run string, st *hostState) (done, problems []string) {
	// Processes of this run still alive: anything whose command line names the run's directory,
	// or sits in its cgroups. None once its PID namespace is gone, but a run found dead (its
	// owner killed) may still be tearing it down: give the kernel a few seconds.
	left := leftoverProcesses(run, st)
	for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		left = leftoverProcesses(run, st)
	}
	for _, pid := range left {
		problems = append(problems, fmt.Sprintf("process %d of the run was still alive (killed)", pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Mounts of the run visible on the host (they all belong to its private mount namespace).
	if mounts, err := readMountinfo(); err == nil {
		var under []string
		for _, m := range mounts {
			if m.point == run || strings.HasPrefix(m.point, run+"/") {
				under = append(under, m.point)
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(under))) // deepest first
		for _, p := range under {
			problems = append(problems, "mount "+p+" was visible on the host (unmounted)")
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
	removed, hierarchies := 0, 0
	for _, cg := range st.Cgroups {
		n, err := removeCgroup(cg)
		if err != nil {
			problems = append(problems, err.Error())
		} else if n > 0 {
			removed += n
			hierarchies++
		}
	}
	if removed > 0 {
		done = append(done, fmt.Sprintf("removed cgroup %s from %d hierarchies (%d directories)", st.CgroupRoot, hierarchies, removed))
	}
	keys := make([]string, 0, len(st.Sysctls))
	for k := range st.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := st.Sysctls[k]
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			problems = append(problems, fmt.Sprintf("reading sysctl %s: %v", k, err))
			continue
		}
		if got := strings.TrimSpace(string(b)); got != want {
			problems = append(problems, fmt.Sprintf("sysctl %s was changed to %s (restored to %s)", k, got, want))
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(want), 0o600); err != nil {
				problems = append(problems, fmt.Sprintf("restoring sysctl %s: %v", k, err))
			}
		}
	}
	for _, p := range st.Absent {
		if _, err := os.Lstat(p); err == nil {
			// Left alone: something else may have made it since.
			problems = append(problems, p+" exists on the host but did not before the run")
		}
	}
	return done, problems
}

func leftoverProcesses(run string, st *hostState) []int {
	seen := map[int]bool{}
	var pids []int
	add := func(pid int) {
		if pid > 0 && pid != os.Getpid() && !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	for _, cg := range st.Cgroups {
		_ = filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p) //nolint:gosec // cgroupfs: kernel files, no symlinks to race with
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					add(pid)
				}
			}
			return nil
		})
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && (strings.Contains(string(b), run+"/") || strings.Contains(string(b), nodeDir(run)+"/")) {
			add(pid)
		}
	}
	return pids
}

// removeCgroup removes a cgroup directory and its children, deepest first, retrying while the
// kernel still accounts exiting tasks to them.
func removeCgroup(root string) (int, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing cgroup %s: %w", root, err)
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range dirs {
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				return 0, fmt.Errorf("removing cgroup %s: %w", d, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return len(dirs), nil
}

// cleanupStale cleans the runs whose owner is gone (killed before it could clean up), and
// reports what it did.
func cleanupStale(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var report []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "run-") {
			continue
		}
		run := filepath.Join(root, e.Name())
		lock, err := lockRun(run, false)
		if err != nil {
			continue // its owner is alive (or the directory is not ours to judge)
		}
		st, err := readState(run)
		if err == nil {
			done, problems := cleanupHost(run, st)
			report = append(report, done...)
			report = append(report, problems...)
		}
		if err := os.RemoveAll(run); err != nil {
			report = append(report, fmt.Sprintf("removing %s: %v", run, err))
		} else {
			report = append(report, "removed "+run)
		}
		lock.Close()
	}
	return report
}
