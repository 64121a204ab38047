package keeper

import (
	"context"
	"errors"

	"k8s.io/client-go/rest"
)

// Run runs the keeper until ctx ends.
//
// Not wired yet: the manager, its caches and the scheduler arrive with issue 21's keeper.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	_, _ = ctx, cfg
	return errors.New("the keeper is not wired yet")
}
