package syncer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Options configure a secret-syncer process.
type Options struct {
	Config
	// MetricsBindAddress serves /metrics; "0" turns it off.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "" or "0" turns it off.
	HealthProbeBindAddress string
	// LeaderElection runs a Lease election in the cluster resource namespace, so that one
	// replica writes and the others stand by with warm caches.
	LeaderElection   bool
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero keeps
	// controller-runtime's defaults (15s, 10s, 2s).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// MissedPulls, when set, runs the missed-pull controller on the leader (internal/missedpulls);
	// its ClusterResourceNamespace and ClusterID are the syncer's.
	MissedPulls *missedpulls.Options
}

// missedPullOptions is the missed-pull controller's configuration, nil when it is off. Its
// NodeProviders are the nodes' providers as the webhook is given them, never the plugins the
// syncer runs (Plugins): the nodes may not run those (credentialProviders.sameAsNodes false),
// and a decision counting them would call pulls missed that the webhook routes otherwise.
func missedPullOptions(opts Options) *missedpulls.Options {
	if opts.MissedPulls == nil {
		return nil
	}
	mp := *opts.MissedPulls
	mp.ClusterResourceNamespace = opts.ClusterResourceNamespace
	mp.ClusterID = opts.ClusterID
	return &mp
}

// DefaultLeaderElectionID names the Lease.
const DefaultLeaderElectionID = "kuik-secret-syncer"

// Scheme knows the built-in types and the routing resources.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	return s, nil
}

// NewManager builds a manager running the secret-syncer: narrow caches, the controller (only
// on the leader), health probes and metrics. Client-side rate limiting is off: API Priority and
// Fairness governs.
func NewManager(ctx context.Context, restConfig *rest.Config, opts Options) (manager.Manager, error) {
	mgr, _, err := newManager(ctx, restConfig, opts)
	return mgr, err
}

// leaderRunnables are the runnables of a manager that write while it leads, each told when it
// has returned: the controller and the missed-pull watcher (nil when off), the one that
// evicts pods.
type leaderRunnables struct {
	ctrl    *trackedController
	watcher *tracked
}

func newManager(ctx context.Context, restConfig *rest.Config, opts Options) (manager.Manager, *leaderRunnables, error) {
	if opts.ClusterResourceNamespace == "" {
		return nil, nil, errors.New("the cluster resource namespace is required")
	}
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = -1, 0
	if cfg.UserAgent == "" {
		cfg.UserAgent = FieldManager
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, err
	}
	id := opts.LeaderElectionID
	if id == "" {
		id = DefaultLeaderElectionID
	}
	logger := logr.FromContextOrDiscard(ctx)
	mopts := manager.Options{
		Scheme: scheme,
		Logger: logger,
		// The manager hands its runnables (the controller) a context of its own: without this,
		// one with no logger, and the controller's logs would go nowhere.
		BaseContext:                   func() context.Context { return logr.NewContext(context.Background(), logger) },
		Cache:                         CacheOptions(opts.ClusterResourceNamespace),
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       opts.ClusterResourceNamespace,
		LeaderElectionReleaseOnCancel: true,
	}
	if opts.MetricsBindAddress == "" {
		mopts.Metrics.BindAddress = "0"
	}
	if opts.HealthProbeBindAddress == "0" {
		mopts.HealthProbeBindAddress = ""
	}
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration = &opts.LeaseDuration
	}
	if opts.RenewDeadline > 0 {
		mopts.RenewDeadline = &opts.RenewDeadline
	}
	if opts.RetryPeriod > 0 {
		mopts.RetryPeriod = &opts.RetryPeriod
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, nil, fmt.Errorf("building manager: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return nil, nil, fmt.Errorf("building clientset: %w", err)
	}
	// core/v1 events: the events.k8s.io recorder folds events of one reason and action into a
	// series whatever their note, while each entry left out is its own cause.
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	if err := mgr.Add(shutdownOnStop{broadcaster.Shutdown}); err != nil {
		return nil, nil, fmt.Errorf("adding event broadcaster: %w", err)
	}
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: FieldManager})
	ctrl := NewController(opts.Config, mgr.GetCache(), cs.CoreV1(), mgr.GetClient(), recorder)
	ctrl.graceful = ctx
	if err := ctrl.Prepare(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, nil, err
	}
	leaders := &leaderRunnables{}
	if mp := missedPullOptions(opts); mp != nil {
		leaders.watcher = &tracked{leaderRunnable: missedpulls.New(*mp, mgr.GetCache(), cs, recorder), done: make(chan struct{})}
		if err := mgr.Add(leaders.watcher); err != nil {
			return nil, nil, fmt.Errorf("adding the missed-pull controller: %w", err)
		}
	}
	leaders.ctrl = &trackedController{Controller: ctrl, done: make(chan struct{})}
	if err := mgr.Add(leaders.ctrl); err != nil {
		return nil, nil, fmt.Errorf("adding controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, nil, fmt.Errorf("adding health check: %w", err)
	}
	informersSynced := func(req *http.Request) error {
		wctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(wctx) {
			return errors.New("informers not synced")
		}
		return nil
	}
	if err := mgr.AddReadyzCheck("informers", informersSynced); err != nil {
		return nil, nil, fmt.Errorf("adding readiness check: %w", err)
	}
	return mgr, leaders, nil
}

