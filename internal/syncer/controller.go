package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// FieldManager is the server-side apply field manager of every Secret the syncer writes.
const FieldManager = "kuik-secret-syncer"

// Config tunes the controller.
type Config struct {
	// ClusterResourceNamespace holds the secretRef Secrets (and the leader election Lease).
	ClusterResourceNamespace string
	// Retention keeps an OnFailure entry no live pod uses any more (default 15 minutes).
	Retention time.Duration
	// ResyncPeriod re-applies every pair, whatever the hash says, restoring Secrets someone
	// else deleted or edited (default 10 minutes).
	ResyncPeriod time.Duration
	// Debounce collapses the events of one pair within this window into one apply
	// (default 200ms).
	Debounce time.Duration
	// Workers apply concurrently (default 16).
	Workers int
	// StatusDelay collapses status writes of one resource (default 1s).
	StatusDelay time.Duration
	// Clock is the retention's clock; nil is the real one.
	Clock clock.PassiveClock
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
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.StatusDelay == 0 {
		c.StatusDelay = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
}

// PairKey is the unit of work: one routing resource in one namespace.
type PairKey struct {
	Kind      routing.Kind
	Name      string
	Namespace string
}

func (k PairKey) resource() ResourceKey { return ResourceKey{Kind: k.Kind, Name: k.Name} }

// pairState is what the syncer remembers of a pair it wrote.
type pairState struct {
	uid     types.UID
	hash    string // of the last successful apply
	force   bool   // apply at the next decision whatever the hash says (resync)
	needed  bool   // the last decision wanted entries there
	applied bool   // the last decision's Secret was applied
	usage   Usage
}

// memoEntry caches a resource's view and resolution while neither the resource's spec nor its
// secretRef Secrets change.
type memoEntry struct {
	uid         types.UID
	generation  int64
	fingerprint string
	resource    *Resource
	resolution  *Resolution
}

// Controller keeps one pull Secret per (routing resource, namespace) pair. It reads informers
// (gather), decides with the pure functions of this package (decide), and writes with
// server-side apply, status patches and events (act).
type Controller struct {
	cfg      Config
	cache    cache.Cache
	secrets  corev1client.SecretsGetter
	status   client.Client
	recorder record.EventRecorder

	queue       workqueue.TypedRateLimitingInterface[PairKey]
	statusQueue workqueue.TypedRateLimitingInterface[ResourceKey]

	// lastEvent is when each pair last got an event, for the debounce.
	eventMu   sync.Mutex
	lastEvent map[PairKey]time.Time

	mu      sync.Mutex
	pairs   map[PairKey]*pairState
	memo    map[ResourceKey]*memoEntry
	emitted map[ResourceKey]map[LeftOut]struct{}
}

// NewController builds a controller over a cache configured with [CacheOptions]; secrets
// applies the pull Secrets, status patches the resources' status, recorder emits their events.
func NewController(cfg Config, c cache.Cache, secrets corev1client.SecretsGetter, status client.Client, recorder record.EventRecorder) *Controller {
	cfg.defaults()
	return &Controller{
		cfg:      cfg,
		cache:    c,
		secrets:  secrets,
		status:   status,
		recorder: recorder,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[PairKey](),
			workqueue.TypedRateLimitingQueueConfig[PairKey]{Name: "secret-syncer"}),
		statusQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ResourceKey](),
			workqueue.TypedRateLimitingQueueConfig[ResourceKey]{Name: "secret-syncer-status"}),
		lastEvent: map[PairKey]time.Time{},
		pairs:     map[PairKey]*pairState{},
		memo:      map[ResourceKey]*memoEntry{},
		emitted:   map[ResourceKey]map[LeftOut]struct{}{},
	}
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

