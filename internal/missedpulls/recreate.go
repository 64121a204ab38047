package missedpulls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// errChanged: the pod changed between the two reads; it is looked at again.
var errChanged = errors.New("the pod changed before it could be evicted")

// recreate evicts a stuck pod when no pod of its controller is being evicted and the rate limit
// allows, after reading and verifying it again (and its Job's retries).
func (w *Watcher) recreate(ctx context.Context, pod *corev1.Pod, failing map[string]string, hits []hit, h *hit, now time.Time) (time.Duration, error) {
	log := logr.FromContextOrDiscard(ctx)
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	claimed, err := w.claim(ctx, pod)
	if err != nil {
		return 0, err
	}
	if !claimed {
		metrics.StuckPodsRecreated.WithLabelValues("in-flight").Inc()
		return min(w.opts.StuckPodAge, maxInFlightWait), nil
	}
	evicted := false
	defer func() {
		if !evicted {
			w.unclaim(controllerUID(pod), pod.UID)
		}
	}()
	if !w.limiter.AllowN(now, 1) {
		metrics.StuckPodsRecreated.WithLabelValues("rate-limited").Inc()
		// Its turn: one token interval per pod held back, itself included.
		held := w.hold(key)
		wait := time.Duration(min(float64(held)/w.opts.RecreateRate, maxHeldWait.Seconds()) * float64(time.Second))
		return max(wait, time.Second), nil
	}
	fresh, err := w.core.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		w.forget(pod.UID)
		return 0, nil
	}
	if err != nil {
		metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
		return 0, fmt.Errorf("reading pod %s/%s again: %w", pod.Namespace, pod.Name, err)
	}
	want := map[string]string{}
	for _, x := range hits {
		want[x.container] = failing[x.container]
	}
	// The last check before the eviction is Evictable, the predicate whose cases the
	// pod-deletes policies are tested against (policies/pod_deletes_cases_test.go).
	if fresh.UID != pod.UID || controllerUID(fresh) != controllerUID(pod) || !w.opts.AllowDelete ||
		!Evictable(fresh, w.evictable, w.excluded) || !StillFailing(fresh, want) {
		return 0, nil // recovered, ran, replaced or changed: the next event starts over
	}
	if r := ControllerOf(fresh); OwnerKind(*r) == JobKind {
		job, err := w.jobs.Jobs(fresh.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return 0, nil // the garbage collector deletes its pods
		case err != nil:
			metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
			return 0, fmt.Errorf("reading the Job of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		case job.UID != r.UID || !JobHasRetries(job):
			log.Info("not evicting a stuck pod: its Job has no retry left", "pod", key.String(), "job", r.Name)
			return 0, nil
		}
	}
	uid, rv := fresh.UID, fresh.ResourceVersion
	err = w.core.Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		// The label selects the eviction for the pod-deletes policy's check of the pod (the
		// Eviction is all an admission policy sees of it), which refuses one without it.
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}},
	})
	switch {
	case apierrors.IsNotFound(err):
		w.forget(pod.UID)
		return 0, nil
	case apierrors.IsConflict(err):
		return 0, fmt.Errorf("evicting pod %s/%s: %w: %w", pod.Namespace, pod.Name, errChanged, err)
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget allows no disruption now (the API server checks budgets for
		// pods that are not Pending, so only when the pod changed since it was read).
		metrics.StuckPodsRecreated.WithLabelValues("disruption-budget").Inc()
		return w.opts.StuckPodAge, nil
	case err != nil:
		metrics.StuckPodsRecreated.WithLabelValues(metrics.ResultError).Inc()
		return 0, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	evicted = true
	metrics.StuckPodsRecreated.WithLabelValues("deleted").Inc()
	w.deleted(fresh, now)
	failingFor := now.Sub(w.sinceOr(pod.UID, now)).Round(time.Second)
	w.forget(pod.UID)
	log.Info("evicted a pod stuck pulling an image kuik routes, for its controller to recreate it",
		"pod", key.String(), "container", h.container, "image", h.image, "candidate", h.candidate, "by", h.source.String())
	if w.recorder != nil {
		w.recorder.Event(h.resource, corev1.EventTypeNormal, v1alpha1.EventStuckPodRecreated, clip(fmt.Sprintf(
			"evicted pod %s/%s (uid %s), failing to pull %q in container %q for %s although this resource routes it to %q: its controller recreates it through the webhook",
			pod.Namespace, pod.Name, pod.UID, h.image, h.container, failingFor, h.candidate)))
	}
	return 0, nil
}

// claim makes pod its controller's pod in flight, unless another one is and still exists: at
// most one pod of a controller is being evicted at a time.
func (w *Watcher) claim(ctx context.Context, pod *corev1.Pod) (bool, error) {
	controller := string(controllerUID(pod))
	for {
		w.mu.Lock()
		v, ok := w.inFlight.Get(controller)
		if !ok || v.(flight).uid == pod.UID {
			w.inFlight.Add(controller, flight{key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID})
			w.mu.Unlock()
			return true, nil
		}
		w.mu.Unlock()
		other := v.(flight)
		p, err := w.core.Pods(other.key.Namespace).Get(ctx, other.key.Name, metav1.GetOptions{})
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("reading pod %s, evicted before its sibling %s/%s: %w", other.key, pod.Namespace, pod.Name, err)
		case err == nil && p.UID == other.uid:
			return false, nil // still there, terminating
		}
		w.unclaim(types.UID(controller), other.uid)
	}
}

