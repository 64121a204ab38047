package ctrlkit

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// ManagerOptions are a manager's servers and leader election.
type ManagerOptions struct {
	// MetricsBindAddress serves /metrics; "" or "0" turns it off.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "" or "0" turns it off.
	HealthProbeBindAddress string
	// LeaderElection runs a Lease election, so that one replica acts and the others stand by
	// with warm caches.
	LeaderElection bool
	// LeaderElectionID names the Lease; empty: the binary's default.
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero keeps
	// controller-runtime's defaults (15s, 10s, 2s).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Flag defaults: controller-runtime's addresses, client-go's and controller-runtime's lease
// timings.
const (
	DefaultMetricsBindAddress     = ":8080"
	DefaultHealthProbeBindAddress = ":8081"
	DefaultLeaseDuration          = 15 * time.Second
	DefaultRenewDeadline          = 10 * time.Second
	DefaultRetryPeriod            = 2 * time.Second
)

// BindFlags adds --metrics-bind-address, --health-probe-bind-address, --leader-elect,
// --leader-election-id (defaultLeaderElectionID by default) and the three
// --leader-elect-* timings to fs.
func (o *ManagerOptions) BindFlags(fs *pflag.FlagSet, defaultLeaderElectionID string) {
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", DefaultMetricsBindAddress, `address serving /metrics; "0" turns it off`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", DefaultHealthProbeBindAddress, `address serving /healthz and /readyz; "0" turns it off`)
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "elect a leader through a Lease, for more than one replica")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", defaultLeaderElectionID, "name of the leader election Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration,
		"how long a standby waits, after the leader's last renewal, to take over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline,
		"how long the leader retries renewing before it gives up and exits: the longest API server outage it rides out")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", DefaultRetryPeriod, "wait between two attempts to acquire or renew")
}

// ValidateFlags names the flag of every setting that is wrong; the lease checks bind only with
// --leader-elect.
func (o *ManagerOptions) ValidateFlags() error {
	if !o.LeaderElection {
		return nil
	}
	var errs []error
	if o.LeaderElectionID == "" {
		errs = append(errs, errors.New("--leader-election-id must not be empty with --leader-elect"))
	}
	// A leader gives up RenewDeadline after its last failed retry (RetryPeriod after its last
	// renewal); a standby takes over LeaseDuration after that renewal: the first must come
	// first, or two replicas act at once. client-go also wants RenewDeadline > 1.2 × RetryPeriod.
	if o.RetryPeriod <= 0 || float64(o.RenewDeadline) <= 1.2*float64(o.RetryPeriod) || o.LeaseDuration <= o.RenewDeadline+o.RetryPeriod {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must exceed --leader-elect-renew-deadline (%s) + --leader-elect-retry-period (%s), and the renew deadline 1.2 × the retry period > 0",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	return errors.Join(errs...)
}
