package keeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/keeper/inventory"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

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

// Run runs the keeper until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	mgr, err := NewManager(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the keeper: %w", err)
	}
	return nil
}

// NewManager builds a manager running the keeper: narrow caches (CacheOptions), the scheduler
// (only on the leader), informer handlers that trigger its plan passes, a core/v1 event
// recorder, health probes and metrics. Client-side rate limiting is off: API Priority and
// Fairness governs.
func NewManager(ctx context.Context, restConfig *rest.Config, opts Options) (manager.Manager, error) {
	mgr, _, err := newManager(ctx, restConfig, opts)
	return mgr, err
}

func newManager(ctx context.Context, restConfig *rest.Config, opts Options) (manager.Manager, *Keeper, error) {
	if opts.Namespace == "" {
		return nil, nil, errors.New("the release namespace is required")
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, err
	}
	failures := &listFailures{now: time.Now}
	cacheOpts := CacheOptions(opts.Namespace)
	cacheOpts.DefaultWatchErrorHandler = failures.handler
	mgr, err := ctrlkit.NewManager(ctx, restConfig, FieldManager, opts.ManagerOptions, manager.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		LeaderElectionNamespace: opts.Namespace,
		LeaderElectionID:        DefaultLeaderElectionID,
	})
	if err != nil {
		return nil, nil, err
	}
	// core/v1 events (ctrlkit.NewEventRecorder): each image's note matters.
	_, recorder, err := ctrlkit.NewEventRecorder(mgr, FieldManager)
	if err != nil {
		return nil, nil, err
	}

	// The inventory is read and written straight from the API server, never a cache: its
	// resourceVersion is what stops a deposed leader's write.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme, HTTPClient: mgr.GetHTTPClient(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, nil, fmt.Errorf("building the inventory's client: %w", err)
	}
	g := &gatherer{cache: mgr.GetCache(), failures: failures, clusterID: opts.ClusterID}
	k := NewKeeper(opts, Deps{
		Gather:    g.Gather,
		Store:     inventory.NewStore(direct, opts.Namespace),
		Creds:     &secretCredentials{reader: mgr.GetCache(), namespace: opts.Namespace, now: time.Now},
		Report:    newReporter(mgr.GetClient(), recorder, opts.StatusInterval, nil),
		DeleteTag: transfer.DeleteTag,
	})
	if err := addTriggers(ctx, mgr.GetCache(), k.Trigger); err != nil {
		return nil, nil, err
	}
	if err := mgr.Add(k); err != nil {
		return nil, nil, fmt.Errorf("adding the keeper: %w", err)
	}
	return mgr, k, nil
}

// addTriggers starts every informer of the keeper and has each of its events ask for a plan
// pass (the scheduler runs at most one per PlanInterval however many are asked).
func addTriggers(ctx context.Context, c cache.Cache, trigger func()) error {
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(_, _ any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	}
	for _, obj := range watchedObjects() {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("event handler for %T: %w", obj, err)
		}
	}
	return nil
}
