package syncer

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
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
	cs       kubernetes.Interface
	config   string
	debounce time.Duration
	resync   time.Duration
	retry    time.Duration
	log      logr.Logger

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
			force = false
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

// write applies the conditions of the cached resources, unless they are those last applied
// and force is false.
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
	if !force && expr == w.last && res.Reason == w.reason {
		return nil
	}
	if err := admitscope.Apply(ctx, w.cs, w.config, admitscope.WebhookName, res); err != nil {
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
	return nil
}
