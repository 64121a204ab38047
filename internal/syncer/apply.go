package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// pairState is what the syncer remembers of a pair it wrote (or restored from a retention
// record).
type pairState struct {
	uid     types.UID
	hash    string // of the last successful apply; empty for a restored pair
	needed  bool   // the last decision wanted entries there
	applied bool   // the last decision's Secret was applied
	usage   Usage
}

func (c *Controller) processPair(ctx context.Context) bool {
	k, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(k)
	metrics.SyncerQueueDepth.Set(float64(c.queue.Len()))
	if err := c.syncPair(ctx, k); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "syncing pull secret", "kind", k.Kind, "name", k.Name, "namespace", k.Namespace)
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	return true
}

// takeForce takes a pair's forced resync: the decision that starts now honours it. A resync
// that arrives while the decision runs sets the flag again and queues the pair, which the work
// queue then decides once more after this one: the resync is never lost.
func (c *Controller) takeForce(k PairKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, force := c.forced[k]
	delete(c.forced, k)
	return force
}

// syncPair is gather → decide → act for one pair.
func (c *Controller) syncPair(ctx context.Context, k PairKey) (err error) {
	force := c.takeForce(k)
	defer func() {
		if err != nil && force {
			c.mu.Lock()
			c.forced[k] = struct{}{} // retried with the error
			c.mu.Unlock()
		}
	}()

	rk := k.resource()
	// Gather.
	r, resolution, err := c.resource(ctx, rk)
	if err != nil {
		return err
	}
	if r == nil {
		c.forgetPair(k)
		return nil
	}
	ns := namespaceMeta()
	if err := c.cache.Get(ctx, client.ObjectKey{Name: k.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			c.forgetPair(k)
			return nil
		}
		return fmt.Errorf("reading namespace from the cache: %w", err)
	}
	if ns.DeletionTimestamp != nil {
		c.forgetPair(k)
		return nil
	}
	var pods []Pod
	if r.Policy == v1alpha1.RewritePolicyOnFailure && r.Injecting() {
		var list corev1.PodList
		if err := c.cache.List(ctx, &list, client.InNamespace(k.Namespace), client.MatchingFields{sourceIndex: r.Source().String()}); err != nil {
			return fmt.Errorf("listing pods from the cache: %w", err)
		}
		pods = make([]Pod, len(list.Items))
		for i := range list.Items {
			pods[i] = PodFromObject(&list.Items[i])
		}
	}
	c.mu.Lock()
	var prev pairState
	st, known := c.pairs[k]
	if known && st.uid == r.UID {
		prev = *st
	} else {
		known = false
	}
	c.mu.Unlock()

	// Decide.
	now := c.cfg.Clock.Now()
	d, err := DecidePair(PairInput{
		Resource:        r,
		Resolution:      resolution,
		Namespace:       k.Namespace,
		NamespaceLabels: ns.Labels,
		Pods:            pods,
		Usage:           prev.usage,
		Now:             now,
		Retention:       c.cfg.Retention,
	})
	if err != nil {
		return err
	}
	if !d.Expiry.IsZero() {
		c.queue.AddAfter(k, d.Expiry.Sub(now)+time.Second)
	}
	if !d.Needed && !known {
		return nil
	}
	ac := ApplyConfiguration(d.Secret)
	hash, err := Hash(ac)
	if err != nil {
		return err
	}
	next := &pairState{uid: r.UID, hash: prev.hash, needed: d.Needed, usage: d.Usage}
	retentionChanged := !sameRetention(prev.usage, d.Usage)
	if known && !force && prev.hash == hash {
		// The last successful apply wrote exactly this.
		metrics.SyncerAppliesSkipped.Inc()
		next.applied = true
		c.storePair(k, next, !prev.applied || prev.needed != d.Needed, retentionChanged)
		return nil
	}

	// Act: the retention record names the namespace before its first Secret.
	c.retentionBeforeSecret(ctx, k, next)
	start := time.Now()
	_, err = c.core.Secrets(k.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	metrics.SyncerApplyDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		metrics.SyncerApplies.WithLabelValues(metrics.ResultError).Inc()
		if apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			c.forgetPair(k)
			return nil
		}
		next.applied = false
		c.storePair(k, next, true, retentionChanged)
		return fmt.Errorf("applying secret %s/%s: %w", k.Namespace, d.Secret.Name, err)
	}
	metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess).Inc()
	logr.FromContextOrDiscard(ctx).V(1).Info("applied pull secret", "secret", klog.KRef(k.Namespace, d.Secret.Name), "entries", len(d.Keys), "forced", force)
	next.hash, next.applied = hash, true
	c.storePair(k, next, !prev.applied || prev.needed != d.Needed, retentionChanged)
	return nil
}

// storePair remembers a pair's decision, queueing its resource's status and retention record
// when they change.
func (c *Controller) storePair(k PairKey, st *pairState, statusChanged, retentionChanged bool) {
	c.mu.Lock()
	c.pairs[k] = st
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	if statusChanged {
		c.statusQueue.AddAfter(k.resource(), c.cfg.StatusDelay)
	}
	if retentionChanged {
		c.retentionChanged(k.resource())
	}
}

func (c *Controller) forgetPair(k PairKey) {
	c.mu.Lock()
	st, known := c.pairs[k]
	delete(c.pairs, k)
	delete(c.forced, k)
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	if known {
		c.statusQueue.AddAfter(k.resource(), c.cfg.StatusDelay)
		if len(st.usage) > 0 {
			c.retentionChanged(k.resource())
		}
	}
}

// forgetResource forgets a deleted resource; the garbage collector deletes its Secrets and its
// retention record.
func (c *Controller) forgetResource(rk ResourceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pairs {
		if k.resource() == rk {
			delete(c.pairs, k)
			delete(c.forced, k)
		}
	}
	delete(c.memo, rk)
	delete(c.emitted, rk)
	delete(c.retention, rk)
	delete(c.retentionDirty, rk)
	delete(c.retentionFailed, rk)
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.providers.use(context.Background(), rk, nil)
}

// forgetNamespace forgets the pairs of a deleted namespace.
func (c *Controller) forgetNamespace(ns string) {
	c.mu.Lock()
	var touched, retained []ResourceKey
	for k, st := range c.pairs {
		if k.Namespace == ns {
			delete(c.pairs, k)
			delete(c.forced, k)
			touched = append(touched, k.resource())
			if len(st.usage) > 0 {
				retained = append(retained, k.resource())
			}
		}
	}
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	for _, rk := range touched {
		c.statusQueue.AddAfter(rk, c.cfg.StatusDelay)
	}
	for _, rk := range retained {
		c.retentionChanged(rk)
	}
}
