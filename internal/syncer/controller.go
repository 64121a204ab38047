package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The controller is split by concern: this file holds its configuration, its queues and their
// debounce, and its lifecycle; memo.go the per-resource view and credential resolution;
// apply.go the per-pair gather → decide → act and the pair memory; persist.go the retention
// records; handlers.go the informer event handlers; status.go status and events.

// FieldManager is the server-side apply field manager of every Secret the syncer writes.
const FieldManager = "kuik-secret-syncer"

// Config tunes the controller.
type Config struct {
	// ClusterResourceNamespace holds the secretRef Secrets, the retention records and the
	// leader election Lease.
	ClusterResourceNamespace string
	// Retention keeps an OnFailure entry no live pod uses any more (default 15 minutes).
	Retention time.Duration
	// ResyncPeriod re-applies every pair, whatever the hash says, restoring Secrets someone
	// else deleted or edited (default 10 minutes).
	ResyncPeriod time.Duration
	// Debounce collapses the events of one pair within this window into one apply (default 200ms).
	Debounce time.Duration
	// RecordDelay collapses the changes of one resource's retention record into one write
	// (default Debounce). A graceful stop writes the pending ones; a crash loses at most
	// this window of uses. A namespace is named in the record before its first Secret,
	// without this delay.
	RecordDelay time.Duration
	// Workers apply concurrently (default 16).
	Workers int
	// StatusDelay collapses status writes of one resource (default 1s).
	StatusDelay time.Duration
	// FallbackDelay collapses the pod changes of one resource into one computation of its live
	// fallbacks (status.activeFallbacks, fallbacks, fallbackPods), written only when they
	// change: at most one write per resource per FallbackDelay (default 10s).
	FallbackDelay time.Duration
	// Clock is the retention's and the provider credentials' clock; nil is the real one.
	Clock clock.PassiveClock

	// Plugins runs the credential-provider plugins of the provider entries; nil leaves those
	// entries out (ProviderNotConfigured).
	Plugins *credentialprovider.Plugins
	// ProviderRenewFloor is the least time between two runs of a plugin for one image, and the
	// lifetime given to a credential the plugin asked not to cache is twice that (default 1 minute).
	ProviderRenewFloor time.Duration
	// ProviderRetry is the wait after a plugin failure, doubling up to 8× (default 30s).
	ProviderRetry time.Duration
	// ServiceAccountTokenTTL is the expiry asked for the tokens passed to plugins (default 10
	// minutes, the API server's minimum).
	ServiceAccountTokenTTL time.Duration
}