// shutdownOnStop calls a function when the manager stops, leader or not.
type shutdownOnStop struct{ fn func() }

func (s shutdownOnStop) Start(ctx context.Context) error {
	<-ctx.Done()
	s.fn()
	return nil
}

func (shutdownOnStop) NeedLeaderElection() bool { return false }

// trackedController tells when the controller, once started, has returned.
type trackedController struct {
	*Controller
	started atomic.Bool
	done    chan struct{}
}

func (t *trackedController) Start(ctx context.Context) error {
	t.started.Store(true)
	defer close(t.done)
	return t.Controller.Start(ctx)
}

// leaderRunnable is a runnable that runs on the leader only.
type leaderRunnable interface {
	manager.Runnable
	manager.LeaderElectionRunnable
}

// tracked tells when a leader's runnable, once started, has returned.
type tracked struct {
	leaderRunnable
	started atomic.Bool
	done    chan struct{}
}

func (t *tracked) Start(ctx context.Context) error {
	t.started.Store(true)
	defer close(t.done)
	return t.leaderRunnable.Start(ctx)
}

// stopped is closed once every runnable of l that started has returned.
func (l *leaderRunnables) stopped() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-l.ctrl.done
		if l.watcher != nil && l.watcher.started.Load() {
			<-l.watcher.done
		}
	}()
	return done
}

// errLeaseLost is controller-runtime's error when a leader cannot renew its lease within
// RenewDeadline; it is matched by its text, the only form the manager returns it in
// (TestLeaderRidesOutAnAPIServerOutageLongerThanItsRenewDeadline fails if that changes).
const errLeaseLost = "leader election lost"

// stopTimeout bounds the wait for a controller that lost its lease to stop writing.
const stopTimeout = 20 * time.Second

// Run runs the secret-syncer until ctx ends. A leader that loses its lease (the API server
// out of reach for RenewDeadline) waits until its controller has stopped writing, then
// campaigns again in the same process with a new manager, instead of exiting: an API server
// outage costs a lease wait, not a restart of the container.
func Run(ctx context.Context, restConfig *rest.Config, opts Options) error {
	log := logr.FromContextOrDiscard(ctx)
	recampaign := false
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second}
	}
	backoff := newBackoff()
	for {
		mgr, leaders, err := newManager(ctx, restConfig, opts)
		if err != nil {
			if !recampaign {
				return err
			}
			// The API server that cost the lease may still be out of reach.
			log.Error(err, "building the manager again after a lost lease")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff.Step()):
			}
			continue
		}
		backoff = newBackoff()
		err = mgr.Start(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !opts.LeaderElection || !leaders.ctrl.started.Load() || !strings.Contains(err.Error(), errLeaseLost) {
			return fmt.Errorf("running secret-syncer: %w", err)
		}
		// The manager does not wait for its runnables when the lease is lost: this does, so
		// that the new manager's controller never writes beside the old one, nor its
		// missed-pull watcher evicts beside the old one.
		select {
		case <-leaders.stopped():
		case <-time.After(stopTimeout):
			return fmt.Errorf("running secret-syncer: the controller or the missed-pull watcher did not stop within %s of losing its lease: %w", stopTimeout, err)
		}
		log.Info("lost the leader lease (the API server out of reach for the renew deadline): the controller and the missed-pull watcher stopped, campaigning again")
		recampaign = true
	}
}
