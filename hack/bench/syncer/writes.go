package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// unchangedWrites is phase 2: the writes of an event storm that re-decides every pair without
// changing anything (hash skips), then of the periodic forced resync; watched from rv.
func (b *bench) unchangedWrites(ctx context.Context, sy *inProcSyncer, rv string) error {
	n, pairs := len(b.names), max(*flagResources, 1)*len(b.names)
	names := b.names
	w, err := b.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer, ResourceVersion: rv})
	if err != nil {
		return err
	}
	var modified atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified || ev.Type == watch.Added || ev.Type == watch.Deleted {
				modified.Add(1)
			}
		}
	}()
	// (a) events that re-decide every pair without changing anything: hash skips.
	time.Sleep(time.Second)
	sy.applyRequests.Store(0)
	skippedBefore := benchutil.Counter(metrics.SyncerAppliesSkipped)
	t0 := time.Now()
	err = benchutil.Parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
		_, err := b.cs.CoreV1().Namespaces().Patch(ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	patched := time.Since(t0)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout(pairs), true, func(context.Context) (bool, error) {
		return benchutil.Counter(metrics.SyncerAppliesSkipped)-skippedBefore >= float64(pairs), nil
	})
	decided := time.Since(t0).Round(time.Millisecond).String()
	if err != nil {
		decided = "not all decided by the hash after " + decided
	} else {
		decided = "all decided after " + decided
	}
	time.Sleep(time.Second)
	fmt.Printf("\n== 2. Writes when nothing changed\n")
	fmt.Printf("event storm re-deciding all %d pairs (%d namespaces relabelled in %s, %s): %d apply requests, %d Secret writes, %.0f applies skipped by the hash (goal 0 writes)\n",
		pairs, n, patched.Round(time.Millisecond), decided, sy.applyRequests.Load(), modified.Load(), benchutil.Counter(metrics.SyncerAppliesSkipped)-skippedBefore)
	// (b) the periodic resync re-applies every pair on purpose (it restores deleted or edited
	// Secrets); the API server turns each identical apply into a no-op.
	sy.applyRequests.Store(0)
	modified.Store(0)
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2**flagResync+timeout(pairs), true, func(context.Context) (bool, error) {
		return sy.applyRequests.Load() >= int64(pairs), nil
	})
	resyncRequests := sy.applyRequests.Load()
	resyncTook := time.Duration(sy.lastApply.Load() - sy.firstApply.Load())
	time.Sleep(2 * time.Second)
	fmt.Printf("periodic forced resync: %d apply requests (by design, one per pair) in ~%s, %d Secret writes (goal 0)\n",
		resyncRequests, resyncTook.Round(time.Millisecond), modified.Load())
	w.Stop()
	return nil
}
