package syncer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// maxEventNote keeps an event message readable.
const maxEventNote = 1024

func (c *Controller) processStatus(ctx context.Context) bool {
	rk, shutdown := c.statusQueue.Get()
	if shutdown {
		return false
	}
	defer c.statusQueue.Done(rk)
	if err := c.syncStatus(ctx, rk); err != nil {
		log := logr.FromContextOrDiscard(ctx)
		if apierrors.IsConflict(err) {
			// Another writer (the keeper, the fallbacks) was first: retry from the fresh object.
			log.V(1).Info("status changed since read, retrying", "kind", rk.Kind, "name", rk.Name)
		} else {
			log.Error(err, "updating status", "kind", rk.Kind, "name", rk.Name)
		}
		c.statusQueue.AddRateLimited(rk)
		return true
	}
	c.statusQueue.Forget(rk)
	return true
}

// syncStatus writes a resource's status when it changed, and emits one Warning event per new
// cause of an entry left out.
//
// The patch is a JSON merge patch: it carries the whole conditions list, the other writers'
// conditions (the keeper's KeepReady) as read from the cache. It is sent with the
// resourceVersion read, so that a condition written since is never overwritten: the API server
// answers Conflict and the next pass starts from the fresh object. status.keep is not in it.
func (c *Controller) syncStatus(ctx context.Context, rk ResourceKey) error {
	r, res, err := c.resource(ctx, rk)
	if err != nil {
		return err
	}
	if r == nil {
		c.mu.Lock()
		delete(c.emitted, rk)
		c.mu.Unlock()
		return nil
	}
	var (
		obj     client.Object
		current *v1alpha1.RoutingStatus
	)
	switch rk.Kind {
	case routing.KindImageAlternative:
		var o v1alpha1.ImageAlternative
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &o); err != nil {
			return client.IgnoreNotFound(err)
		}
		obj, current = &o, &o.Status
	case routing.KindImageMirror:
		var o v1alpha1.ImageMirror
		if err := c.cache.Get(ctx, client.ObjectKey{Name: rk.Name}, &o); err != nil {
			return client.IgnoreNotFound(err)
		}
		obj, current = &o, &o.Status.RoutingStatus
	}
	if obj.GetUID() != r.UID {
		return nil // the cache moved on; the event that moved it queued another pass
	}

	next, changed := DesiredStatus(r, res, c.namespaceCount(rk, r.UID), current, metav1.NewTime(c.cfg.Clock.Now()))
	if changed {
		var modified client.Object
		switch o := obj.(type) {
		case *v1alpha1.ImageAlternative:
			m := o.DeepCopy()
			m.Status = next
			modified = m
		case *v1alpha1.ImageMirror:
			m := o.DeepCopy()
			m.Status.RoutingStatus = next
			modified = m
		}
		if err := c.status.Status().Patch(ctx, modified, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{})); err != nil {
			metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultError).Inc()
			return client.IgnoreNotFound(fmt.Errorf("patching status of %s: %w", rk, err))
		}
		metrics.SyncerStatusUpdates.WithLabelValues(metrics.ResultSuccess).Inc()
	}
	c.emitEvents(obj, rk, res)
	return nil
}

// emitEvents emits a PullSecretInjectionFailed Warning for each entry left out that was not
// already reported: one event per cause, not one per decision. A cause that goes away and
// comes back is reported again.
//
// An entry whose provider has not answered yet (ProviderPending) is not reported: it is the
// normal state of a provider entry for the first moments. A provider credential that could not
// be renewed but is still in use (ProviderRenewalFailed) is reported like an entry left out.
func (c *Controller) emitEvents(obj client.Object, rk ResourceKey, res *Resolution) {
	var causes []LeftOut
	for _, l := range slices.Concat(res.LeftOut, res.Warnings) {
		if l.Reason != v1alpha1.ReasonProviderPending {
			causes = append(causes, l)
		}
	}
	current := make(map[LeftOut]struct{}, len(causes))
	for _, l := range causes {
		current[l] = struct{}{}
	}
	c.mu.Lock()
	prev := c.emitted[rk]
	c.emitted[rk] = current
	c.mu.Unlock()
	for _, l := range causes {
		if _, done := prev[l]; done {
			continue
		}
		metrics.SyncerInjectionFailures.WithLabelValues(l.Reason).Inc()
		if c.recorder == nil {
			continue
		}
		note := fmt.Sprintf("%s (%s) left out of the pull secret: %s: %s", l.Entry, l.Path, l.Reason, l.Message)
		if l.Reason == v1alpha1.ReasonProviderRenewalFailed || l.Reason == v1alpha1.ReasonProviderSecretFull {
			note = fmt.Sprintf("%s (%s): %s: %s", l.Entry, l.Path, l.Reason, l.Message)
		}
		if len(note) > maxEventNote {
			note = note[:maxEventNote-3] + "..."
		}
		c.recorder.Event(obj, corev1.EventTypeWarning, v1alpha1.EventPullSecretInjectionFailed, note)
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

// maxConditionMessage is the API's bound on a condition message.
const maxConditionMessage = 32768

func joinLeftOut(list []LeftOut) string {
	msgs := make([]string, len(list))
	for i, l := range list {
		msgs[i] = fmt.Sprintf("%s (%s): %s: %s", l.Entry, l.Path, l.Reason, l.Message)
	}
	return strings.Join(msgs, "; ")
}

// DesiredStatus is the status of a resource: its Ready condition from the resolution of its
// entries, the generation acted on, the number of entries and of namespaces holding its Secret.
// It reports whether it differs from current; an unchanged condition keeps its transition time.
// Every other condition of current (the keeper's KeepReady) is kept as it is.
func DesiredStatus(r *Resource, res *Resolution, namespaces int32, current *v1alpha1.RoutingStatus, now metav1.Time) (v1alpha1.RoutingStatus, bool) {
	next := *current.DeepCopy()
	next.ObservedGeneration = r.Generation
	next.Entries = int32(len(r.Entries)) //nolint:gosec // at most 32 entries, bounded by the CRD
	next.Namespaces = namespaces
	cond := metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		ObservedGeneration: r.Generation,
		LastTransitionTime: now,
	}
	switch {
	case r.DryRun:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonDryRun, "dry run: no pod is routed and no pull secret is written; pods show what would be done in their kuik.enix.io/dry-run annotation"
	case !r.Injecting() && len(res.Warnings) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, res.Warnings[0].Reason
		cond.Message = "no entry injects a pull secret; " + joinLeftOut(res.Warnings)
	case !r.Injecting():
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonNothingToInject, "no entry injects a pull secret"
	case len(res.LeftOut) == 0 && len(res.Warnings) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, res.Warnings[0].Reason
		cond.Message = fmt.Sprintf("the credentials of %d injecting entries resolved; %s", res.Injecting, joinLeftOut(res.Warnings))
	case len(res.LeftOut) == 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonSynced
		cond.Message = fmt.Sprintf("the credentials of %d injecting entries resolved", res.Injecting)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, res.LeftOut[0].Reason
		cond.Message = joinLeftOut(res.LeftOut)
	}
	if len(cond.Message) > maxConditionMessage {
		cond.Message = cond.Message[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&next.Conditions, cond)
	return next, !equality.Semantic.DeepEqual(*current, next)
}
