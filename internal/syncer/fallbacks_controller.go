package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// fallbackTracker keeps the live fallbacks of every resource written, recomputed per resource
// from the pod cache (through its rewritten-by index) at most once per Config.FallbackDelay:
// an event only queues the resource after the delay, and the events that arrive while it waits
// join it. Nothing per pod is kept: the informer cache is the only state, so no aggregate can
// drift from it, and a restart or a new leader computes the same status from the same pods.
type fallbackTracker struct {
	queue workqueue.TypedRateLimitingInterface[ResourceKey]

	mu sync.Mutex
	// gauges holds the resources whose FallbackPods gauge this process set, deleted when the
	// resource goes or the controller stops (a standby exports none).
	gauges map[ResourceKey]struct{}
}

func newFallbackTracker() *fallbackTracker {
	return &fallbackTracker{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[ResourceKey](),
			workqueue.TypedRateLimitingQueueConfig[ResourceKey]{Name: "secret-syncer-fallbacks"}),
		gauges: map[ResourceKey]struct{}{},
	}
}

// enqueueFallbacks queues a resource's fallbacks after the delay; a resource already waiting
// keeps its earlier time, so a burst of events costs one computation.
func (c *Controller) enqueueFallbacks(rk ResourceKey) {
	c.fallbacks.queue.AddAfter(rk, c.cfg.FallbackDelay)
}

// enqueueAllFallbacks computes every resource's fallbacks at once: after a start, a status
// left by the last leader for pods that are gone is corrected without waiting for an event.
func (c *Controller) enqueueAllFallbacks(ctx context.Context) {
	for _, rk := range c.resourceKeys(ctx) {
		c.fallbacks.queue.Add(rk)
	}
}

func (c *Controller) runFallbacks(ctx context.Context) {
	defer c.clearFallbackGauges()
	for c.processFallbacks(ctx) {
	}
}

func (c *Controller) processFallbacks(ctx context.Context) bool {
	rk, shutdown := c.fallbacks.queue.Get()
	if shutdown {
		return false
	}
	defer c.fallbacks.queue.Done(rk)
	if err := c.syncFallbacks(ctx, rk); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "updating live fallbacks", "kind", rk.Kind, "name", rk.Name)
		c.fallbacks.queue.AddRateLimited(rk)
		return true
	}
	c.fallbacks.queue.Forget(rk)
	return true
}

