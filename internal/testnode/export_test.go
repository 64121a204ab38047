package testnode

// For the external tests: the cleanup a later run performs, and what a run recorded.
var CleanupStale = cleanupStale

// RunCgroups are the cgroup directories the run recorded in its state.
func RunCgroups(run string) ([]string, error) {
	st, err := readState(run)
	if err != nil {
		return nil, err
	}
	return st.Cgroups, nil
}
