package missedpulls

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// hit is a failing container the webhook would route now.
type hit struct {
	container, image, candidate string
	source                      routing.Source
	resource                    client.Object
	recreate                    bool
}

// sync checks one pod; it returns when to look at it again (0: when an event says so).
func (w *Watcher) sync(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	w.release(key)
	pod, err := w.core.Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading pod %s: %w", key, err)
	}
	failing := FailingContainers(pod)
	if len(failing) == 0 || pod.DeletionTimestamp != nil || Skipped(pod, w.excluded) {
		w.forget(pod.UID)
		return 0, nil
	}
	hits, err := w.decide(ctx, pod, failing)
	if err != nil {
		return 0, err
	}
	if len(hits) == 0 {
		w.forget(pod.UID)
		return 0, nil
	}
	now := w.opts.Clock.Now()
	since := w.firstSeen(pod.UID, now)
	var recreate *hit
	for i := range hits {
		w.report(pod, &hits[i])
		if hits[i].recreate && recreate == nil {
			recreate = &hits[i]
		}
	}
	if recreate == nil {
		if w.opts.AllowDelete && w.notRecreated(pod) == "" {
			// Looked at again while it fails: its resource may opt in later.
			return w.opts.StuckPodAge, nil
		}
		return 0, nil
	}
	if w.notRecreated(pod) != "" {
		return 0, nil // reported with the reason; the next event starts over
	}
	if need, age := w.stuckAge(pod, now), now.Sub(since); age < need {
		return need - age, nil
	}
	return w.recreate(ctx, pod, failing, hits, recreate, now)
}

