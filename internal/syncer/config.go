package syncer

import (
	"time"

	"k8s.io/utils/clock"

	"github.com/enix/kuik/internal/credentialprovider"
)

// Config tunes the controller.
type Config struct {
	// ClusterResourceNamespace holds the secretRef Secrets, the retention records and the
	// leader election Lease.
	ClusterResourceNamespace string
	// ClusterID is the webhook's --cluster-id (valid or empty, routing.ValidateClusterID): a
	// pod's record of a mirror counts only with this cluster's mirror tag, and the missed-pull
	// decision routes to those tags.
	ClusterID string
	// Retention keeps an OnFailure entry no live pod uses any more (default 15 minutes).
	Retention time.Duration
	// ResyncPeriod re-applies every pair, whatever the hash says, restoring Secrets someone
	// else deleted or edited (default 10 minutes).
	ResyncPeriod time.Duration
	// Debounce collapses the events of one pair within this window into one apply (default 200ms).
	Debounce time.Duration
	// RetentionDelay collapses the changes of one resource's retention record into one write
	// (default Debounce). A graceful stop writes the pending ones; a crash loses at most
	// this window of uses. A namespace is named in the retention record before its first Secret,
	// without this delay.
	RetentionDelay time.Duration
	// Workers apply concurrently (default 16).
	Workers int
	// StatusDelay collapses status writes of one resource (default 1s).
	StatusDelay time.Duration
	// FallbackDelay collapses the pod changes of one resource into one computation of its live
	// fallbacks (status.activeFallbacks, fallbacks, fallbackPods), written only when they
	// change: at most one write per resource per FallbackDelay (default 10s).
	FallbackDelay time.Duration
	// Availability configures the background availability checks of the repositories ahead
	// of live fallbacks (status.unavailable); off when Availability.Interval is zero.
	Availability AvailabilityOptions
	// Clock is the retention's and the provider credentials' clock; nil is the real one.
	Clock clock.PassiveClock

	// Plugins runs the credential-provider plugins of the provider entries; nil leaves those
	// entries out (ProviderNotConfigured).
	Plugins *credentialprovider.Plugins
	// ProviderRenewFloor is the least time between two runs of a plugin for one image, and the
	// lifetime given to a credential the plugin asked not to cache is twice that (default 1 minute).
	ProviderRenewFloor time.Duration
	// ProviderRetry is the wait after a plugin failure, doubling up to 8× (default 30s).
	ProviderRetry time.Duration
	// ServiceAccountTokenTTL is the expiry asked for the tokens passed to plugins (default 10
	// minutes, the API server's minimum).
	ServiceAccountTokenTTL time.Duration
}

func (c *Config) defaults() {
	if c.Retention == 0 {
		c.Retention = 15 * time.Minute
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = 10 * time.Minute
	}
	if c.Debounce == 0 {
		c.Debounce = 200 * time.Millisecond
	}
	if c.RetentionDelay == 0 {
		c.RetentionDelay = c.Debounce
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.StatusDelay == 0 {
		c.StatusDelay = time.Second
	}
	if c.FallbackDelay <= 0 {
		c.FallbackDelay = DefaultFallbackDelay
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.ProviderRenewFloor <= 0 {
		c.ProviderRenewFloor = time.Minute
	}
	if c.ProviderRetry <= 0 {
		c.ProviderRetry = 30 * time.Second
	}
	if c.ServiceAccountTokenTTL <= 0 {
		c.ServiceAccountTokenTTL = 10 * time.Minute
	}
}

// DefaultFallbackDelay is Config.FallbackDelay's default.
const DefaultFallbackDelay = 10 * time.Second
