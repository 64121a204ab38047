package inventory_test

import (
	"github.com/enix/kuik/internal/keeper"
	"github.com/enix/kuik/internal/keeper/inventory"
)

var _ keeper.Store = (*inventory.Store)(nil)