// syncFallbacks is gather → decide → act for one resource's live fallbacks: it sets the
// gauge, and patches the three status fields only when they differ from what the object holds.
func (c *Controller) syncFallbacks(ctx context.Context, rk ResourceKey) error {
	// Gather.
	var (
		current *v1alpha1.RoutingStatus
		meta    metav1.Object
		fresh   client.Object
	)
	switch rk.Kind {
	case routing.KindImageAlternative:
		var o v1alpha1.ImageAlternative
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &o); err != nil {
			c.forgetFallbacks(rk)
			return client.IgnoreNotFound(err)
		}
		current, meta = &o.Status, &o
		fresh = &v1alpha1.ImageAlternative{ObjectMeta: metav1.ObjectMeta{Name: rk.Name}}
	case routing.KindImageMirror:
		var o v1alpha1.ImageMirror
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &o); err != nil {
			c.forgetFallbacks(rk)
			return client.IgnoreNotFound(err)
		}
		current, meta = &o.Status.RoutingStatus, &o
		fresh = &v1alpha1.ImageMirror{ObjectMeta: metav1.ObjectMeta{Name: rk.Name}}
	default:
		return nil // a rewritten-by value names a kind that does not exist
	}
	if meta.GetDeletionTimestamp() != nil {
		c.forgetFallbacks(rk)
		return nil
	}
	r, _, err := c.resource(ctx, rk)
	switch {
	case errors.Is(err, ErrInvalidResource):
		r = nil // the webhook routes nothing to it: no fallback
	case err != nil:
		return err
	case r == nil:
		c.forgetFallbacks(rk)
		return nil
	case r.UID != meta.GetUID():
		return nil // the cache moved on; the event that moved it queued another pass
	}
	var pods []FallbackPod
	if r != nil && !r.DryRun {
		var list corev1.PodList
		if err := c.cache.List(ctx, &list, client.MatchingFields{sourceIndex: r.Source().String()}); err != nil {
			return fmt.Errorf("listing pods from the cache: %w", err)
		}
		pods = make([]FallbackPod, len(list.Items))
		for i := range list.Items {
			pods[i] = FallbackPod{Pod: PodFromObject(&list.Items[i]), Created: list.Items[i].CreationTimestamp}
		}
	}
	namespaces := map[string]labels.Set{}
	namespaceLabels := func(ns string) (labels.Set, bool) {
		if l, ok := namespaces[ns]; ok {
			return l, l != nil
		}
		m := namespaceMeta()
		if err := c.cache.Get(ctx, client.ObjectKey{Name: ns}, m); err != nil {
			namespaces[ns] = nil
			return nil, false
		}
		l := labels.Set(m.Labels)
		if l == nil {
			l = labels.Set{}
		}
		namespaces[ns] = l
		return l, true
	}

	// Decide.
	f := DecideFallbacks(r, pods, namespaceLabels)

	// Act.
	if c.availability != nil {
		c.availability.set(rk, f.Ahead)
	}
	c.setFallbackGauge(rk, f.Pods)
	log := logr.FromContextOrDiscard(ctx)
	if f.Holds(current) {
		log.V(1).Info("live fallbacks unchanged", "kind", rk.Kind, "name", rk.Name, "fallbacks", f.Total, "pods", f.Pods)
		return nil
	}
	patch, err := f.MergePatch()
	if err != nil {
		return err
	}
	if err := c.status.Status().Patch(ctx, fresh, client.RawPatch(types.MergePatchType, patch)); err != nil {
		metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultError).Inc()
		return client.IgnoreNotFound(fmt.Errorf("patching the live fallbacks of %s: %w", rk, err))
	}
	metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultSuccess).Inc()
	log.V(1).Info("wrote live fallbacks", "kind", rk.Kind, "name", rk.Name, "fallbacks", f.Total, "pods", f.Pods)
	return nil
}

func (c *Controller) setFallbackGauge(rk ResourceKey, pods int32) {
	c.fallbacks.mu.Lock()
	defer c.fallbacks.mu.Unlock()
	c.fallbacks.gauges[rk] = struct{}{}
	metrics.FallbackPods.WithLabelValues(string(rk.Kind), rk.Name).Set(float64(pods))
}

// forgetFallbacks drops the gauge of a resource that is gone or being deleted.
func (c *Controller) forgetFallbacks(rk ResourceKey) {
	if c.availability != nil {
		c.availability.forget(rk)
	}
	c.fallbacks.mu.Lock()
	defer c.fallbacks.mu.Unlock()
	if _, ok := c.fallbacks.gauges[rk]; ok {
		delete(c.fallbacks.gauges, rk)
		metrics.FallbackPods.DeleteLabelValues(string(rk.Kind), rk.Name)
	}
}

// clearFallbackGauges drops every gauge this process set: a leader that stops (or loses its
// lease) no longer knows.
func (c *Controller) clearFallbackGauges() {
	c.fallbacks.mu.Lock()
	keys := slices.Collect(maps.Keys(c.fallbacks.gauges))
	c.fallbacks.mu.Unlock()
	for _, rk := range keys {
		c.forgetFallbacks(rk)
	}
}

