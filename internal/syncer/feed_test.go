package syncer

import (
	"context"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// A resync feeds its pairs a few at a time: the work queue never holds more than the backlog
// of them, every pair is fed once, and a decision an event calls for during the pass is taken
// after at most the backlog of resync decisions, not after the whole pass.
func TestResyncFeedsTheQueueAFewAtATime(t *testing.T) {
	const n, backlog = 300, 4
	q := workqueue.NewTyped[int]()
	defer q.ShutDown()
	keys := make([]int, n)
	for i := range keys {
		keys[i] = i
	}
	event := -1

	var order []int
	done := make(chan struct{})
	// The consumer is the workers: it takes one item at a time and, on the 10th, an event
	// queues a decision of its own.
	go func() {
		defer close(done)
		for len(order) < n+1 {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			order = append(order, k)
			if len(order) == 10 {
				q.Add(event)
			}
			q.Done(k)
		}
	}()
	maxLen, fed := 0, 0
	feed(context.Background(), q, keys, backlog, func(int) {
		fed++
		maxLen = max(maxLen, q.Len())
	})
	<-done

	if fed != n {
		t.Fatalf("fed %d keys, want %d", fed, n)
	}
	if maxLen >= backlog {
		t.Errorf("the queue held %d items before a key was fed, want fewer than %d", maxLen, backlog)
	}
	seen := map[int]int{}
	for i, k := range order {
		seen[k] = i
	}
	for _, k := range append(keys, event) {
		if _, ok := seen[k]; !ok {
			t.Fatalf("key %d never reached the consumer", k)
		}
	}
	// The event came in after the 10th decision; at most backlog resync keys (and one being
	// fed) were queued before it.
	if at := seen[event]; at > 10+backlog+1 {
		t.Errorf("the event's decision came %d-th, behind %d resync decisions queued after it", at+1, at-10)
	}
}

// A resync stops feeding when the syncer stops.
func TestResyncFeedStopsWithTheContext(t *testing.T) {
	q := workqueue.NewTyped[int]()
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	fed := 0
	feed(ctx, q, []int{1, 2, 3, 4, 5}, 2, func(int) {
		fed++
		if fed == 2 {
			cancel()
		}
	})
	if fed != 2 || q.Len() != 2 {
		t.Errorf("fed %d and queued %d after the stop, want 2 and 2", fed, q.Len())
	}
}
