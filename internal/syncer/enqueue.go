package syncer

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// What queues a pair: every pair at a start or a resync (fed a few at a time), a resource's
// pairs, and the leading-edge debounce of each pair's events.

// enqueueAll queues every pair the informers call for and every pair already written, and
// every resource's status.
func (c *Controller) enqueueAll(ctx context.Context) {
	for _, rk := range c.resourceKeys(ctx) {
		c.enqueueResource(ctx, rk)
	}
}

// resync makes the next decision of every pair apply whatever its hash says, restoring Secrets
// someone else deleted or edited. It feeds the pairs to the work queue a few at a time: a
// decision an event calls for waits behind at most resyncBacklog of them, not behind every
// pair of the cluster.
func (c *Controller) resync(ctx context.Context) {
	var keys []PairKey
	for _, rk := range c.resourceKeys(ctx) {
		c.statusQueue.AddAfter(rk, c.cfg.StatusDelay)
		keys = append(keys, c.pairsOf(ctx, rk)...)
	}
	feed(ctx, c.queue, keys, c.resyncBacklog(), func(k PairKey) {
		c.mu.Lock()
		if _, known := c.pairs[k]; known {
			c.forced[k] = struct{}{}
		}
		c.mu.Unlock()
	})
}

// resyncBacklog is how many resync decisions may wait in the work queue at once.
func (c *Controller) resyncBacklog() int { return 2 * c.cfg.Workers }

// feed adds keys to q one by one, each once fewer than backlog keys wait in it, calling before
// just before adding each; it returns early when ctx ends.
func feed[K comparable](ctx context.Context, q workqueue.TypedInterface[K], keys []K, backlog int, before func(K)) {
	const poll = 5 * time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for _, k := range keys {
		for q.Len() >= backlog {
			t.Reset(poll)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		before(k)
		q.Add(k)
	}
}

// resourceKeys lists every routing resource in the cache.
func (c *Controller) resourceKeys(ctx context.Context) []ResourceKey {
	var keys []ResourceKey
	var alts v1alpha1.ImageAlternativeList
	if err := c.cache.List(ctx, &alts); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing ImageAlternatives from the cache")
	}
	for i := range alts.Items {
		keys = append(keys, ResourceKey{Kind: routing.KindImageAlternative, Name: alts.Items[i].Name})
	}
	var mirrors v1alpha1.ImageMirrorList
	if err := c.cache.List(ctx, &mirrors); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing ImageMirrors from the cache")
	}
	for i := range mirrors.Items {
		keys = append(keys, ResourceKey{Kind: routing.KindImageMirror, Name: mirrors.Items[i].Name})
	}
	return keys
}

// enqueueResource queues the status of a resource and every pair it may need: the pairs
// already written (or restored from its retention record), plus every namespace for Always,
// or the namespaces of its rewritten pods for OnFailure.
func (c *Controller) enqueueResource(ctx context.Context, rk ResourceKey) {
	c.statusQueue.AddAfter(rk, c.cfg.StatusDelay)
	for _, k := range c.pairsOf(ctx, rk) {
		c.enqueuePair(k)
	}
}

// pairsOf lists a resource's pairs: those already known, and those the informers call for.
func (c *Controller) pairsOf(ctx context.Context, rk ResourceKey) []PairKey {
	namespaces := map[string]struct{}{}
	c.mu.Lock()
	for k := range c.pairs {
		if k.resource() == rk {
			namespaces[k.Namespace] = struct{}{}
		}
	}
	c.mu.Unlock()
	r, _, err := c.resource(ctx, rk)
	switch {
	case err != nil || r == nil:
		// Deleted or invalid: the known pairs find out themselves.
	case !r.Injecting():
	case r.Policy == v1alpha1.RewritePolicyAlways:
		list := namespaceMetaList()
		if err := c.cache.List(ctx, list); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "listing namespaces from the cache")
		}
		for i := range list.Items {
			if ns := &list.Items[i]; r.SelectsNamespace(ns.Labels) {
				namespaces[ns.Name] = struct{}{}
			}
		}
	case r.Policy == v1alpha1.RewritePolicyOnFailure:
		var pods corev1.PodList
		if err := c.cache.List(ctx, &pods, client.MatchingFields{sourceIndex: r.Source().String()}); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "listing pods from the cache")
		}
		for i := range pods.Items {
			namespaces[pods.Items[i].Namespace] = struct{}{}
		}
	}
	keys := make([]PairKey, 0, len(namespaces))
	for ns := range namespaces {
		keys = append(keys, PairKey{Kind: rk.Kind, Name: rk.Name, Namespace: ns})
	}
	return keys
}

// enqueuePair debounces on the leading edge: the first event of a pair is decided at once,
// the events that follow within the Debounce window collapse into one more decision at its
// end. A fan-out (a resource reaching every namespace) and the first pod of a namespace pay no
// delay; a rollout's burst of pods costs two decisions, the second usually skipped by the hash.
// A pair queued while it is being decided is decided once more after (the work queue's rule).
func (c *Controller) enqueuePair(k PairKey) {
	now := time.Now()
	c.eventMu.Lock()
	last, seen := c.lastEvent[k]
	c.lastEvent[k] = now
	if !c.pruneArmed {
		c.pruneArmed = true
		time.AfterFunc(c.cfg.Debounce, c.pruneEvents)
	}
	c.eventMu.Unlock()
	if seen && now.Sub(last) < c.cfg.Debounce {
		c.queue.AddAfter(k, c.cfg.Debounce)
		return
	}
	c.queue.Add(k)
}

// pruneEvents forgets the pairs whose last event is older than the debounce window, and runs
// again one window later while some are left: an event's entry lives at most two windows, not
// until the next resync (a pod re-annotated in a loop would otherwise keep one per pair it
// ever named).
func (c *Controller) pruneEvents() {
	now := time.Now()
	c.eventMu.Lock()
	defer c.eventMu.Unlock()
	for k, t := range c.lastEvent {
		if now.Sub(t) >= c.cfg.Debounce {
			delete(c.lastEvent, k)
		}
	}
	if len(c.lastEvent) == 0 {
		c.pruneArmed = false
		return
	}
	time.AfterFunc(c.cfg.Debounce, c.pruneEvents)
}

// debouncing is the number of pairs the debounce remembers.
func (c *Controller) debouncing() int {
	c.eventMu.Lock()
	defer c.eventMu.Unlock()
	return len(c.lastEvent)
}
