package ctrlkit_test

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/enix/kuik/internal/ctrlkit"
)

// parse binds the flags with the Lease name "kuik-test", parses args and validates.
func parse(t *testing.T, args ...string) (ctrlkit.ManagerOptions, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o ctrlkit.ManagerOptions
	o.BindFlags(fs, "kuik-test")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.ValidateFlags()
}

func TestFlagDefaults(t *testing.T) {
	got, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := ctrlkit.ManagerOptions{
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		LeaderElectionID:       "kuik-test",
		// client-go's and controller-runtime's defaults.
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if _, err := parse(t, "--leader-elect"); err != nil {
		t.Errorf("the default lease timings do not pass with --leader-elect: %v", err)
	}
}

func TestFlags(t *testing.T) {
	got, err := parse(t,
		"--metrics-bind-address=127.0.0.1:9090", "--health-probe-bind-address=0",
		"--leader-elect", "--leader-election-id=other",
		"--leader-elect-lease-duration=90s", "--leader-elect-renew-deadline=60s", "--leader-elect-retry-period=5s")
	if err != nil {
		t.Fatal(err)
	}
	want := ctrlkit.ManagerOptions{
		MetricsBindAddress:     "127.0.0.1:9090",
		HealthProbeBindAddress: "0",
		LeaderElection:         true,
		LeaderElectionID:       "other",
		LeaseDuration:          90 * time.Second,
		RenewDeadline:          time.Minute,
		RetryPeriod:            5 * time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// Each invalid election is refused by an error naming its flags; both binaries print it.
func TestInvalidElectionFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"election without an id": {[]string{"--leader-elect", "--leader-election-id="},
			"--leader-election-id must not be empty with --leader-elect"},
		"renew past the lease": {[]string{"--leader-elect", "--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=20s"},
			"--leader-elect-lease-duration (10s) must exceed --leader-elect-renew-deadline (20s) + --leader-elect-retry-period (2s), and the renew deadline 1.2 × the retry period > 0"},
		"zero retry period": {[]string{"--leader-elect", "--leader-elect-retry-period=0s"},
			"--leader-elect-lease-duration (15s) must exceed --leader-elect-renew-deadline (10s) + --leader-elect-retry-period (0s), and the renew deadline 1.2 × the retry period > 0"},
		"lease within renew+retry": {[]string{"--leader-elect", "--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=59s", "--leader-elect-retry-period=2s"},
			"--leader-elect-lease-duration (1m0s) must exceed --leader-elect-renew-deadline (59s) + --leader-elect-retry-period (2s), and the renew deadline 1.2 × the retry period > 0"},
		"retry near the deadline": {[]string{"--leader-elect", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=9s"},
			"--leader-elect-lease-duration (15s) must exceed --leader-elect-renew-deadline (10s) + --leader-elect-retry-period (9s), and the renew deadline 1.2 × the retry period > 0"},
		"renew deadline within 1.2 × the retry period": {[]string{"--leader-elect", "--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=8500ms"},
			"--leader-elect-lease-duration (1m0s) must exceed --leader-elect-renew-deadline (10s) + --leader-elect-retry-period (8.5s), and the renew deadline 1.2 × the retry period > 0"},
		"both": {[]string{"--leader-elect", "--leader-election-id=", "--leader-elect-retry-period=0s"},
			"--leader-election-id must not be empty with --leader-elect\n" +
				"--leader-elect-lease-duration (15s) must exceed --leader-elect-renew-deadline (10s) + --leader-elect-retry-period (0s), and the renew deadline 1.2 × the retry period > 0"},
		"not a duration": {[]string{"--leader-elect-lease-duration=long"},
			`invalid argument "long" for "--leader-elect-lease-duration" flag: time: invalid duration "long"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(t, tc.args...)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The lease checks bind only with --leader-elect.
func TestLeaseUncheckedWithoutElection(t *testing.T) {
	if _, err := parse(t, "--leader-elect-lease-duration=1s", "--leader-elect-renew-deadline=20s", "--leader-election-id="); err != nil {
		t.Error(err)
	}
}

// The help both binaries print for these flags.
func TestFlagUsages(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var o ctrlkit.ManagerOptions
	o.BindFlags(fs, "kuik-test")
	want := `      --health-probe-bind-address string       address serving /healthz and /readyz; "0" turns it off (default ":8081")
      --leader-elect                           elect a leader through a Lease, for more than one replica
      --leader-elect-lease-duration duration   how long a standby waits, after the leader's last renewal, to take over (default 15s)
      --leader-elect-renew-deadline duration   how long the leader retries renewing before it gives up and exits: the longest API server outage it rides out (default 10s)
      --leader-elect-retry-period duration     wait between two attempts to acquire or renew (default 2s)
      --leader-election-id string              name of the leader election Lease (default "kuik-test")
      --metrics-bind-address string            address serving /metrics; "0" turns it off (default ":8080")
`
	if diff := cmp.Diff(want, fs.FlagUsages()); diff != "" {
		t.Errorf("usages (-want +got):\n%s", diff)
	}
}