// unclaim ends the flight of pod uid for its controller (a pod gone, or not evicted after all).
func (w *Watcher) unclaim(controller, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.inFlight.Get(string(controller)); ok && v.(flight).uid == uid {
		w.inFlight.Remove(string(controller))
	}
}

// firstSeen is when the pod was first seen failing with a routable image, now if never.
func (w *Watcher) firstSeen(uid types.UID, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.since.Get(string(uid)); ok {
		return v.(time.Time)
	}
	w.since.Add(string(uid), now)
	return now
}

func (w *Watcher) sinceOr(uid types.UID, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.since.Get(string(uid)); ok {
		return v.(time.Time)
	}
	return now
}

// stuckAge is how long the pod must have been failing before it is deleted: StuckPodAge,
// doubled for each generation of its controller's pods deleted before it was created.
func (w *Watcher) stuckAge(pod *corev1.Pod, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opts.StuckPodAge << min(w.generationLocked(pod, now)-1, maxRepeats)
}

// generationLocked is 1 for a pod created before any delete of its controller's pods within
// repeatWindow, 1 more than the latest generation deleted before its creation otherwise. The
// creation time is the API server's, at the second: a delete counts from the start of its
// second.
func (w *Watcher) generationLocked(pod *corev1.Pod, now time.Time) int {
	v, ok := w.repeats.Get(string(controllerUID(pod)))
	if !ok {
		return 1
	}
	created := pod.CreationTimestamp.Time
	g := 1
	for i, at := range v.(generations) {
		if now.Sub(at) <= repeatWindow && !created.Before(at.Truncate(time.Second)) {
			g = i + 2
		}
	}
	return g
}

// deleted records the delete of a pod of its controller.
func (w *Watcher) deleted(pod *corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid := string(controllerUID(pod))
	g := w.generationLocked(pod, now)
	var gens generations
	if v, ok := w.repeats.Get(uid); ok {
		gens = v.(generations)
	}
	// Steps older than the window count no more: start over from this delete.
	if len(gens) > 0 && now.Sub(gens[len(gens)-1]) > repeatWindow {
		gens, g = nil, 1
	}
	if g > len(gens) && len(gens) <= maxRepeats {
		gens = append(slices.Clone(gens), now)
	}
	w.repeats.Add(uid, gens)
}

// hold records a pod the rate limit held back and returns how many are.
func (w *Watcher) hold(key types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[key] = struct{}{}
	return len(w.held)
}

// release drops a pod from the held ones: it is being looked at again.
func (w *Watcher) release(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.held, key)
}

func (w *Watcher) forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since.Remove(string(uid))
}

func clip(s string) string {
	if len(s) > maxNote {
		return s[:maxNote-3] + "..."
	}
	return s
}
