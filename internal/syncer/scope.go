package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// scopeWriter keeps the pod webhook's matchConditions in step with the routing resources
// (internal/admitscope), on the leader only: after a change of any resource, debounced, and
// every resync period, which restores conditions a `helm upgrade --force` or an edit
// removed. A write that fails is retried after retry, doubling up to 8×.
type scopeWriter struct {
	cache    cache.Cache
	client   client.Client
	cs       kubernetes.Interface
	config   string
	debounce time.Duration
	resync   time.Duration
	retry    time.Duration
	// settle is the wait between a change of the conditions and the PodsSent marks.
	settle time.Duration
	log    logr.Logger

	last   string // the expression last applied, "" for none
	reason admitscope.Reason
}

// NeedLeaderElection: only the leader writes.
func (w *scopeWriter) NeedLeaderElection() bool { return true }

func (w *scopeWriter) Start(ctx context.Context) error {
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	for _, obj := range []client.Object{&v1alpha1.ImageAlternative{}, &v1alpha1.ImageMirror{}} {
		inf, err := w.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("matchConditions: informer of %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("matchConditions: handler of %T: %w", obj, err)
		}
	}
	if !w.cache.WaitForCacheSync(ctx) {
		return nil
	}
	resync := time.NewTicker(w.resync)
	defer resync.Stop()
	failures := 0
	var retry <-chan time.Time
	force := true
	for {
		if err := w.write(ctx, force); err != nil {
			failures++
			wait := w.retry << min(failures-1, 3)
			w.log.Error(err, "writing the pod webhook's matchConditions; every pod the last ones send still reaches the webhook", "retryIn", wait)
			retry = time.After(wait)
		} else {
			failures, retry = 0, nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
			// After a failed write, the next one is forced whatever woke it: a change that
			// leaves the expression as last applied must not stand for the repair.
			force = failures > 0
			// Collapse a burst of changes into one write.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(w.debounce):
			}
		case <-resync.C:
			force = true
		case <-retry:
			force = true
		}
	}
}

// write applies the conditions of the cached resources, unless force is false and the live
// configuration holds them as last applied, then marks every listed resource PodsSent at the
// generation they were computed from. After a change, or a repair of conditions another
// writer replaced (a `helm upgrade`, an edit, a restore), it first waits the settle time, for
// the API servers to see it: a webhook run with --match-conditions-gate routes with a
// generation only once it is marked, so no pod it routes with is left out by conditions that
// do not yet cover it. The configuration is read once a pass; a failed read marks nothing.
func (w *scopeWriter) write(ctx context.Context, force bool) error {
	var alts v1alpha1.ImageAlternativeList
	if err := w.cache.List(ctx, &alts); err != nil {
		return fmt.Errorf("listing ImageAlternatives: %w", err)
	}
	var mirrors v1alpha1.ImageMirrorList
	if err := w.cache.List(ctx, &mirrors); err != nil {
		return fmt.Errorf("listing ImageMirrors: %w", err)
	}
	res := admitscope.Conditions(alts.Items, mirrors.Items)
	expr := ""
	if len(res.Conditions) > 0 {
		expr = res.Conditions[0].Expression
	}
	changed := expr != w.last || res.Reason != w.reason
	cur, err := w.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, w.config, metav1.GetOptions{})
	if err != nil {
		metrics.MatchConditionsApplies.WithLabelValues("error").Inc()
		return fmt.Errorf("matchConditions of %s: %w", w.config, err)
	}
	replaced := !changed && !admitscope.Holds(cur, admitscope.WebhookName, res)
	if replaced {
		w.log.Info("pod webhook's matchConditions are not those last applied; applying them again", "reason", res.Reason)
	}
	if force || changed || replaced {
		if err := admitscope.ApplyOn(ctx, w.cs, cur, admitscope.WebhookName, res); err != nil {
			metrics.MatchConditionsApplies.WithLabelValues("error").Inc()
			return err
		}
		metrics.MatchConditionsApplies.WithLabelValues("success").Inc()
		if w.reason != res.Reason {
			if w.reason != "" {
				metrics.MatchConditions.WithLabelValues(string(w.reason)).Set(0)
			}
			w.log.Info("pod webhook's matchConditions", "reason", res.Reason, "message", res.Message, "bytes", res.ExpressionBytes, "maxContainers", res.MaxContainers)
		}
		metrics.MatchConditions.WithLabelValues(string(res.Reason)).Set(1)
		w.last, w.reason = expr, res.Reason
	}
	if changed || replaced {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.settle):
		}
	}
	return w.markSent(ctx, alts.Items, mirrors.Items)
}

// markSent writes the PodsSent condition of every listed resource whose condition does not
// already say res at the listed generation. Invalid resources are marked too: the conditions
// reflect that generation (it routes nothing). A resource deleted, or deleted and made again,
// since it was listed is skipped: the UID in the apply is a precondition.
func (w *scopeWriter) markSent(ctx context.Context, alts []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) error {
	var errs []error
	for i := range alts {
		errs = append(errs, w.markOne(ctx, "ImageAlternative", &alts[i].ObjectMeta, alts[i].Status.Conditions))
	}
	for i := range mirrors {
		errs = append(errs, w.markOne(ctx, "ImageMirror", &mirrors[i].ObjectMeta, mirrors[i].Status.Conditions))
	}
	return errors.Join(errs...)
}

func (w *scopeWriter) markOne(ctx context.Context, kind string, obj *metav1.ObjectMeta, conds []metav1.Condition) error {
	want := podsSentCondition(obj.Generation)
	cur := meta.FindStatusCondition(conds, v1alpha1.ConditionPodsSent)
	if cur != nil && cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message && cur.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	want.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
	if cur != nil && cur.Status == want.Status {
		want.LastTransitionTime = cur.LastTransitionTime
	}
	cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
	if err != nil {
		return fmt.Errorf("encoding the %s condition: %w", v1alpha1.ConditionPodsSent, err)
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": obj.Name, "uid": string(obj.UID)},
		"status":     map[string]any{"conditions": []any{cond}},
	}}
	err = w.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner(admitscope.FieldManager), client.ForceOwnership)
	switch {
	case err == nil:
		metrics.PodsSentWrites.WithLabelValues("success").Inc()
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or made again under the same name: the next pass marks the new one.
		return nil
	default:
		metrics.PodsSentWrites.WithLabelValues("error").Inc()
		return fmt.Errorf("%s %q: writing %s: %w", kind, obj.Name, v1alpha1.ConditionPodsSent, err)
	}
}

// podsSentCondition is the PodsSent condition of a resource at generation gen. It does not
// depend on the conditions' result: a change from filtering to sending every pod, or of the expression's size,
// rewrites no status.
func podsSentCondition(gen int64) metav1.Condition {
	return metav1.Condition{
		Type:               v1alpha1.ConditionPodsSent,
		Status:             metav1.ConditionTrue,
		Reason:             v1alpha1.ReasonCovered,
		Message:            "the pod webhook's matchConditions send the pods this generation can route",
		ObservedGeneration: gen,
	}
}

// DefaultMatchConditionsSettle is Options.MatchConditionsSettle's default: an API server
// sees a webhook configuration change through its watch, within a second when it is well.
const DefaultMatchConditionsSettle = 2 * time.Second
