package syncer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/routing"
)

// The debounce remembers a pair only for its window: a pod re-annotated in a loop with
// thousands of names leaves nothing behind once its events stop, long before a resync.
func TestDebounceForgetsPairsAfterTheirWindow(t *testing.T) {
	c := NewController(Config{Debounce: 10 * time.Millisecond, ResyncPeriod: time.Hour}, nil, nil, nil, nil)
	t.Cleanup(c.queue.ShutDown)
	for round := range 3 {
		for i := range 5000 {
			c.enqueuePair(PairKey{Kind: routing.KindImageAlternative, Name: fmt.Sprintf("invented-%d", i), Namespace: fmt.Sprintf("ns-%d", round)})
		}
	}
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.debouncing() == 0, nil
	})
	if err != nil {
		t.Fatalf("the debounce still remembers %d pairs, long after their window (the resync is an hour away)", c.debouncing())
	}
}
