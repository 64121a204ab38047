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
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The controller is split by concern: this file holds its state and lifecycle; config.go its
// configuration; enqueue.go what queues a pair, and the debounce; memo.go the per-resource view and
// credential resolution; apply.go the per-pair gather → decide → act and the pair memory;
// retention_controller.go the retention records; handlers.go the informer event handlers; status.go
// status and events.

// FieldManager is the server-side apply field manager of every Secret the syncer writes.
const FieldManager = "kuik-secret-syncer"

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

	queue          workqueue.TypedRateLimitingInterface[PairKey]
	statusQueue    workqueue.TypedRateLimitingInterface[ResourceKey]
	retentionQueue workqueue.TypedRateLimitingInterface[ResourceKey]

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
	forced    map[PairKey]struct{}
	memo      map[ResourceKey]*memoEntry
	emitted   map[ResourceKey]map[LeftOut]struct{}
	retention map[ResourceKey]*retentionState
	// retentionDirty holds the resources whose retention record waits for its debounce: a
	// graceful stop writes them before the lease is released.
	retentionDirty map[ResourceKey]struct{}
	// retentionFailed is when a resource's retention record last failed to be written before a
	// first Secret.
	retentionFailed map[ResourceKey]time.Time
	// retentionMu serializes the writes of retention records.
	retentionMu sync.Mutex

	// providers keeps the provider credentials.
	providers *providerKeeper
	// fallbacks keeps the resources' live fallbacks (fallbacks_controller.go).
	fallbacks *fallbackTracker
	// availability checks what is ahead of the live fallbacks (availability.go); nil when off.
	availability *availability
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
		retentionQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ResourceKey](),
			workqueue.TypedRateLimitingQueueConfig[ResourceKey]{Name: "secret-syncer-retention"}),
		lastEvent: map[PairKey]time.Time{},
		pairs:     map[PairKey]*pairState{},
		forced:    map[PairKey]struct{}{},
		memo:      map[ResourceKey]*memoEntry{},
		emitted:   map[ResourceKey]map[LeftOut]struct{}{},
		retention: map[ResourceKey]*retentionState{},

		retentionDirty:  map[ResourceKey]struct{}{},
		retentionFailed: map[ResourceKey]time.Time{},
		fallbacks:       newFallbackTracker(),
	}
	if cfg.Availability.Interval > 0 {
		ctrl.availability = newAvailability(cfg.Availability, cfg.Clock.Now)
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
	c.restoreRetention(ctx)
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
		for c.processRetention(ctx) {
		}
	})
	wg.Go(func() { c.runFallbacks(ctx) })
	if c.availability != nil {
		wg.Go(func() { c.runAvailability(ctx) })
	}
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
	c.retentionQueue.ShutDown()
	c.fallbacks.queue.ShutDown()
	wg.Wait()
	// On a graceful stop this returns before the manager releases the lease: the next leader
	// restores what this one decided last, also the uses still waiting for their debounce. A
	// leader that lost its lease writes nothing more: another may lead already.
	if c.graceful == nil || c.graceful.Err() != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retentionFlushTimeout)
		defer cancel()
		c.flushRetention(fctx)
	}
	return nil
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
