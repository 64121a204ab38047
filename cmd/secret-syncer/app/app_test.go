package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/syncer"
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
	want := Options{Options: syncer.Options{
		Config: syncer.Config{
			ClusterResourceNamespace: "kuik-system",
			Retention:                15 * time.Minute,
			ResyncPeriod:             10 * time.Minute,
			Debounce:                 200 * time.Millisecond,
			Workers:                  16,
			FallbackDelay:            10 * time.Second,
			Availability:             syncer.AvailabilityOptions{Interval: 30 * time.Second, PerSecond: 5, Timeout: probe.DefaultTimeout},
			ProviderRenewFloor:       time.Minute,
			ProviderRetry:            30 * time.Second,
		},
		MatchConditionsSettle: 2 * time.Second,
	}}
	// ctrlkit's flags (tested there), the Lease named as the secret-syncer's.
	want.BindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), "kuik-secret-syncer")
	// Missed pulls are off unless asked for: they need rights and egress of their own.
	want.Missed = MissedPullFlags{Owners: defaultOwners(), Options: missedpulls.Options{
		StuckPodAge: missedpulls.DefaultStuckPodAge, RecreateRate: missedpulls.DefaultRecreateRate, RecreateBurst: missedpulls.DefaultRecreateBurst,
		RecreateOwners: missedpulls.DefaultRecreateOwners, ProbeTimeout: probe.DefaultTimeout, ProbeTTL: probe.DefaultTTL,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

func TestClusterResourceNamespaceDefaultsToPodNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "kuik")
	got, _, err := execute(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClusterResourceNamespace != "kuik" {
		t.Errorf("cluster resource namespace = %q, want $POD_NAMESPACE", got.ClusterResourceNamespace)
	}
}

func TestFlags(t *testing.T) {
	got, _, err := execute(t,
		"--cluster-resource-namespace=ops", "--kubeconfig=/tmp/kc", "--retention=1h", "--resync-period=30s",
		"--debounce=1s", "--workers=4", "--fallback-delay=3s", "--leader-elect", "--cluster-id=eu-1", "--match-conditions-settle=5s",
		"--availability-check-interval=0", "--availability-checks-per-second=2.5", "--availability-check-timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Kubeconfig: "/tmp/kc", Options: syncer.Options{
		Config: syncer.Config{
			ClusterResourceNamespace: "ops",
			ClusterID:                "eu-1",
			Retention:                time.Hour,
			ResyncPeriod:             30 * time.Second,
			Debounce:                 time.Second,
			Workers:                  4,
			FallbackDelay:            3 * time.Second,
			Availability:             syncer.AvailabilityOptions{PerSecond: 2.5, Timeout: 3 * time.Second},
			ProviderRenewFloor:       time.Minute,
			ProviderRetry:            30 * time.Second,
		},
		MatchConditionsSettle: 5 * time.Second,
	}}
	want.BindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), "kuik-secret-syncer")
	want.LeaderElection = true
	// Missed pulls are off unless asked for: they need rights and egress of their own.
	want.Missed = MissedPullFlags{Owners: defaultOwners(), Options: missedpulls.Options{
		StuckPodAge: missedpulls.DefaultStuckPodAge, RecreateRate: missedpulls.DefaultRecreateRate, RecreateBurst: missedpulls.DefaultRecreateBurst,
		RecreateOwners: missedpulls.DefaultRecreateOwners, ProbeTimeout: probe.DefaultTimeout, ProbeTTL: probe.DefaultTTL,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

func TestInvalidFlagsDoNotRun(t *testing.T) {
	for name, args := range map[string][]string{
		"no workers":          {"--workers=0"},
		"zero fallback delay": {"--fallback-delay=0s"},
		"negative settle":     {"--match-conditions-settle=-1s"},
		"empty namespace":     {"--cluster-resource-namespace="},
		"zero resync":         {"--resync-period=0s"},
		"negative retention":  {"--retention=-1m"},
		// ctrlkit's checks (tested there) run: one case shows it.
		"election without an id": {"--leader-elect", "--leader-election-id="},
		"cluster ID not a label": {"--cluster-id=EU_1"},
		"cluster ID too long":    {"--cluster-id=" + strings.Repeat("a", 33)},
		"cluster ID with kuik-":  {"--cluster-id=a-kuik-b"},
		"unknown flag":           {"--nope"},
		"argument":               {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			_, called, err := execute(t, args...)
			if err == nil || called {
				t.Errorf("called %v, err %v; want an error and no run", called, err)
			}
		})
	}
}

// render prints the Secrets the syncer's decisions give for the files, sorted, and one stderr
// line per entry left out. The golden files were checked by hand: team-a and team-b (selected)
// get acme's quay.io entry with the quay.io/acme credential (the most specific key), its
// registry.local entry is left out since local-creds is in another namespace, and its ghcr.io
// entry does not inject; team-c gets the mirror's Secret for its live pod; team-b's finished
// pod and the None mirror write nothing.
func TestRender(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(func(context.Context, Options) error {
		t.Fatal("render ran the syncer")
		return nil
	})
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"render",
		"--resources", filepath.Join("testdata", "resources.yaml"),
		"--secrets", filepath.Join("testdata", "secrets.yaml"),
		"--namespaces", filepath.Join("testdata", "namespaces.yaml"),
		"--pods", filepath.Join("testdata", "pods.yaml"),
		"--cluster-resource-namespace", "kuik-system",
	})
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	for file, got := range map[string]string{"render.golden.yaml": stdout.String(), "render.golden.stderr": stderr.String()} {
		want, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
}

