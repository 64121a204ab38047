package keeper

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Keeper is the scheduler: plan passes, the per-registry queue, copies, self-heal and sweeps.
// It runs on the leader only.
//
//	keeper.go      Keeper, Start and its loops
//	schedule.go    a plan pass: Desired + Retained → items, plan skips
//	queue.go       items and the per-host queue: priority, round-robin, parking, backoff
//	copying.go     one copy: inventory first, transfer.Copy, referrers, outcome
//	selfheal.go    one HEAD per destination believed present
//	sweep.go       garbage collection: DecideSweep, deletions, inventory
//	statuscount.go status.keep and KeepReady, a pure function of the state
type Keeper struct {
	opts  Options
	deps  Deps
	pacer *transfer.Pacer
	// mounts is every copy's digest → destination repository table, keyed by registry: a
	// blob already in one mirror repository is mounted into its siblings (a mount that the
	// push credential cannot read falls back to streaming).
	mounts *transfer.Mounts

	// Seams for tests: the base transport of every registry request (nil: the default), the
	// monotonic clock compared with deps.Now, the copy retry backoff, and the least time
	// between two plan passes.
	transport           http.RoundTripper
	mono                func() time.Time
	retryBase, retryMax time.Duration
	minGap              time.Duration

	trigger chan struct{}
	wake    chan struct{}
	workers sync.WaitGroup
	// passes and sweeps count what ran, for tests to wait on.
	passes, sweeps atomic.Int64

	// invMu is held across Store.Save: one writer of the inventory at a time.
	invMu sync.Mutex
	inv   keep.Inventory

	mu sync.Mutex
	// items are the desired destinations, by (mirror, destination).
	items   map[wantKey]*item
	q       queue
	running int
	gen     uint64
	view    *view
	// skips are the plan's skips that status reports as failures, with when first seen.
	skips map[skipKey]time.Time
	// mirrors is what the status of each mirror is computed from, besides items.
	mirrors map[string]*mirrorState
	// pending are tags waiting for one Save (coalesced by ensureInventoried).
	pending []keep.Tag
	// healers are the self-heal's pullers, one per mirror; the self-heal loop's own.
	healers healers
	// lastWall and lastMono are the clocks at the last sweep, to doubt a jump.
	lastWall, lastMono time.Time
}

// wantKey is one desired destination.
type wantKey struct{ mirror, destination string }

// skipKey is one plan skip reported as a failure.
type skipKey struct {
	mirror, image string
	reason        v1alpha1.KeepFailureReason
}

// view is what the last plan pass gathered that the loops read: never the pods.
type view struct {
	mirrors  []keep.Mirror
	specs    map[string]*v1alpha1.ImageMirror
	used     keep.Plan // Used only
	safety   keep.Safety
	declared map[string]struct{}
	insecure map[string]struct{}
}

// mirrorState is what KeepReady is made of, and the last status written.
type mirrorState struct {
	// credErr is the last Creds.Push error; nil once it resolves.
	credErr error
	// dest is ReasonPushDenied or ReasonDestinationUnavailable after the last destination
	// failure of that kind; empty after a success.
	dest, destMessage string
	reported          *reported
}

// Default backoff of a failed copy, and the least time between two plan passes.
const (
	defaultRetryBase = 30 * time.Second
	defaultRetryMax  = 30 * time.Minute
	defaultMinGap    = time.Second
	// selfHealJobs bounds the self-heal HEADs at once.
	selfHealJobs = 8
)

// NewKeeper returns the scheduler.
func NewKeeper(opts Options, deps Deps) *Keeper {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	pc := opts.Pacer
	if pc.Now == nil {
		pc.Now = deps.Now
	}
	return &Keeper{
		opts:      opts,
		deps:      deps,
		pacer:     transfer.NewPacer(pc),
		mounts:    transfer.NewMounts(transfer.DefaultMounts),
		mono:      time.Now,
		retryBase: defaultRetryBase,
		retryMax:  defaultRetryMax,
		minGap:    defaultMinGap,
		trigger:   make(chan struct{}, 1),
		wake:      make(chan struct{}, 1),
		items:     map[wantKey]*item{},
		q:         newQueue(),
		skips:     map[skipKey]time.Time{},
		mirrors:   map[string]*mirrorState{},
	}
}

// Start runs the scheduler until ctx ends (manager.Runnable). Nothing is copied nor deleted
// before the inventory is loaded.
func (k *Keeper) Start(ctx context.Context) error {
	if k.load(ctx) != nil {
		return nil // the context ended while loading: a clean stop
	}
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){k.planLoop, k.dispatchLoop, k.selfHealLoop, k.sweepLoop, k.statusLoop} {
		wg.Go(func() { loop(ctx) })
	}
	wg.Wait()
	k.workers.Wait()
	return nil
}

// NeedLeaderElection: only the leader copies and deletes.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Trigger asks for a plan pass soon (an informer event); triggers coalesce, and passes are at
// most one per second.
func (k *Keeper) Trigger() {
	select {
	case k.trigger <- struct{}{}:
	default:
	}
}

// signal wakes the dispatcher.
func (k *Keeper) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// load reads the inventory, retrying with backoff; an error only when ctx ends.
func (k *Keeper) load(ctx context.Context) error {
	wait := 500 * time.Millisecond
	for {
		inv, err := k.deps.Store.Load(ctx)
		if err == nil {
			k.invMu.Lock()
			k.inv = inv
			k.invMu.Unlock()
			keptTagsMetric(inv)
			return nil
		}
		log.FromContext(ctx).Error(err, "loading the keeper's inventory", "retryIn", wait)
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// planLoop runs a plan pass at once, then every PlanInterval or soon after a Trigger.
func (k *Keeper) planLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-k.trigger:
			if err := sleepCtx(ctx, k.minGap-time.Since(last)); err != nil {
				return
			}
		}
		// Triggers that arrived meanwhile are served by this pass.
		select {
		case <-k.trigger:
		default:
		}
		last = time.Now()
		if err := k.planPass(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "keeper plan pass")
		}
		timer.Reset(k.opts.PlanInterval)
	}
}

// selfHealLoop HEADs the destinations believed present every SelfHealInterval.
func (k *Keeper) selfHealLoop(ctx context.Context) {
	every(ctx, k.opts.SelfHealInterval, k.selfHeal)
}

// sweepLoop collects garbage every SweepInterval, once a plan pass has run.
func (k *Keeper) sweepLoop(ctx context.Context) {
	every(ctx, k.opts.SweepInterval, k.sweep)
}

// statusLoop writes the changed statuses every StatusInterval.
func (k *Keeper) statusLoop(ctx context.Context) {
	every(ctx, k.opts.StatusInterval, k.reportStatus)
}

// every runs f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// sleepCtx waits d (nothing when d ≤ 0) or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mirror is the state of mirror name; k.mu is held.
func (k *Keeper) mirror(name string) *mirrorState {
	m, ok := k.mirrors[name]
	if !ok {
		m = &mirrorState{}
		k.mirrors[name] = m
	}
	return m
}
