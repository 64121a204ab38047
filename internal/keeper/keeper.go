package keeper

import (
	"context"
	"errors"
)

// Keeper is the scheduler: plan passes, the per-registry queue, copies, self-heal and sweeps.
// It runs on the leader only.
//
// Placeholder: the scheduler replaces this file.
type Keeper struct {
	opts Options
	deps Deps
}

// NewKeeper returns the scheduler.
func NewKeeper(opts Options, deps Deps) *Keeper { return &Keeper{opts: opts, deps: deps} }

// Start runs the scheduler until ctx ends (manager.Runnable).
func (k *Keeper) Start(ctx context.Context) error {
	return errors.New("the keeper's scheduler is not wired yet")
}

// NeedLeaderElection: only the leader copies and deletes.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Trigger asks for a plan pass soon (an informer event); passes are at most one per PlanInterval.
func (k *Keeper) Trigger() {}
