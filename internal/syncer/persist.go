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

// recordState is what the syncer remembers of a retention record it wrote or restored.
type recordState struct {
	uid  types.UID
	hash string
}

// restoreBackoff bounds how long a start waits for the retention records: past it the syncer
// runs without them (retention restarts from the live pods) rather than not at all.
var restoreBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 6}

// restoreRecords reads the retention records the previous leader wrote (listed from the API
// server, not the cache, so that what it wrote just before it stopped is there) and makes their
// pairs known with their usage: their first decision keeps what is still within the retention,
// also in namespaces where no pod needs the resource any more.
func (c *Controller) restoreRecords(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	selector := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}).String()
	var records []Record
	err := wait.ExponentialBackoffWithContext(ctx, restoreBackoff, func(ctx context.Context) (bool, error) {
		list, err := c.core.ConfigMaps(c.cfg.ClusterResourceNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			log.Error(err, "listing retention records")
			return false, nil
		}
		records = records[:0]
		for i := range list.Items {
			rec, err := ParseRecord(&list.Items[i])
			if err != nil {
				log.Error(err, "reading retention record", "configMap", klog.KObj(&list.Items[i]))
			}
			if rec.Resource.Name == "" {
				continue
			}
			records = append(records, rec)
		}
		return true, nil
	})
	if err != nil {
		log.Error(err, "retention records not restored: entries are retained from the live pods only")
		return
	}
	// A record outlives its resource until the garbage collector catches up; a resource
	// recreated under the same name starts afresh.
	records = slices.DeleteFunc(records, func(rec Record) bool {
		r, _, err := c.resource(ctx, rec.Resource)
		return err != nil || r == nil || r.UID != rec.UID
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	pairs := 0
	for _, rec := range records {
		for ns, u := range rec.Usage {
			k := PairKey{Kind: rec.Resource.Kind, Name: rec.Resource.Name, Namespace: ns}
			if _, known := c.pairs[k]; !known {
				c.pairs[k] = &pairState{uid: rec.UID, usage: u}
				pairs++
			}
		}
		c.records[rec.Resource] = &recordState{uid: rec.UID}
	}
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	log.Info("restored retention records", "records", len(records), "pairs", pairs)
}

// recordFlushTimeout bounds the writes of a graceful stop's pending retention records.
const recordFlushTimeout = 5 * time.Second

// recordChanged marks a resource's retention record as to be written after the debounce.
func (c *Controller) recordChanged(rk ResourceKey) {
	c.mu.Lock()
	c.recordDirty[rk] = struct{}{}
	c.mu.Unlock()
	c.recordQueue.AddAfter(rk, c.cfg.RecordDelay)
}

// flushRecords writes the retention records still waiting for their debounce or a retry.
func (c *Controller) flushRecords(ctx context.Context) {
	c.mu.Lock()
	pending := slices.Collect(maps.Keys(c.recordDirty))
	c.mu.Unlock()
	log := logr.FromContextOrDiscard(ctx)
	for _, rk := range pending {
		if err := c.syncRecord(ctx, rk); err != nil {
			log.Error(err, "writing retention record at stop: the next leader retains from the live pods", "kind", rk.Kind, "name", rk.Name)
		}
	}
	if len(pending) > 0 {
		log.Info("wrote pending retention records at stop", "records", len(pending))
	}
}

func (c *Controller) processRecord(ctx context.Context) bool {
	rk, shutdown := c.recordQueue.Get()
	if shutdown {
		return false
	}
	defer c.recordQueue.Done(rk)
	if err := c.syncRecord(ctx, rk); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "writing retention record", "kind", rk.Kind, "name", rk.Name)
		c.recordQueue.AddRateLimited(rk)
		return true
	}
	c.recordQueue.Forget(rk)
	return true
}

// syncRecord applies a resource's retention record from the usage of its pairs, when it
// changed. A resource that never had one gets none until an entry is used.
func (c *Controller) syncRecord(ctx context.Context, rk ResourceKey) error {
	r, _, err := c.resource(ctx, rk)
	if err != nil {
		return err
	}
	if r == nil {
		return nil // deleted: the garbage collector deletes the record
	}
	usage := map[string]Usage{}
	c.mu.Lock()
	delete(c.recordDirty, rk)
	for k, st := range c.pairs {
		if k.resource() == rk && st.uid == r.UID && len(st.usage) > 0 {
			usage[k.Namespace] = st.usage
		}
	}
	prev := c.records[rk]
	c.mu.Unlock()
	if len(usage) == 0 && prev == nil {
		return nil
	}
	ac, err := RecordApplyConfiguration(r, c.cfg.ClusterResourceNamespace, usage)
	if err != nil {
		return err
	}
	hash, err := RecordHash(ac)
	if err != nil {
		return err
	}
	if prev != nil && prev.uid == r.UID && prev.hash == hash {
		return nil
	}
	if _, err := c.core.ConfigMaps(c.cfg.ClusterResourceNamespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		c.mu.Lock()
		c.recordDirty[rk] = struct{}{}
		c.mu.Unlock()
		metrics.SyncerRetentionWrites.WithLabelValues(metrics.ResultError).Inc()
		return fmt.Errorf("applying retention record %s/%s: %w", c.cfg.ClusterResourceNamespace, *ac.Name, err)
	}
	metrics.SyncerRetentionWrites.WithLabelValues(metrics.ResultSuccess).Inc()
	c.mu.Lock()
	c.records[rk] = &recordState{uid: r.UID, hash: hash}
	c.mu.Unlock()
	return nil
}
