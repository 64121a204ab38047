package syncer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// retentionState is what the syncer remembers of a retention record it wrote or restored.
type retentionState struct {
	uid  types.UID
	hash string
	// namespaces are those the retention record names, as written or restored.
	namespaces map[string]struct{}
}

// restoreBackoff bounds how long a start waits for the retention records: past it the syncer
// runs without them (retention restarts from the live pods) rather than not at all.
var restoreBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6}

// restoreRetention reads the retention records the previous leader wrote (listed from the API
// server, not the cache, so that what it wrote just before it stopped is there) and makes their
// pairs known with their usage: their first decision keeps what is still within the retention,
// also in namespaces where no pod needs the resource any more.
func (c *Controller) restoreRetention(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	selector := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}).String()
	var restored []Retention
	err := wait.ExponentialBackoffWithContext(ctx, restoreBackoff, func(ctx context.Context) (bool, error) {
		list, err := c.core.ConfigMaps(c.cfg.ClusterResourceNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			log.Error(err, "listing retention records")
			return false, nil
		}
		restored = restored[:0]
		for i := range list.Items {
			rec, err := ParseRetention(&list.Items[i])
			if err != nil {
				log.Error(err, "reading retention record", "configMap", klog.KObj(&list.Items[i]))
			}
			if rec.Resource.Name == "" {
				continue
			}
			restored = append(restored, rec)
		}
		return true, nil
	})
	if err != nil {
		log.Error(err, "retention records not restored: entries are retained from the live pods only")
		return
	}
	// A retention record outlives its resource until the garbage collector catches up; a resource
	// recreated under the same name starts afresh.
	restored = slices.DeleteFunc(restored, func(rec Retention) bool {
		r, _, err := c.resource(ctx, rec.Resource)
		return err != nil || r == nil || r.UID != rec.UID
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	pairs := 0
	for _, rec := range restored {
		for ns, u := range rec.Usage {
			k := PairKey{Kind: rec.Resource.Kind, Name: rec.Resource.Name, Namespace: ns}
			if _, known := c.pairs[k]; !known {
				c.pairs[k] = &pairState{uid: rec.UID, usage: u}
				pairs++
			}
		}
		c.retention[rec.Resource] = &retentionState{uid: rec.UID, namespaces: setOf(maps.Keys(rec.Usage))}
	}
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	log.Info("restored retention records", "records", len(restored), "pairs", pairs)
}

// retentionFlushTimeout bounds the writes of a graceful stop's pending retention records, made
// while this replica still holds the lease (a leader that lost it writes none).
const retentionFlushTimeout = 2 * time.Second

// retentionChanged marks a resource's retention record as to be written after the debounce.
func (c *Controller) retentionChanged(rk ResourceKey) {
	c.mu.Lock()
	c.retentionDirty[rk] = struct{}{}
	c.mu.Unlock()
	c.retentionQueue.AddAfter(rk, c.cfg.RetentionDelay)
}

// flushRetention writes the retention records still waiting for their debounce or a retry.
func (c *Controller) flushRetention(ctx context.Context) {
	c.mu.Lock()
	pending := slices.Collect(maps.Keys(c.retentionDirty))
	c.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx)
	for _, rk := range pending {
		if err := c.syncRetention(ctx, rk); err != nil {
			log.Error(err, "writing retention record at stop: the next leader retains from the live pods", "kind", rk.Kind, "name", rk.Name)
		}
	}
	if len(pending) > 0 {
		log.Info("wrote pending retention records at stop", "records", len(pending))
	}
}

func (c *Controller) processRetention(ctx context.Context) bool {
	rk, shutdown := c.retentionQueue.Get()
	if shutdown {
		return false
	}
	defer c.retentionQueue.Done(rk)
	if err := c.syncRetention(ctx, rk); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "writing retention record", "kind", rk.Kind, "name", rk.Name)
		c.retentionQueue.AddRateLimited(rk)
		return true
	}
	c.retentionQueue.Forget(rk)
	return true
}

