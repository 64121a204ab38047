package keeper

import (
	"errors"
	"fmt"
	"time"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/routing"
)

// Options configure a keeper process; cmd/keeper's flags set them.
type Options struct {
	// Namespace is the release namespace: the push and source Secrets, the inventory
	// ConfigMaps and the leader election Lease live there, and the keeper reads no other
	// namespace's Secrets or ConfigMaps.
	Namespace string
	// ClusterID, when set, makes every kept tag this cluster's own (routing.ClusterTag): the
	// inventory and the garbage collection only ever touch tags with this cluster's suffix.
	ClusterID string

	// PlanInterval is how often the desired set is recomputed from the caches (events also
	// trigger a pass, at most once per PlanInterval).
	PlanInterval time.Duration
	// SelfHealInterval is how often every desired destination tag is HEADed (unpaced).
	SelfHealInterval time.Duration
	// SweepInterval is how often garbage collection runs.
	SweepInterval time.Duration
	// StatusInterval is the least time between two status writes of one ImageMirror.
	StatusInterval time.Duration

	// Workers is the number of copies running at once, all registries together.
	Workers int
	// StallTimeout abandons a blob upload (or download) that moved no byte for this long.
	StallTimeout time.Duration
	// MaxImageSize refuses an image whose missing blobs sum to more (TooLarge); 0: no limit.
	MaxImageSize int64
	// Pacer budgets manifest GETs per source registry.
	Pacer transfer.PacerConfig

	// ManagerOptions are the metrics and health servers and the leader election; the Lease
	// lives in Namespace, so that one replica copies and deletes while the others stand by.
	ctrlkit.ManagerOptions
}

// Defaults of the options; cmd/keeper's flags default to them.
const (
	DefaultLeaderElectionID = "kuik-keeper"
	DefaultPlanInterval     = 30 * time.Second
	DefaultSelfHealInterval = time.Minute
	DefaultSweepInterval    = time.Hour
	DefaultStatusInterval   = 10 * time.Second
	DefaultWorkers          = 4
	DefaultStallTimeout     = 2 * time.Minute
	// FieldManager is the keeper's field manager and user agent.
	FieldManager = "kuik-keeper"
)

// Validate names every option that is wrong.
func (o *Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("the release namespace must not be empty"))
	}
	if o.ClusterID != "" {
		if err := routing.ValidateClusterID(o.ClusterID); err != nil {
			errs = append(errs, fmt.Errorf("cluster ID: %w", err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"plan interval", o.PlanInterval}, {"self-heal interval", o.SelfHealInterval}, {"sweep interval", o.SweepInterval}, {"status interval", o.StatusInterval}, {"stall timeout", o.StallTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("the %s must be positive, got %s", d.name, d.v))
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers must be at least 1, got %d", o.Workers))
	}
	if o.MaxImageSize < 0 {
		errs = append(errs, fmt.Errorf("the maximum image size must not be negative, got %d", o.MaxImageSize))
	}
	if o.Pacer.Rate < 0 || o.Pacer.Burst < 0 || o.Pacer.Reserve < 0 || o.Pacer.Reserve >= 1 {
		errs = append(errs, fmt.Errorf("the pacer needs a rate ≥ 0, a burst ≥ 0 and a reserve in [0, 1), got %g, %d, %g", o.Pacer.Rate, o.Pacer.Burst, o.Pacer.Reserve))
	}
	if o.LeaderElection && o.LeaderElectionID == "" {
		errs = append(errs, errors.New("the leader election ID must not be empty with leader election"))
	}
	return errors.Join(errs...)
}