func (c *Config) defaults() {
	if c.Retention == 0 {
		c.Retention = 15 * time.Minute
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = 10 * time.Minute
	}
	if c.Debounce == 0 {
		c.Debounce = 200 * time.Millisecond
	}
	if c.RecordDelay == 0 {
		c.RecordDelay = c.Debounce
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.StatusDelay == 0 {
		c.StatusDelay = time.Second
	}
	if c.FallbackDelay <= 0 {
		c.FallbackDelay = DefaultFallbackDelay
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.ProviderRenewFloor <= 0 {
		c.ProviderRenewFloor = time.Minute
	}
	if c.ProviderRetry <= 0 {
		c.ProviderRetry = 30 * time.Second
	}
	if c.ServiceAccountTokenTTL <= 0 {
		c.ServiceAccountTokenTTL = 10 * time.Minute
	}
}

// DefaultFallbackDelay is Config.FallbackDelay's default.
const DefaultFallbackDelay = 10 * time.Second

// PairKey is the unit of work: one routing resource in one namespace.
type PairKey struct {
	Kind      routing.Kind
	Name      string
	Namespace string
}

func (k PairKey) resource() ResourceKey { return ResourceKey{Kind: k.Kind, Name: k.Name} }

// Controller keeps one pull Secret per (routing resource, namespace) pair. It reads informers
// (gather), decides with the pure functions of this package (decide), and writes with
// server-side apply, status patches and events (act).
type Controller struct {
	cfg      Config
	cache    cache.Cache
	core     corev1client.CoreV1Interface
	status   client.Client
	recorder record.EventRecorder

	queue       workqueue.TypedRateLimitingInterface[PairKey]
	statusQueue workqueue.TypedRateLimitingInterface[ResourceKey]
	recordQueue workqueue.TypedRateLimitingInterface[ResourceKey]

	// lastEvent is when each pair last got an event, for the debounce: an entry is pruned
	// once its window has passed (pruneArmed: a prune is scheduled), so the map holds only the
	// pairs that had an event within the last two windows.
	eventMu    sync.Mutex
	lastEvent  map[PairKey]time.Time
	pruneArmed bool

	mu    sync.Mutex
	pairs map[PairKey]*pairState
	// forced holds the pairs a resync wants applied whatever their hash says; a pair's
	// decision takes its flag when it starts (see syncPair).
	forced  map[PairKey]struct{}
	memo    map[ResourceKey]*memoEntry
	emitted map[ResourceKey]map[LeftOut]struct{}
	records map[ResourceKey]*recordState
	// recordDirty holds the resources whose retention record waits for its debounce: a
	// graceful stop writes them before the lease is released.
	recordDirty map[ResourceKey]struct{}
	// recordFailed is when a resource's record last failed to be written before a first Secret.
	recordFailed map[ResourceKey]time.Time
	// recordMu serializes the writes of retention records.
	recordMu sync.Mutex

	// providers keeps the provider credentials.
	providers *providerKeeper
	// fallbacks keeps the resources' live fallbacks (fallbacks_controller.go).
	fallbacks *fallbackTracker
	// graceful, when set, is done when the process stops on purpose (not on a lost lease):
	// only then are the pending retention records written at the stop.
	graceful context.Context
}

// NewController builds a controller over a cache configured with [CacheOptions]; core applies
// the pull Secrets and the retention records, status patches the resources' status, recorder
// emits their events.
func NewController(cfg Config, c cache.Cache, core corev1client.CoreV1Interface, status client.Client, recorder record.EventRecorder) *Controller {
	cfg.defaults()
	ctrl := &Controller{
		cfg:      cfg,
		cache:    c,
		core:     core,
		status:   status,
		recorder: recorder,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[PairKey](),
			workqueue.TypedRateLimitingQueueConfig[PairKey]{Name: "secret-syncer"}),
		statusQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ResourceKey](),
			workqueue.TypedRateLimitingQueueConfig[ResourceKey]{Name: "secret-syncer-status"}),
		recordQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ResourceKey](),
			workqueue.TypedRateLimitingQueueConfig[ResourceKey]{Name: "secret-syncer-retention"}),
		lastEvent: map[PairKey]time.Time{},
		pairs:     map[PairKey]*pairState{},
		forced:    map[PairKey]struct{}{},
		memo:      map[ResourceKey]*memoEntry{},
		emitted:   map[ResourceKey]map[LeftOut]struct{}{},
		records:   map[ResourceKey]*recordState{},

		recordDirty:  map[ResourceKey]struct{}{},
		recordFailed: map[ResourceKey]time.Time{},
		fallbacks:    newFallbackTracker(),
	}
	ctrl.providers = newProviderKeeper(cfg, core)
	ctrl.providers.existing = ctrl.secret
	ctrl.providers.changed = func(ctx context.Context, users []ResourceKey) {
		for _, rk := range users {
			ctrl.enqueueResource(ctx, rk)
		}
	}
	return ctrl
}

// Prepare registers the informers and the pod index; call it before the cache starts.
func (c *Controller) Prepare(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &corev1.Pod{}, sourceIndex, podSourceValues); err != nil {
		return fmt.Errorf("indexing pods by rewritten-by: %w", err)
	}
	for _, obj := range c.watched() {
		if _, err := c.cache.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	return nil
}

func (c *Controller) watched() []client.Object {
	return []client.Object{&v1alpha1.ImageAlternative{}, &v1alpha1.ImageMirror{}, namespaceMeta(), &corev1.Pod{}, &corev1.Secret{}}
}