// retentionBeforeSecret writes the retention record of a pair's resource at once, with the usage st
// is about to apply, when the retention record does not name the pair's namespace yet: before the
// pair's first Secret there. Written after the debounce only, a leader killed within it would leave
// the next one a retention record without the namespace, and a namespace with no pod left would
// never be decided again, its Secret keeping the entries past their retention. Concurrent first
// Secrets of one resource share a write (each waits for the one before, which named them). A failed
// write is logged and the Secret applied anyway, as before: the debounced write retries.
func (c *Controller) retentionBeforeSecret(ctx context.Context, k PairKey, st *pairState) {
	if len(retainedUses(st.usage)) == 0 {
		return
	}
	rk := k.resource()
	c.mu.Lock()
	named := c.retentionNames(rk, st.uid, k.Namespace)
	if !named {
		pending := *st
		c.pairs[k] = &pending
	}
	c.mu.Unlock()
	if named {
		return
	}
	c.retentionMu.Lock()
	defer c.retentionMu.Unlock()
	c.mu.Lock()
	named = c.retentionNames(rk, st.uid, k.Namespace)
	c.mu.Unlock()
	if named {
		return
	}
	// A write that failed lately (a slow or refusing API server) is not tried again on every
	// decision, and one that hangs holds the other resources' first Secrets for a bounded time.
	c.mu.Lock()
	failed, recent := c.retentionFailed[rk]
	c.mu.Unlock()
	if recent && time.Since(failed) < retentionBeforeSecretBackoff {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, retentionBeforeSecretTimeout)
	defer cancel()
	err := c.writeRetention(wctx, rk)
	c.mu.Lock()
	if err != nil {
		c.retentionFailed[rk] = time.Now()
	} else {
		delete(c.retentionFailed, rk)
	}
	c.mu.Unlock()
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "writing retention record before a first secret: the debounced write retries",
			"kind", rk.Kind, "name", rk.Name, "namespace", k.Namespace)
	}
}

// The retention record written before a first Secret waits at most retentionBeforeSecretTimeout,
// and after a failure the resource's first Secrets go without it for retentionBeforeSecretBackoff
// (the debounced write retries meanwhile).
const (
	retentionBeforeSecretTimeout = 5 * time.Second
	retentionBeforeSecretBackoff = 30 * time.Second
)

// retentionNames reports whether the resource's retention record, as last written or restored,
// names ns; c.mu is held.
func (c *Controller) retentionNames(rk ResourceKey, uid types.UID, ns string) bool {
	rs := c.retention[rk]
	if rs == nil || rs.uid != uid {
		return false
	}
	_, ok := rs.namespaces[ns]
	return ok
}

func setOf(seq func(func(string) bool)) map[string]struct{} {
	out := map[string]struct{}{}
	for s := range seq {
		out[s] = struct{}{}
	}
	return out
}

// syncRetention applies a resource's retention record from the usage of its pairs, when it
// changed. A resource that never had one gets none until an entry is used.
func (c *Controller) syncRetention(ctx context.Context, rk ResourceKey) error {
	c.retentionMu.Lock()
	defer c.retentionMu.Unlock()
	return c.writeRetention(ctx, rk)
}

// writeRetention is syncRetention with c.retentionMu held.
func (c *Controller) writeRetention(ctx context.Context, rk ResourceKey) error {
	r, _, err := c.resource(ctx, rk)
	if err != nil {
		return err
	}
	if r == nil {
		return nil // deleted: the garbage collector deletes the retention record
	}
	usage := map[string]Usage{}
	c.mu.Lock()
	delete(c.retentionDirty, rk)
	for k, st := range c.pairs {
		if k.resource() == rk && st.uid == r.UID && len(st.usage) > 0 {
			usage[k.Namespace] = st.usage
		}
	}
	prev := c.retention[rk]
	c.mu.Unlock()
	if len(usage) == 0 && prev == nil {
		return nil
	}
	ac, err := RetentionApplyConfiguration(r, c.cfg.ClusterResourceNamespace, usage)
	if err != nil {
		return err
	}
	hash, err := RetentionHash(ac)
	if err != nil {
		return err
	}
	if prev != nil && prev.uid == r.UID && prev.hash == hash {
		return nil
	}
	if _, err := c.core.ConfigMaps(c.cfg.ClusterResourceNamespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		c.mu.Lock()
		c.retentionDirty[rk] = struct{}{}
		c.mu.Unlock()
		metrics.SyncerRetentionWrites.WithLabelValues(metrics.ResultError).Inc()
		return fmt.Errorf("applying retention record %s/%s: %w", c.cfg.ClusterResourceNamespace, *ac.Name, err)
	}
	metrics.SyncerRetentionWrites.WithLabelValues(metrics.ResultSuccess).Inc()
	c.mu.Lock()
	named := map[string]struct{}{}
	for ns, u := range usage {
		if len(retainedUses(u)) > 0 {
			named[ns] = struct{}{}
		}
	}
	c.retention[rk] = &retentionState{uid: r.UID, hash: hash, namespaces: named}
	c.mu.Unlock()
	return nil
}
