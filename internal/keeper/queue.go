package keeper

import (
	"slices"
	"time"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// item is one desired destination and what the keeper knows of it. It holds strings only:
// 5,000 images make 5,000 small items, whatever the number of pods.
type item struct {
	want keep.Want
	// host is the source registry host (the queue), label its metric label.
	host, label string
	// gen is the plan pass that last wanted it.
	gen uint64
	// present: the destination holds digest (the last copy or self-heal said so).
	present bool
	digest  string
	// fail is the last attempt's failure; nil after a success.
	fail *failure
	// attempts counts the failures in a row; notBefore is the backoff.
	attempts  int
	notBefore time.Time
	// queued: in the queue (ready or delayed); running: a worker copies it, and queues it
	// again when it is still not present.
	queued, running bool
	// heal: the self-heal found it missing; the copy pins digest (a tag PUT, 0 source GETs).
	heal bool
	// dropped: no plan pass wants it any more.
	dropped bool
	// seq tells the item's current queue entry from stale ones (left by a priority change).
	seq uint32
}

// entry is an item in a queue; stale once the item's seq moved on (skipped then).
type entry struct {
	it  *item
	seq uint32
}

// failure is why the last attempt failed.
type failure struct {
	reason  v1alpha1.KeepFailureReason
	message string
	at      time.Time
}

// queue holds the items waiting for a worker, by source host and priority.
type queue struct {
	hosts map[string]*hostQueue
	// names are the hosts with a queue, sorted: the round-robin order.
	names []string
	// last is the host served last at each priority.
	last map[keep.Priority]string
	// delayed are the items in backoff.
	delayed []entry
	// depth counts the waiting items by metric label.
	depth map[string]int
}

// hostQueue is one source host's FIFO per priority.
type hostQueue struct {
	fifo map[keep.Priority][]entry
	// parkedUntil: the Pacer refused this host until then.
	parkedUntil time.Time
}

func newQueue() queue {
	return queue{hosts: map[string]*hostQueue{}, last: map[keep.Priority]string{}, depth: map[string]int{}}
}

func (q *queue) host(h string) *hostQueue {
	hq, ok := q.hosts[h]
	if !ok {
		hq = &hostQueue{fifo: map[keep.Priority][]entry{}}
		q.hosts[h] = hq
		i, _ := slices.BinarySearch(q.names, h)
		q.names = slices.Insert(q.names, i, h)
	}
	return hq
}

// push queues it: ready, or delayed until its backoff ends. A queued or running item is not
// queued twice.
func (q *queue) push(it *item, now time.Time) {
	if it.running || it.queued {
		return
	}
	it.queued = true
	q.count(it.label, 1)
	q.enter(it, now)
}

// reprioritize moves a queued item to its new priority (its old entry goes stale).
func (q *queue) reprioritize(it *item, now time.Time) {
	if it.queued {
		q.enter(it, now)
	}
}

// enter adds a fresh entry of it, ready or delayed.
func (q *queue) enter(it *item, now time.Time) {
	it.seq++
	e := entry{it: it, seq: it.seq}
	if now.Before(it.notBefore) {
		q.delayed = append(q.delayed, e)
		return
	}
	hq := q.host(it.host)
	hq.fifo[it.want.Priority] = append(hq.fifo[it.want.Priority], e)
}

// promote moves the delayed items that are due into their host's queue, and returns when the
// next delayed item or parked host is due (zero when none).
func (q *queue) promote(now time.Time) time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	kept := q.delayed[:0]
	for _, e := range q.delayed {
		it := e.it
		switch {
		case e.seq != it.seq || !it.queued:
		case it.dropped:
			it.queued = false
			q.count(it.label, -1)
		case now.Before(it.notBefore):
			kept = append(kept, e)
			earliest(it.notBefore)
		default:
			hq := q.host(it.host)
			hq.fifo[it.want.Priority] = append(hq.fifo[it.want.Priority], e)
		}
	}
	clear(q.delayed[len(kept):])
	q.delayed = kept
	for _, hq := range q.hosts {
		if now.Before(hq.parkedUntil) && hq.waiting() {
			earliest(hq.parkedUntil)
		}
	}
	return next
}

func (hq *hostQueue) waiting() bool {
	for _, f := range hq.fifo {
		if len(f) > 0 {
			return true
		}
	}
	return false
}

// pick takes the next item: the highest priority among the hosts not parked, round-robin
// among the hosts at that priority; nil when none is ready.
func (q *queue) pick(now time.Time) *item {
	for p := keep.PriorityRouted; p >= keep.PriorityTemplate; p-- {
		n := len(q.names)
		start, _ := slices.BinarySearch(q.names, q.last[p])
		if start < n && q.names[start] == q.last[p] {
			start++
		}
		for i := range n {
			h := q.names[(start+i)%n]
			hq := q.hosts[h]
			if now.Before(hq.parkedUntil) {
				continue
			}
			if it := hq.pop(p, q); it != nil {
				q.last[p] = h
				return it
			}
		}
	}
	return nil
}

// pop takes the first item of priority p still wanted; stale entries are skipped.
func (hq *hostQueue) pop(p keep.Priority, q *queue) *item {
	f := hq.fifo[p]
	for len(f) > 0 {
		e := f[0]
		f[0] = entry{}
		f = f[1:]
		if e.seq != e.it.seq || !e.it.queued {
			continue
		}
		e.it.queued = false
		q.count(e.it.label, -1)
		if !e.it.dropped {
			hq.fifo[p] = f
			return e.it
		}
	}
	delete(hq.fifo, p)
	return nil
}

// park holds host's queue until until.
func (q *queue) park(host string, until time.Time) {
	hq := q.host(host)
	if until.After(hq.parkedUntil) {
		hq.parkedUntil = until
	}
}

// count moves the queue depth of label by d.
func (q *queue) count(label string, d int) {
	q.depth[label] += d
	metrics.KeeperQueueDepth.WithLabelValues(label).Set(float64(q.depth[label]))
}

// backoff is the wait after the n-th failure in a row: base doubling up to max.
func backoff(n int, base, maxWait time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}
