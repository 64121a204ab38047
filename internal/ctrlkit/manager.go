package ctrlkit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// NewManager builds a manager from own, what the binary has of its own (Scheme, Cache,
// LeaderElectionNamespace, and LeaderElectionID: the Lease's name when o names none), and o.
//
// Its /healthz answers ping, and its /readyz is ready once the informers have synced. It runs
// on a copy of restConfig with client-side rate limiting off (API Priority and Fairness
// governs) and userAgent when restConfig has none; mgr.GetConfig() is that copy. Its logger
// and its runnables' is the one of ctx, and a leader releases its Lease on cancel.
func NewManager(ctx context.Context, restConfig *rest.Config, userAgent string, o ManagerOptions, own manager.Options) (manager.Manager, error) {
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = -1, 0
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent
	}
	mgr, err := manager.New(cfg, managerOptions(logr.FromContextOrDiscard(ctx), o, own))
	if err != nil {
		return nil, fmt.Errorf("building manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", informersSynced(mgr.GetCache())); err != nil {
		return nil, fmt.Errorf("adding readiness check: %w", err)
	}
	return mgr, nil
}

// informersSynced is ready once every informer of c has synced; it waits a second at most.
func informersSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		wctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(wctx) {
			return errors.New("informers not synced")
		}
		return nil
	}
}

// managerOptions is own with o's servers and election, and logger.
func managerOptions(logger logr.Logger, o ManagerOptions, own manager.Options) manager.Options {
	mopts := own
	mopts.Logger = logger
	// The manager hands its runnables a context of its own: without this, one with no logger,
	// and the runnables' logs would go nowhere.
	mopts.BaseContext = func() context.Context { return logr.NewContext(context.Background(), logger) }
	mopts.Metrics = metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if o.MetricsBindAddress == "" {
		mopts.Metrics.BindAddress = "0"
	}
	mopts.HealthProbeBindAddress = o.HealthProbeBindAddress
	if o.HealthProbeBindAddress == "0" {
		mopts.HealthProbeBindAddress = ""
	}
	mopts.LeaderElection = o.LeaderElection
	if o.LeaderElectionID != "" {
		mopts.LeaderElectionID = o.LeaderElectionID
	}
	mopts.LeaderElectionReleaseOnCancel = true
	if o.LeaseDuration > 0 {
		mopts.LeaseDuration = &o.LeaseDuration
	}
	if o.RenewDeadline > 0 {
		mopts.RenewDeadline = &o.RenewDeadline
	}
	if o.RetryPeriod > 0 {
		mopts.RetryPeriod = &o.RetryPeriod
	}
	return mopts
}

// NewEventRecorder builds a clientset on mgr's configuration and HTTP client, and a core/v1
// event recorder whose events name component as their source. Its broadcaster shuts down when
// mgr stops, leader or not.
//
// core/v1, not events.k8s.io: that recorder folds the events of one reason and action into a
// series whatever their note, while each note of kuik's (an entry left out, an image) matters.
func NewEventRecorder(mgr manager.Manager, component string) (*kubernetes.Clientset, record.EventRecorder, error) {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, nil, fmt.Errorf("building clientset: %w", err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	if err := mgr.Add(shutdownOnStop{broadcaster.Shutdown}); err != nil {
		return nil, nil, fmt.Errorf("adding event broadcaster: %w", err)
	}
	return cs, broadcaster.NewRecorder(mgr.GetScheme(), corev1.EventSource{Component: component}), nil
}

// shutdownOnStop calls a function when the manager stops, leader or not.
type shutdownOnStop struct{ fn func() }

func (s shutdownOnStop) Start(ctx context.Context) error {
	<-ctx.Done()
	s.fn()
	return nil
}

func (shutdownOnStop) NeedLeaderElection() bool { return false }