// Start runs the controller until ctx ends: once the informers are synced it queues every
// pair (so every pair is applied once after a start), then follows the informers, and re-applies
// everything every ResyncPeriod.
func (c *Controller) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("secret-syncer")
	ctx = logr.NewContext(ctx, log)
	if !c.cache.WaitForCacheSync(ctx) {
		return errors.New("informers did not sync")
	}
	handlers := map[client.Object]toolscache.ResourceEventHandler{
		&v1alpha1.ImageAlternative{}: c.resourceHandler(ctx, routing.KindImageAlternative),
		&v1alpha1.ImageMirror{}:      c.resourceHandler(ctx, routing.KindImageMirror),
		namespaceMeta():              c.namespaceHandler(ctx),
		&corev1.Pod{}:                c.podHandler(),
		&corev1.Secret{}:             c.secretHandler(ctx),
	}
	for obj, h := range handlers {
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
	c.enqueueAll(ctx, false)
	log.Info("started", "clusterResourceNamespace", c.cfg.ClusterResourceNamespace, "workers", c.cfg.Workers)

	var wg sync.WaitGroup
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
	ticker := time.NewTicker(c.cfg.ResyncPeriod)
	defer ticker.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			log.V(1).Info("resync")
			c.pruneEvents()
			c.enqueueAll(ctx, true)
		}
	}
	c.queue.ShutDown()
	c.statusQueue.ShutDown()
	wg.Wait()
	return nil
}

// enqueueAll queues every pair the informers call for and every pair already written, and
// every resource's status; force makes the next decision of each known pair apply whatever
// its hash says.
func (c *Controller) enqueueAll(ctx context.Context, force bool) {
	if force {
		c.mu.Lock()
		for _, st := range c.pairs {
			st.force = true
		}
		c.mu.Unlock()
	}
	for _, rk := range c.resourceKeys(ctx) {
		c.enqueueResource(ctx, rk)
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
// already written, plus every namespace for Always, or the namespaces of its rewritten pods for
// OnFailure.
func (c *Controller) enqueueResource(ctx context.Context, rk ResourceKey) {
	c.statusQueue.AddAfter(rk, c.cfg.StatusDelay)
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
	for ns := range namespaces {
		c.enqueuePair(PairKey{Kind: rk.Kind, Name: rk.Name, Namespace: ns})
	}
}

// enqueuePair debounces on the leading edge: the first event of a pair is decided at once,
// the events that follow within the Debounce window collapse into one more decision at its
// end. A fan-out (a resource reaching every namespace) and the first pod of a namespace pay no
// delay; a rollout's burst of pods costs two decisions, the second usually skipped by the hash.
func (c *Controller) enqueuePair(k PairKey) {
	now := time.Now()
	c.eventMu.Lock()
	last, seen := c.lastEvent[k]
	c.lastEvent[k] = now
	c.eventMu.Unlock()
	if seen && now.Sub(last) < c.cfg.Debounce {
		c.queue.AddAfter(k, c.cfg.Debounce)
		return
	}
	c.queue.Add(k)
}

// pruneEvents forgets the pairs whose last event is older than the debounce window.
func (c *Controller) pruneEvents() {
	now := time.Now()
	c.eventMu.Lock()
	defer c.eventMu.Unlock()
	for k, t := range c.lastEvent {
		if now.Sub(t) >= c.cfg.Debounce {
			delete(c.lastEvent, k)
		}
	}
}

func (c *Controller) forgetResource(rk ResourceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pairs {
		if k.resource() == rk {
			delete(c.pairs, k)
		}
	}
	delete(c.memo, rk)
	delete(c.emitted, rk)
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
}

func (c *Controller) forgetNamespace(ns string) {
	c.mu.Lock()
	var touched []ResourceKey
	for k := range c.pairs {
		if k.Namespace == ns {
			delete(c.pairs, k)
			touched = append(touched, k.resource())
		}
	}
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	for _, rk := range touched {
		c.statusQueue.AddAfter(rk, c.cfg.StatusDelay)
	}
}

// resource returns the syncer's view of a routing resource and the resolution of its
// credentials, computed once per (spec generation, secretRef Secrets' versions). It returns
// nil, nil, nil for a resource that is gone or being deleted.
func (c *Controller) resource(ctx context.Context, rk ResourceKey) (*Resource, *Resolution, error) {
	var (
		meta metav1.Object
		conv func() (*Resource, error)
	)
	switch rk.Kind {
	case routing.KindImageAlternative:
		var obj v1alpha1.ImageAlternative
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &obj); err != nil {
			return nil, nil, client.IgnoreNotFound(err)
		}
		meta, conv = &obj, func() (*Resource, error) { return FromImageAlternative(&obj) }
	case routing.KindImageMirror:
		var obj v1alpha1.ImageMirror
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &obj); err != nil {
			return nil, nil, client.IgnoreNotFound(err)
		}
		meta, conv = &obj, func() (*Resource, error) { return FromImageMirror(&obj) }
	default:
		return nil, nil, fmt.Errorf("unknown kind %q", rk.Kind)
	}
	if meta.GetDeletionTimestamp() != nil {
		return nil, nil, nil
	}

	c.mu.Lock()
	m := c.memo[rk]
	c.mu.Unlock()
	if m == nil || m.uid != meta.GetUID() || m.generation != meta.GetGeneration() {
		r, err := conv()
		if err != nil {
			return nil, nil, err
		}
		m = &memoEntry{uid: meta.GetUID(), generation: meta.GetGeneration(), resource: r}
	} else {
		m = &memoEntry{uid: m.uid, generation: m.generation, resource: m.resource, fingerprint: m.fingerprint, resolution: m.resolution}
	}
	fp := c.secretsFingerprint(ctx, m.resource)
	if m.resolution == nil || fp != m.fingerprint {
		m.fingerprint = fp
		m.resolution = Resolve(m.resource, func(name string) (*corev1.Secret, bool) { return c.secret(ctx, name) })
	}
	c.mu.Lock()
	c.memo[rk] = m
	c.mu.Unlock()
	return m.resource, m.resolution, nil
}

