// Package benchutil holds what the campaign programs under hack/ share: a control plane and its
// clients, running work on a fixed number of goroutines, waiting, reading a process's memory
// and CPU, scraping metrics, percentiles and ratios, a realistic pod, and a testing.TB for
// internal/testutil's servers outside a test.
package benchutil

import (
	"context"
	"sync"
	"sync/atomic"
)

// Parallel runs fn for 0..n-1 on workers goroutines, stopping at the first error.
func Parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}
