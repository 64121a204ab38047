package syncer

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
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
		logr.FromContextOrDiscard(ctx).Error(err, "updating status", "kind", rk.Kind, "name", rk.Name)
		c.statusQueue.AddRateLimited(rk)
		return true
	}
	c.statusQueue.Forget(rk)
	return true
}

// syncStatus writes a resource's status when it changed, and emits one Warning event per new
// cause of an entry left out.
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
		obj, current = &o, &o.Status
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
			m.Status = next
			modified = m
		}
		if err := c.status.Status().Patch(ctx, modified, client.MergeFrom(obj)); err != nil {
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
