package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/keeper"
)

// execute runs the command with args, returning the options run was called with.
func execute(t *testing.T, args ...string) (Options, bool, error) {
	t.Helper()
	var got Options
	called := false
	cmd := NewCommand(func(_ context.Context, o Options) error {
		got, called = o, true
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(t.Context())
	return got, called, err
}

func TestFlagDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	got, called, err := execute(t)
	if err != nil || !called {
		t.Fatalf("called %v, err %v", called, err)
	}
	want := Options{Options: keeper.Options{
		Namespace:        "kuik-system",
		PlanInterval:     30 * time.Second,
		SelfHealInterval: time.Minute,
		SweepInterval:    time.Hour,
		StatusInterval:   10 * time.Second,
		Workers:          4,
		StallTimeout:     2 * time.Minute,
		Pacer:            transfer.PacerConfig{Rate: 10, Burst: 20, Reserve: 0.5},
	}}
	// ctrlkit's flags (tested there), the Lease named as the keeper's.
	want.BindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), "kuik-keeper")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the defaults do not pass keeper.Options.Validate: %v", err)
	}
}

func TestNamespaceDefaultsToPodNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "kuik")
	got, _, err := execute(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "kuik" {
		t.Errorf("namespace = %q, want $POD_NAMESPACE", got.Namespace)
	}
}

func TestFlags(t *testing.T) {
	got, _, err := execute(t,
		"--namespace=ops", "--cluster-id=eu-west-1", "--kubeconfig=/tmp/kc",
		"--plan-interval=1m", "--self-heal-interval=30s", "--sweep-interval=6h", "--status-interval=3s",
		"--workers=8", "--stall-timeout=45s", "--max-image-size=20Gi",
		"--pacer-rate=2.5", "--pacer-burst=5", "--pacer-reserve=0.25", "--leader-elect")
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Kubeconfig: "/tmp/kc", Options: keeper.Options{
		Namespace:        "ops",
		ClusterID:        "eu-west-1",
		PlanInterval:     time.Minute,
		SelfHealInterval: 30 * time.Second,
		SweepInterval:    6 * time.Hour,
		StatusInterval:   3 * time.Second,
		Workers:          8,
		StallTimeout:     45 * time.Second,
		MaxImageSize:     20 << 30,
		Pacer:            transfer.PacerConfig{Rate: 2.5, Burst: 5, Reserve: 0.25},
	}}
	want.BindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), "kuik-keeper")
	want.LeaderElection = true
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// --max-image-size takes a Kubernetes quantity or a plain byte count.
func TestMaxImageSize(t *testing.T) {
	for arg, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "500M": 500e6, "1.5Gi": 3 << 29, "20Gi": 20 << 30} {
		got, _, err := execute(t, "--max-image-size="+arg)
		if err != nil || got.MaxImageSize != want {
			t.Errorf("--max-image-size=%s: %d, %v; want %d", arg, got.MaxImageSize, err, want)
		}
	}
}

// Each invalid value is refused before the run, by an error naming its flag.
func TestInvalidFlagsDoNotRun(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"empty namespace":        {[]string{"--namespace="}, "--namespace"},
		"cluster id not a label": {[]string{"--cluster-id=EU_West"}, "--cluster-id"},
		"cluster id too long":    {[]string{"--cluster-id=" + strings.Repeat("a", 100)}, "--cluster-id"},
		"zero plan interval":     {[]string{"--plan-interval=0s"}, "--plan-interval"},
		"zero self-heal":         {[]string{"--self-heal-interval=0s"}, "--self-heal-interval"},
		"negative sweep":         {[]string{"--sweep-interval=-1h"}, "--sweep-interval"},
		"zero status interval":   {[]string{"--status-interval=0s"}, "--status-interval"},
		"no workers":             {[]string{"--workers=0"}, "--workers"},
		"zero stall timeout":     {[]string{"--stall-timeout=0s"}, "--stall-timeout"},
		"negative size":          {[]string{"--max-image-size=-1Gi"}, "--max-image-size"},
		"fractional bytes":       {[]string{"--max-image-size=0.5"}, "--max-image-size"},
		"size not a quantity":    {[]string{"--max-image-size=big"}, "--max-image-size"},
		"zero rate":              {[]string{"--pacer-rate=0"}, "--pacer-rate"},
		"zero burst":             {[]string{"--pacer-burst=0"}, "--pacer-burst"},
		"zero reserve":           {[]string{"--pacer-reserve=0"}, "--pacer-reserve"},
		"reserve of one":         {[]string{"--pacer-reserve=1"}, "--pacer-reserve"},
		// ctrlkit's checks (tested there) run: one case shows it.
		"election without an id": {[]string{"--leader-elect", "--leader-election-id="}, "--leader-election-id"},
		"unknown flag":           {[]string{"--nope"}, "--nope"},
		"argument":               {[]string{"extra"}, "extra"},
	} {
		t.Run(name, func(t *testing.T) {
			_, called, err := execute(t, tc.args...)
			if err == nil || called || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("called %v, err %v; want an error naming %s and no run", called, err, tc.want)
			}
		})
	}
}

// The logging flags are the other binaries' (internal/logflags, tested there); the run function
// gets the logger they configure.
func TestLoggingFlags(t *testing.T) {
	var logger logr.Logger
	cmd := NewCommand(func(ctx context.Context, _ Options) error {
		logger = logr.FromContextOrDiscard(ctx)
		return nil
	})
	var stderr bytes.Buffer
	cmd.SetArgs([]string{"-v=2"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&stderr)
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !logger.V(2).Enabled() || logger.V(3).Enabled() {
		t.Errorf("-v=2: V(2) %v, V(3) %v", logger.V(2).Enabled(), logger.V(3).Enabled())
	}
	logger.V(2).Info("probe line")
	if !strings.Contains(stderr.String(), "probe line") {
		t.Errorf("the logger does not write to the command's stderr: %q", stderr.String())
	}
	if _, called, err := execute(t, "-v=2", "--zap-log-level=debug"); err == nil || called {
		t.Errorf("-v with --zap-log-level: called %v, err %v", called, err)
	}
}
