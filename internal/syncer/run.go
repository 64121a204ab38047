package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Options configure a secret-syncer process.
type Options struct {
	Config
	// ManagerOptions are the metrics and health servers and the leader election; the Lease
	// lives in the cluster resource namespace, so that one replica writes and the others stand
	// by with warm caches.
	ctrlkit.ManagerOptions
	// MissedPulls, when set, runs the missed-pull controller on the leader (internal/missedpulls);
	// its ClusterResourceNamespace and ClusterID are the syncer's.
	MissedPulls *missedpulls.Options
	// MatchConditionsOf names the MutatingWebhookConfiguration whose pod webhook's
	// matchConditions the leader keeps in step with the routing resources
	// (internal/admitscope); empty leaves them alone.
	MatchConditionsOf string
	// MatchConditionsSettle is how long the leader waits after writing matchConditions
	// before it marks the resources they cover PodsSent, for every API server to see them
	// (default 2s).
	MatchConditionsSettle time.Duration
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
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, err
	}
	mgr, err := ctrlkit.NewManager(ctx, restConfig, FieldManager, opts.ManagerOptions, manager.Options{
		Scheme:                  scheme,
		Cache:                   CacheOptions(opts.ClusterResourceNamespace),
		LeaderElectionNamespace: opts.ClusterResourceNamespace,
		LeaderElectionID:        DefaultLeaderElectionID,
	})
	if err != nil {
		return nil, nil, err
	}
	// core/v1 events (ctrlkit.NewEventRecorder): each entry left out is its own cause.
	cs, recorder, err := ctrlkit.NewEventRecorder(mgr, FieldManager)
	if err != nil {
		return nil, nil, err
	}
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
	if opts.MatchConditionsOf != "" {
		cfg := opts.Config
		cfg.defaults()
		settle := opts.MatchConditionsSettle
		if settle == 0 {
			settle = DefaultMatchConditionsSettle
		}
		w := &scopeWriter{
			cache: mgr.GetCache(), client: mgr.GetClient(), cs: cs, config: opts.MatchConditionsOf,
			debounce: cfg.Debounce, resync: cfg.ResyncPeriod, retry: time.Second, settle: settle,
			log: mgr.GetLogger().WithName("match-conditions"),
		}
		if err := mgr.Add(w); err != nil {
			return nil, nil, fmt.Errorf("adding the matchConditions writer: %w", err)
		}
	}
	leaders.ctrl = &trackedController{Controller: ctrl, done: make(chan struct{})}
	if err := mgr.Add(leaders.ctrl); err != nil {
		return nil, nil, fmt.Errorf("adding controller: %w", err)
	}
	return mgr, leaders, nil
}

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
