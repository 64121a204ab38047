package testnode

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/plain/path`:        "/plain/path",
		`/with\040space`:     "/with space",
		`/tab\011and\134bs`:  "/tab\tand\\bs",
		`/trailing\04`:       `/trailing\04`,
		`/not\999octal\040x`: `/not\999octal x`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// A run whose owner is gone (its lock is free) is cleaned: its cgroups removed depth-first and
// its directory deleted. A run whose owner holds its lock is left alone.
func TestCleanupStaleRemovesOnlyRunsWhoseOwnerIsGone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	makeRun := func(name string) (run, cgroup string) {
		run = filepath.Join(root, "run-"+name)
		if err := os.Mkdir(run, 0o700); err != nil {
			t.Fatal(err)
		}
		st := &hostState{CgroupRoot: "kuik-testnode-test-" + name}
		cgroup = filepath.Join(hierarchies[0], st.CgroupRoot)
		st.Cgroups = []string{cgroup}
		if err := writeState(run, st); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(cgroup, "kubepods", "besteffort"), 0o750); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = removeCgroup(cgroup) })
		return run, cgroup
	}
	deadRun, deadCgroup := makeRun("dead")
	liveRun, liveCgroup := makeRun("live")
	lock, err := lockRun(liveRun, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()

	report := cleanupStale(root)

	for _, gone := range []string{deadRun, deadCgroup} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s still exists after cleaning a run whose owner is gone (stat: %v)", gone, err)
		}
	}
	for _, kept := range []string{liveRun, filepath.Join(liveCgroup, "kubepods", "besteffort")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s of a live run was touched: %v", kept, err)
		}
	}
	if !slices.ContainsFunc(report, func(l string) bool { return strings.Contains(l, "removed "+deadRun) }) {
		t.Errorf("report does not say the dead run was removed: %q", report)
	}
	if slices.ContainsFunc(report, func(l string) bool { return strings.Contains(l, liveRun) }) {
		t.Errorf("report mentions the live run: %q", report)
	}
}