// render with --cluster-id decides as that cluster's syncer: the pods of testdata record the
// mirror's images under their own tags, not the cluster's, so the mirror's Secret goes; a bad
// ID is refused.
func TestRenderWithClusterID(t *testing.T) {
	render := func(id string) (string, error) {
		var stdout bytes.Buffer
		cmd := NewCommand(nil)
		cmd.SetOut(&stdout)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"render",
			"--resources", filepath.Join("testdata", "resources.yaml"),
			"--secrets", filepath.Join("testdata", "secrets.yaml"),
			"--namespaces", filepath.Join("testdata", "namespaces.yaml"),
			"--pods", filepath.Join("testdata", "pods.yaml"),
			"--cluster-resource-namespace", "kuik-system",
			"--cluster-id", id,
		})
		err := cmd.ExecuteContext(t.Context())
		return stdout.String(), err
	}
	const mirrorSecret = "name: kuik-inject-imagemirror-mirror\n"
	if out, err := render(""); err != nil || !strings.Contains(out, mirrorSecret) {
		t.Fatalf("without a cluster ID: err %v, output %q; want the mirror's Secret", err, out)
	}
	out, err := render("c1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, mirrorSecret) {
		t.Errorf("with --cluster-id=c1 the mirror's Secret is rendered for records of the images' own tags:\n%s", out)
	}
	if !strings.Contains(out, "name: kuik-inject-imagealternative-acme\n") {
		t.Errorf("with --cluster-id=c1 the alternative's Secrets are gone:\n%s", out)
	}
	if _, err := render("a-kuik-b"); err == nil || !strings.Contains(err.Error(), "--cluster-id") {
		t.Errorf("render --cluster-id=a-kuik-b: %v, want a refusal naming the flag", err)
	}
}

func TestRenderRequiresResourcesAndSecrets(t *testing.T) {
	cmd := NewCommand(nil)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"render", "--resources", filepath.Join("testdata", "resources.yaml")})
	err := cmd.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "secrets") {
		t.Errorf("render without --secrets: %v", err)
	}
}

// The logging flags of both kuik binaries: -v (klog's, for kuik and client-go) and
// controller-runtime's --zap-* flags; the run function gets the logger they configure.
func TestLoggingFlags(t *testing.T) {
	tests := map[string]struct {
		args      []string
		verbosity int // the highest V level enabled
		json      bool
	}{
		"default: info":                  {verbosity: 0, json: true},
		"-v=2":                           {args: []string{"-v=2"}, verbosity: 2, json: true},
		"-v 3":                           {args: []string{"-v", "3"}, verbosity: 3, json: true},
		"--v=1":                          {args: []string{"--v=1"}, verbosity: 1, json: true},
		"--zap-log-level=debug":          {args: []string{"--zap-log-level=debug"}, verbosity: 1, json: true},
		"--zap-log-level=4":              {args: []string{"--zap-log-level=4"}, verbosity: 4, json: true},
		"--zap-log-level=error":          {args: []string{"--zap-log-level=error"}, verbosity: -1, json: true},
		"--zap-encoder=console with -v":  {args: []string{"--zap-encoder=console", "-v=1"}, verbosity: 1},
		"--zap-devel: console and debug": {args: []string{"--zap-devel"}, verbosity: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			var logger logr.Logger
			called := false
			cmd := NewCommand(func(ctx context.Context, _ Options) error {
				logger, called = logr.FromContextOrDiscard(ctx), true
				return nil
			})
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&stderr)
			if err := cmd.ExecuteContext(t.Context()); err != nil || !called {
				t.Fatalf("called %v, err %v", called, err)
			}
			for v := 0; v <= 5; v++ {
				if got := logger.V(v).Enabled(); got != (v <= tc.verbosity) {
					t.Errorf("V(%d) enabled = %v, want %v", v, got, v <= tc.verbosity)
				}
			}
			if tc.verbosity >= 0 {
				logger.V(tc.verbosity).Info("probe line", "k", "v")
				line := stderr.String()
				if !strings.Contains(line, "probe line") {
					t.Fatalf("V(%d) line not written to the command's stderr: %q", tc.verbosity, line)
				}
				var obj map[string]any
				if isJSON := json.Unmarshal([]byte(strings.TrimSpace(line)), &obj) == nil; isJSON != tc.json {
					t.Errorf("JSON output = %v, want %v: %q", isJSON, tc.json, line)
				}
			}
		})
	}
}

func TestInvalidLoggingFlagsDoNotRun(t *testing.T) {
	for name, args := range map[string][]string{
		"-v and --zap-log-level":  {"-v=2", "--zap-log-level=debug"},
		"negative -v":             {"-v=-1"},
		"-v that is not a number": {"-v=loud"},
		"unknown zap level":       {"--zap-log-level=loud"},
		"unknown encoder":         {"--zap-encoder=xml"},
	} {
		t.Run(name, func(t *testing.T) {
			_, called, err := execute(t, args...)
			if err == nil || called {
				t.Errorf("called %v, err %v; want an error and no run", called, err)
			}
		})
	}
}
