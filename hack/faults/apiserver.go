package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// apiserverKill is row 1: kube-apiserver SIGKILLed in the middle of an Always convergence and
// started again on the same etcd; the syncer keeps running.
func apiserverKill(ctx context.Context, bin string, w io.Writer) error {
	e, names, err := setup(ctx, bin, w)
	if err != nil {
		return err
	}
	defer e.stop()
	n := len(names)
	s, err := e.startSyncer(ctx, "syncer")
	if err != nil {
		return err
	}
	defer s.p.Stop()

	// Floor: the same convergence, undisturbed, by the same syncer.
	floor, err := e.floor(ctx, names)
	if err != nil {
		return err
	}
	before := s.applies(ctx)

	// The fault: kill when half the pairs are applied.
	t1 := time.Now()
	if err := e.always(ctx, "always", "always"); err != nil {
		return err
	}
	if err := waitApplies(ctx, s, before+float64(n/2), 10*time.Minute); err != nil {
		return err
	}
	atKill := s.applies(ctx) - before
	tKill := time.Now()
	if err := e.cp.KillAPIServer(); err != nil {
		return err
	}
	time.Sleep(*flagOutage)
	tRestart := time.Now()
	if err := e.cp.RestartAPIServer(ctx); err != nil {
		return err
	}
	tReady := time.Now()
	// A syncer that exits (its lease lost: an outage past the renew deadline) converges nothing.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.p.Exited():
			cancel()
		case <-wctx.Done():
		}
	}()
	tDone, err := e.waitCorrect(wctx, "always", names, alwaysAuths, 10*time.Minute)
	if !s.alive() {
		return fmt.Errorf("%w: the syncer exited %s after the kill, before every Secret was correct; log:\n%s", errOutcome, since(tKill, time.Now()), s.p.LogTail())
	}
	if err != nil {
		return err
	}
	m, _ := s.scrape(ctx)
	floorBad, err := e.checkSecrets(ctx, "floor", names, alwaysAuths)
	if err != nil {
		return err
	}
	leader := s.leader(ctx)

	printf(w, "floor: the syncer converges %d namespaces undisturbed in %s\n", n, floor.Round(time.Millisecond))
	printf(w, "fault: kube-apiserver SIGKILLed at +%s after the resource's creation, %.0f of %d pairs applied\n", since(t1, tKill), atKill, n)
	printf(w, "       down %s (kill -> restarted and /readyz ok: %s; the new process was ready %s after its start)\n",
		flagOutage.String(), since(tKill, tReady), since(tRestart, tReady))
	printf(w, "       every Secret correct %s after the API server returned; %s after the creation (%.2fx the floor)\n",
		since(tReady, tDone), since(t1, tDone), float64(tDone.Sub(t1))/float64(floor))
	printf(w, "       syncer: %.0f apply errors during the outage, %.0f successful applies in all, still running: %v, still leader: %v\n",
		m[`kuik_secret_syncer_applies_total{result="error"}`], m[`kuik_secret_syncer_applies_total{result="success"}`], s.alive(), leader)
	printf(w, "       checked: %d Secrets of the faulted resource and %d of the floor's, content of each\n", n, n)
	switch {
	case !s.alive():
		return fmt.Errorf("%w: the syncer exited; log:\n%s", errOutcome, s.p.LogTail())
	case !leader:
		return fmt.Errorf("%w: the syncer no longer holds its lease", errOutcome)
	case len(floorBad) > 0:
		return fmt.Errorf("%w: %d of the floor's Secrets wrong after the fault: %v", errOutcome, len(floorBad), first(floorBad, 5))
	}
	printf(w, "outcome: nothing lost, the syncer recovered without a restart\n")
	return nil
}