// fallbackHandlers are the informer handlers that queue a resource's fallbacks: a change of
// one of its rewritten pods that could change what counts (labels, kuik's annotations,
// images, phase, deletion), a change of a namespace's labels (its namespaceSelector) for the
// resources with pods there, and a change of the resource's spec, or of the three fields
// (someone else's write is corrected).
func (c *Controller) fallbackHandlers(ctx context.Context) map[client.Object]toolscache.ResourceEventHandler {
	return map[client.Object]toolscache.ResourceEventHandler{
		&v1alpha1.ImageAlternative{}: c.fallbackResourceHandler(routing.KindImageAlternative),
		&v1alpha1.ImageMirror{}:      c.fallbackResourceHandler(routing.KindImageMirror),
		&corev1.Pod{}:                c.fallbackPodHandler(ctx),
		namespaceMeta():              c.fallbackNamespaceHandler(ctx),
	}
}

func (c *Controller) fallbackPodHandler(ctx context.Context) toolscache.ResourceEventHandler {
	enqueue := func(obj any) {
		if m := objectMeta(obj); m != nil {
			for _, s := range c.existingSources(ctx, m.GetAnnotations()) {
				c.enqueueFallbacks(ResourceKey{Kind: s.Kind, Name: s.Name})
			}
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(*corev1.Pod)
			n, okNew := newObj.(*corev1.Pod)
			if okOld && okNew && !fallbackRelevant(o, n) {
				return
			}
			enqueue(oldObj)
			enqueue(newObj)
		},
		DeleteFunc: enqueue,
	}
}

// fallbackRelevant reports whether a pod update may change what it counts for (of what
// TransformPod keeps, everything but the resource version).
func fallbackRelevant(o, n *corev1.Pod) bool {
	return !labels.Equals(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations) ||
		o.Status.Phase != n.Status.Phase || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		!equality.Semantic.DeepEqual(o.Spec, n.Spec)
}

func (c *Controller) fallbackNamespaceHandler(ctx context.Context) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, n := objectMeta(oldObj), objectMeta(newObj)
			if o == nil || n == nil || labels.Equals(o.GetLabels(), n.GetLabels()) {
				return
			}
			var pods corev1.PodList
			if err := c.cache.List(ctx, &pods, client.InNamespace(n.GetName())); err != nil {
				logr.FromContextOrDiscard(ctx).Error(err, "listing pods from the cache")
				return
			}
			queued := map[routing.Source]struct{}{}
			for i := range pods.Items {
				for _, s := range PodSources(pods.Items[i].Annotations) {
					if _, done := queued[s]; !done {
						queued[s] = struct{}{}
						if !c.exists(ctx, s) {
							continue
						}
						c.enqueueFallbacks(ResourceKey{Kind: s.Kind, Name: s.Name})
					}
				}
			}
		},
	}
}

func (c *Controller) fallbackResourceHandler(kind routing.Kind) toolscache.ResourceEventHandler {
	key := func(m metav1.Object) ResourceKey { return ResourceKey{Kind: kind, Name: m.GetName()} }
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.enqueueFallbacks(key(m))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, n := objectMeta(oldObj), objectMeta(newObj)
			if o == nil || n == nil {
				return
			}
			if o.GetGeneration() != n.GetGeneration() || o.GetUID() != n.GetUID() ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
				!sameFallbackFields(oldObj, newObj) {
				c.enqueueFallbacks(key(n))
			}
		},
		DeleteFunc: func(obj any) {
			if m := objectMeta(obj); m != nil {
				c.forgetFallbacks(key(m))
			}
		},
	}
}

// sameFallbackFields reports whether two versions of a resource hold the same live fallbacks.
func sameFallbackFields(oldObj, newObj any) bool {
	status := func(obj any) *v1alpha1.RoutingStatus {
		switch o := obj.(type) {
		case *v1alpha1.ImageAlternative:
			return &o.Status
		case *v1alpha1.ImageMirror:
			return &o.Status.RoutingStatus
		}
		return nil
	}
	o, n := status(oldObj), status(newObj)
	if o == nil || n == nil {
		return o == n
	}
	f := Fallbacks{Active: o.ActiveFallbacks, Total: o.Fallbacks, Pods: o.FallbackPods}
	return f.Holds(n)
}