// decide runs the webhook's decision on a copy of the pod and keeps the failing containers it
// would rewrite.
func (w *Watcher) decide(ctx context.Context, pod *corev1.Pod, failing map[string]string) ([]hit, error) {
	ix, err := w.index(ctx)
	if err != nil {
		return nil, err
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := w.cache.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
	}
	decisions, err := routeAsCreated(ctx, pod.DeepCopy(), labels.Set(ns.Labels), ix, w.chooser.Choose)
	if err != nil {
		return nil, fmt.Errorf("routing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var hits []hit
	for _, d := range decisions {
		image, ok := failing[d.Container]
		if !ok || d.Image == d.Original || d.Original != image || d.Source.IsOriginal() {
			continue
		}
		res, recreate, err := w.resource(ctx, d.Source)
		if err != nil {
			return nil, err
		}
		if res == nil {
			continue // gone since the index was built
		}
		// An ephemeral container is no part of the pod template: the replacement would not
		// have it, and the pod deleted would be one being debugged. Reported only.
		recreate = recreate && !Ephemeral(pod, d.Container)
		hits = append(hits, hit{container: d.Container, image: image, candidate: d.Image, source: d.Source, resource: res, recreate: recreate})
	}
	return hits, nil
}

// routeAsCreated is the webhook's decision for a pod being created: the one call to adapt
// when route.Route changes.
func routeAsCreated(ctx context.Context, pod *corev1.Pod, namespaceLabels labels.Set, ix *routing.Index, choose route.Chooser) ([]route.Decision, error) {
	return route.Route(ctx, pod, namespaceLabels, ix, choose, route.Scope{})
}

// index returns the routing index of the enforcing resources, with the mirror tags of the
// cluster ID (the webhook's), rebuilt after a change. Dry-run
// resources are left out before indexing (routing.NewIndex would leave them out of what it
// enforces too, but keep them in Index.WithDryRun): so Route sends no trial probe for a
// decision that only wants what the webhook enforces.
func (w *Watcher) index(ctx context.Context) (*routing.Index, error) {
	w.ixMu.Lock()
	defer w.ixMu.Unlock()
	if w.ix != nil && !w.dirty.Load() {
		return w.ix, nil
	}
	w.dirty.Store(false)
	var ias v1alpha1.ImageAlternativeList
	if err := w.cache.List(ctx, &ias); err != nil {
		w.dirty.Store(true)
		return nil, fmt.Errorf("listing ImageAlternatives: %w", err)
	}
	var ims v1alpha1.ImageMirrorList
	if err := w.cache.List(ctx, &ims); err != nil {
		w.dirty.Store(true)
		return nil, fmt.Errorf("listing ImageMirrors: %w", err)
	}
	alternatives := make([]v1alpha1.ImageAlternative, 0, len(ias.Items))
	for _, o := range ias.Items {
		if !o.Spec.DryRun {
			alternatives = append(alternatives, o)
		}
	}
	mirrors := make([]v1alpha1.ImageMirror, 0, len(ims.Items))
	for _, o := range ims.Items {
		if !o.Spec.DryRun {
			mirrors = append(mirrors, o)
		}
	}
	ix, errs := routing.NewIndex(alternatives, mirrors)
	for _, err := range errs {
		logr.FromContextOrDiscard(ctx).V(1).Info("routing resource left out of the index", "error", err.Error())
	}
	if w.opts.ClusterID != "" {
		ix = ix.WithClusterID(w.opts.ClusterID)
	}
	w.ix = ix
	return ix, nil
}

// resource reads the routing resource a decision names from the cache: the object events go
// on, and whether it asks for stuck pods to be recreated (nil when it is gone).
func (w *Watcher) resource(ctx context.Context, src routing.Source) (client.Object, bool, error) {
	var (
		obj      client.Object
		recreate func() bool
	)
	switch src.Kind {
	case routing.KindImageAlternative:
		o := &v1alpha1.ImageAlternative{}
		obj, recreate = o, func() bool { return o.Spec.RecreateStuckPods && !o.Spec.DryRun }
	case routing.KindImageMirror:
		o := &v1alpha1.ImageMirror{}
		obj, recreate = o, func() bool { return o.Spec.RecreateStuckPods && !o.Spec.DryRun }
	default:
		return nil, false, nil
	}
	if err := w.cache.Get(ctx, types.NamespacedName{Name: src.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading %s: %w", src, err)
	}
	return obj, recreate(), nil
}

// report emits the ImagePullMissedRouting events of a hit, once per (pod, container, candidate).
func (w *Watcher) report(pod *corev1.Pod, h *hit) {
	key := string(pod.UID) + "\x00" + h.container + "\x00" + h.candidate
	w.mu.Lock()
	_, done := w.emitted.Get(key)
	if !done {
		w.emitted.Add(key, struct{}{})
	}
	w.mu.Unlock()
	if done {
		return
	}
	metrics.MissedPulls.WithLabelValues(string(h.source.Kind), h.source.Name).Inc()
	if w.recorder == nil {
		return
	}
	extra := ""
	if h.recreate {
		extra = w.notRecreated(pod)
		if extra == "" {
			extra = fmt.Sprintf("recreateStuckPods: the pod is evicted for its controller to recreate it once failing for %s", w.stuckAge(pod, w.opts.Clock.Now()))
		}
		extra = "; " + extra
	}
	w.recorder.Event(pod, corev1.EventTypeWarning, v1alpha1.EventImagePullMissedRouting, clip(fmt.Sprintf(
		"container %q fails to pull %q, which %s routes to %q, available now (the pod was admitted without kuik's webhook)%s",
		h.container, h.image, h.source, h.candidate, extra)))
	w.recorder.Event(h.resource, corev1.EventTypeWarning, v1alpha1.EventImagePullMissedRouting, clip(fmt.Sprintf(
		"pod %s/%s: container %q fails to pull %q, which this resource routes to %q, available now (the pod was admitted without kuik's webhook)%s",
		pod.Namespace, pod.Name, h.container, h.image, h.candidate, extra)))
}

// notRecreated is why a stuck pod is not evicted although its resource has recreateStuckPods,
// "" when it may be (a Job's retries are read right before the eviction).
func (w *Watcher) notRecreated(pod *corev1.Pod) string {
	switch {
	case !w.opts.AllowDelete:
		return "recreateStuckPods is set but the secret-syncer may not evict pods (--recreate-stuck-pods=false)"
	case !Controlled(pod):
		return "recreateStuckPods is set but no controller owns the pod, so it is not evicted"
	case !w.ownerRecreates(pod):
		return fmt.Sprintf("recreateStuckPods is set but the pod's controller, a %s, is not one the secret-syncer counts on to recreate it (--recreate-stuck-pod-owners, --recreate-stuck-job-pods), so it is not evicted",
			OwnerKind(*ControllerOf(pod)))
	case !NeverRan(pod):
		return "recreateStuckPods is set but the pod is not Pending or one of its containers has run, so it is not evicted"
	}
	return ""
}

// ownerRecreates reports whether the pod's controller is one of the kinds whose pods are evicted.
func (w *Watcher) ownerRecreates(pod *corev1.Pod) bool {
	r := ControllerOf(pod)
	if r == nil {
		return false
	}
	gk := OwnerKind(*r)
	return w.owners[gk] || (w.opts.RecreateJobs && gk == JobKind)
}