func (c *Controller) secret(ctx context.Context, name string) (*corev1.Secret, bool) {
	var s corev1.Secret
	if err := c.cache.Get(ctx, client.ObjectKey{Namespace: c.cfg.ClusterResourceNamespace, Name: name}, &s); err != nil {
		return nil, false
	}
	return &s, true
}

// secretsFingerprint changes when one of the resource's secretRef Secrets changes.
func (c *Controller) secretsFingerprint(ctx context.Context, r *Resource) string {
	var b strings.Builder
	for i := range r.Entries {
		e := &r.Entries[i]
		if !e.Injects || e.Auth.SecretRef == nil {
			continue
		}
		b.WriteString(e.Auth.SecretRef.Name)
		b.WriteByte('=')
		if s, ok := c.secret(ctx, e.Auth.SecretRef.Name); ok {
			b.WriteString(string(s.UID))
			b.WriteByte('/')
			b.WriteString(s.ResourceVersion)
		}
		b.WriteByte(';')
	}
	return b.String()
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

// syncPair is gather → decide → act for one pair.
func (c *Controller) syncPair(ctx context.Context, k PairKey) error {
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
	if known && !prev.force && prev.hash == hash {
		// The last successful apply wrote exactly this.
		metrics.SyncerAppliesSkipped.Inc()
		next.applied = true
		c.storePair(k, next, !prev.applied || prev.needed != d.Needed)
		return nil
	}

	// Act.
	start := time.Now()
	_, err = c.secrets.Secrets(k.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	metrics.SyncerApplyDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		metrics.SyncerApplies.WithLabelValues(metrics.ResultError).Inc()
		if apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			c.forgetPair(k)
			return nil
		}
		next.applied, next.force = false, prev.force
		c.storePair(k, next, true)
		return fmt.Errorf("applying secret %s/%s: %w", k.Namespace, d.Secret.Name, err)
	}
	metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess).Inc()
	logr.FromContextOrDiscard(ctx).V(1).Info("applied pull secret", "secret", klog.KRef(k.Namespace, d.Secret.Name), "entries", len(d.Keys), "forced", prev.force)
	next.hash, next.applied = hash, true
	c.storePair(k, next, !prev.applied || prev.needed != d.Needed)
	return nil
}

func (c *Controller) storePair(k PairKey, st *pairState, statusChanged bool) {
	c.mu.Lock()
	c.pairs[k] = st
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	if statusChanged {
		c.statusQueue.AddAfter(k.resource(), c.cfg.StatusDelay)
	}
}

func (c *Controller) forgetPair(k PairKey) {
	c.mu.Lock()
	_, known := c.pairs[k]
	delete(c.pairs, k)
	metrics.SyncerPairs.Set(float64(len(c.pairs)))
	c.mu.Unlock()
	if known {
		c.statusQueue.AddAfter(k.resource(), c.cfg.StatusDelay)
	}
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