// NeedLeaderElection: only the leader writes.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs the controller until ctx ends: once the informers are synced it restores the
// retention records, queues every pair (so every pair is applied once after a start), then
// follows the informers, and re-applies everything every ResyncPeriod.
func (c *Controller) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("secret-syncer")
	ctx = logr.NewContext(ctx, log)
	if !c.cache.WaitForCacheSync(ctx) {
		return errors.New("informers did not sync")
	}
	// Before any decision, so that the first one of each pair already knows what the last
	// leader retained.
	c.restoreRecords(ctx)
	handlers := map[client.Object]toolscache.ResourceEventHandler{
		&v1alpha1.ImageAlternative{}: c.resourceHandler(ctx, routing.KindImageAlternative),
		&v1alpha1.ImageMirror{}:      c.resourceHandler(ctx, routing.KindImageMirror),
		namespaceMeta():              c.namespaceHandler(ctx),
		&corev1.Pod{}:                c.podHandler(ctx),
		&corev1.Secret{}:             c.secretHandler(ctx),
	}
	for _, hs := range []map[client.Object]toolscache.ResourceEventHandler{handlers, c.fallbackHandlers(ctx)} {
		for obj, h := range hs {
			inf, err := c.cache.GetInformer(ctx, obj)
			if err != nil {
				return fmt.Errorf("informer for %T: %w", obj, err)
			}
			reg, err := inf.AddEventHandler(h)
			if err != nil {
				return fmt.Errorf("event handler for %T: %w", obj, err)
			}
			defer func() { _ = inf.RemoveEventHandler(reg) }()
		}
	}
	c.enqueueAll(ctx)
	c.enqueueAllFallbacks(ctx)
	c.providers.dirtyAll(c.providerSecretNames(ctx))
	log.Info("started", "clusterResourceNamespace", c.cfg.ClusterResourceNamespace, "workers", c.cfg.Workers,
		"credentialProviders", c.cfg.Plugins != nil)

	var wg sync.WaitGroup
	wg.Go(func() { c.providers.run(ctx, 4) })
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processPair(ctx) {
			}
		})
	}
	wg.Go(func() {
		for c.processStatus(ctx) {
		}
	})
	wg.Go(func() {
		for c.processRecord(ctx) {
		}
	})
	wg.Go(func() { c.runFallbacks(ctx) })
	ticker := time.NewTicker(c.cfg.ResyncPeriod)
	defer ticker.Stop()
	var resyncing atomic.Bool
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			if !resyncing.CompareAndSwap(false, true) {
				log.Info("resync skipped: the previous one is still feeding its pairs")
				continue
			}
			log.V(1).Info("resync")
			wg.Go(func() {
				defer resyncing.Store(false)
				c.resync(ctx)
			})
		}
	}
	c.queue.ShutDown()
	c.statusQueue.ShutDown()
	c.recordQueue.ShutDown()
	c.fallbacks.queue.ShutDown()
	wg.Wait()
	// On a graceful stop this returns before the manager releases the lease: the next leader
	// restores what this one decided last, also the uses still waiting for their debounce. A
	// leader that lost its lease writes nothing more: another may lead already.
	if c.graceful == nil || c.graceful.Err() != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordFlushTimeout)
		defer cancel()
		c.flushRecords(fctx)
	}
	return nil
}

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

// providerSecretNames lists the kuik-provider-* Secrets of the cluster resource namespace.
func (c *Controller) providerSecretNames(ctx context.Context) []string {
	var list corev1.SecretList
	if err := c.cache.List(ctx, &list, client.InNamespace(c.cfg.ClusterResourceNamespace)); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing secrets from the cache")
		return nil
	}
	var names []string
	for i := range list.Items {
		if s := &list.Items[i]; strings.HasPrefix(s.Name, v1alpha1.ProviderSecretPrefix) && isOurs(s) {
			names = append(names, s.Name)
		}
	}
	return names
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

// namespaceCount is the number of namespaces where the resource's Secret holds what it needs.
func (c *Controller) namespaceCount(rk ResourceKey, uid types.UID) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int32
	for k, st := range c.pairs {
		if k.resource() == rk && st.uid == uid && st.needed && st.applied {
			n++
		}
	}
	return n
}
