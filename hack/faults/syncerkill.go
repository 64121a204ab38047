package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// syncerKill is row 2: the syncer SIGKILLed in the middle of an Always convergence and started
// again at once, as the kubelet restarts it.
func syncerKill(ctx context.Context, bin string, w io.Writer) error {
	e, names, err := setup(ctx, bin, w)
	if err != nil {
		return err
	}
	defer e.stop()
	n := len(names)
	ws, err := e.watchWrites(ctx)
	if err != nil {
		return err
	}
	defer ws.stop()
	a, err := e.startSyncer(ctx, "syncer-1")
	if err != nil {
		return err
	}
	defer a.p.Stop()

	// Floor: the same convergence, undisturbed.
	base, err := e.secretApplies(ctx)
	if err != nil {
		return err
	}
	floor, err := e.floor(ctx, names)
	if err != nil {
		return err
	}
	floorApplies, err := e.secretApplies(ctx)
	if err != nil {
		return err
	}
	floorApplies -= base
	before := a.applies(ctx)

	// The fault.
	base, err = e.secretApplies(ctx)
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := e.always(ctx, "always", "always"); err != nil {
		return err
	}
	if err := waitApplies(ctx, a, before+float64(n/2), 10*time.Minute); err != nil {
		return err
	}
	tKill := a.kill()
	keys := pairKeys("always", names)
	written := 0
	for _, k := range keys {
		if ws.count(k) > 0 {
			written++
		}
	}
	b, err := e.startSyncer(ctx, "syncer-2")
	if err != nil {
		return err
	}
	defer b.p.Stop()
	tStarted := time.Now()
	tLeader, err := waitLeader(ctx, b, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("the restarted syncer never took the lease: %w", err)
	}
	tDone, err := e.waitCorrect(ctx, "always", names, alwaysAuths, 10*time.Minute)
	if err != nil {
		return err
	}
	// Every pair known to the restarted syncer is applied once at its start; let the last ones
	// land (and any storm show) before counting.
	if err := waitApplies(ctx, b, float64(2*n), 5*time.Minute); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	applies, err := e.secretApplies(ctx)
	if err != nil {
		return err
	}
	applies -= base
	h := ws.histogram(keys)
	hFloor := ws.histogram(pairKeys("floor", names))
	bm, _ := b.scrape(ctx)

	printf(w, "floor: %d namespaces converge undisturbed in %s, %.0f apply requests (%.2f per pair), %s\n",
		n, floor.Round(time.Millisecond), floorApplies, floorApplies/float64(n), formatHistogram(hFloor))
	printf(w, "fault: syncer-1 SIGKILLed at +%s after the resource's creation, %d of %d Secrets written\n", since(t1, tKill), written, n)
	printf(w, "       syncer-2 started %s after the kill, leader %s after its start (the dead leader's lease runs out)\n",
		since(tKill, tStarted), since(tStarted, tLeader))
	printf(w, "       every Secret correct %s after syncer-2 took the lease; %s after the creation (%.2fx the floor; %.2fx without the lease wait)\n",
		since(tLeader, tDone), since(t1, tDone), float64(tDone.Sub(t1))/float64(floor), float64(tDone.Sub(t1)-tLeader.Sub(tKill))/float64(floor))
	printf(w, "       apply requests since the creation (API server's count, both processes): %.0f for %d pairs of the resource and %d of the floor's (%.2f per pair of the resource; syncer-2 re-applies every pair once at its start)\n",
		applies, n, n, (applies-float64(n))/float64(n))
	printf(w, "       syncer-2: %.0f applies, %.0f skipped by the hash\n",
		bm[`kuik_secret_syncer_applies_total{result="success"}`], bm["kuik_secret_syncer_applies_skipped_total"])
	printf(w, "       Secret writes (watch ADDED/MODIFIED) per pair: resource %s; floor %s (watch broken: %v, resumed %d times)\n",
		formatHistogram(h), formatHistogram(hFloor), ws.broken.Load(), ws.resumed.Load())
	printf(w, "       checked: %d Secrets, content of each\n", n)
	for k, c := range h {
		if k != 1 && c > 0 {
			return fmt.Errorf("%w: %d pairs written %d times, want every pair once", errOutcome, c, k)
		}
	}
	for k, c := range hFloor {
		if k != 1 && c > 0 {
			return fmt.Errorf("%w: %d floor pairs written %d times, want once", errOutcome, c, k)
		}
	}
	if ws.broken.Load() {
		return fmt.Errorf("%w: the write watch broke: counts incomplete", errOutcome)
	}
	printf(w, "outcome: no pair missed, one write per pair\n")
	return nil
}
