package app_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/cmd/webhook/app"
)

func run(t *testing.T, args ...string) (app.Options, app.CandidatesOptions, error) {
	t.Helper()
	var gotRun app.Options
	var gotCand app.CandidatesOptions
	cmd := app.NewCommand(
		func(_ context.Context, o app.Options) error { gotRun = o; return nil },
		func(_ context.Context, o app.CandidatesOptions) error { gotCand = o; return nil },
	)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return gotRun, gotCand, err
}

func TestServeFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	tests := map[string]struct {
		args []string
		env  string
		want app.Options
	}{
		"defaults": {
			want: app.Options{ClusterResourceNamespace: "kuik-system", ProbeTimeout: 2 * time.Second, CacheTTL: 10 * time.Second,
				MaxProbesInFlight: 256, MaxConnsPerRegistry: 16, CertDir: "/tmp/k8s-webhook-server/serving-certs", Port: 9443, MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081",
				ProbeRefreshIdle: 2 * time.Minute, ProbeRefreshesPerSecond: 20, ProbeRefreshesPerRegistry: 2, HintedWait: 200 * time.Millisecond, HintMaxAge: 5 * time.Minute},
		},
		"the namespace defaults to POD_NAMESPACE": {
			env: "kuik",
			want: app.Options{ClusterResourceNamespace: "kuik", ProbeTimeout: 2 * time.Second, CacheTTL: 10 * time.Second,
				MaxProbesInFlight: 256, MaxConnsPerRegistry: 16, CertDir: "/tmp/k8s-webhook-server/serving-certs", Port: 9443, MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081",
				ProbeRefreshIdle: 2 * time.Minute, ProbeRefreshesPerSecond: 20, ProbeRefreshesPerRegistry: 2, HintedWait: 200 * time.Millisecond, HintMaxAge: 5 * time.Minute},
		},
		"every flag": {
			args: []string{"--kubeconfig=/k", "--cluster-resource-namespace=ns", "--probe-timeout=500ms", "--cache-ttl=1m",
				"--max-probes-in-flight=8", "--max-conns-per-registry=2", "--cert-dir=/c", "--webhook-bind-address=127.0.0.1", "--webhook-port=1", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:2", "--pprof-bind-address=127.0.0.1:3",
				"--cluster-id=eu-west-1", "--match-conditions-gate", "--probe-refresh-idle=0s", "--probe-refreshes-per-second=2.5", "--probe-refreshes-per-registry=1", "--hinted-wait=0s", "--hint-max-age=1m"},
			want: app.Options{Kubeconfig: "/k", ClusterResourceNamespace: "ns", ProbeTimeout: 500 * time.Millisecond, CacheTTL: time.Minute,
				MaxProbesInFlight: 8, MaxConnsPerRegistry: 2, CertDir: "/c", Host: "127.0.0.1", Port: 1, MetricsBindAddress: "0", HealthProbeBindAddress: "127.0.0.1:2", PprofBindAddress: "127.0.0.1:3",
				ClusterID: "eu-west-1", MatchConditionsGate: true, ProbeRefreshesPerSecond: 2.5, ProbeRefreshesPerRegistry: 1, HintMaxAge: time.Minute},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.env)
			got, _, err := run(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := map[string][]string{
		"zero probe timeout":           {"--probe-timeout=0s"},
		"negative cache ttl":           {"--cache-ttl=-1s"},
		"no probe in flight":           {"--max-probes-in-flight=0"},
		"no connection per registry":   {"--max-conns-per-registry=0"},
		"negative refresh idle":        {"--probe-refresh-idle=-1s"},
		"no refresh a second":          {"--probe-refreshes-per-second=0"},
		"no refresh per registry":      {"--probe-refreshes-per-registry=0"},
		"hinted wait past the timeout": {"--hinted-wait=2s"},
		"negative hinted wait":         {"--hinted-wait=-1s"},
		"no hint age":                  {"--hint-max-age=0s"},
		"empty namespace":              {"--cluster-resource-namespace="},
		"cluster ID not a DNS label":   {"--cluster-id=EU_1"},
		"cluster ID too long":          {"--cluster-id=" + strings.Repeat("a", 33)},
		"cluster ID with kuik-":        {"--cluster-id=a-kuik-b"},
		"candidates without resources": {"candidates", "nginx"},
		"candidates with bad labels":   {"candidates", "--resources=f", "--pod-labels=a=b=c", "nginx"},
		"candidates with bad cluster":  {"candidates", "--resources=f", "--cluster-id=a-kuik-b", "nginx"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := run(t, args...)
			var usage app.UsageError
			if !errors.As(err, &usage) {
				t.Errorf("error = %v, want a UsageError (exit 2)", err)
			}
		})
	}
}

func TestCandidatesFlags(t *testing.T) {
	_, got, err := run(t, "candidates", "--resources=a.yaml", "--resources=b.yaml", "--namespace-labels=team=a", "--pod-labels=app=x,tier=web", "--cluster-id=eu-1", "nginx:1.27")
	if err != nil {
		t.Fatal(err)
	}
	want := app.CandidatesOptions{
		Resources:       []string{"a.yaml", "b.yaml"},
		NamespaceLabels: labels.Set{"team": "a"},
		PodLabels:       labels.Set{"app": "x", "tier": "web"},
		Image:           "nginx:1.27",
		ClusterID:       "eu-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
}

// The logging flags (-v klog-style, controller-runtime's --zap-*) reach both run functions as
// the logger in their context, with the V levels they ask for.
func TestLoggingFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want int // highest V level enabled
	}{
		"defaults: info":                      {want: 0},
		"-v=2":                                {args: []string{"-v=2"}, want: 2},
		"--v=3":                               {args: []string{"--v=3"}, want: 3},
		"--zap-log-level=debug":               {args: []string{"--zap-log-level=debug"}, want: 1},
		"--zap-log-level=4":                   {args: []string{"--zap-log-level=4"}, want: 4},
		"--zap-devel":                         {args: []string{"--zap-devel"}, want: 1},
		"-v with the encoder and stacktraces": {args: []string{"-v=5", "--zap-encoder=console", "--zap-stacktrace-level=panic", "--zap-time-encoding=iso8601"}, want: 5},
	} {
		for _, sub := range [][]string{nil, {"candidates", "--resources=f.yaml", "nginx"}} {
			t.Run(name+" "+strings.Join(sub, " "), func(t *testing.T) {
				var logger logr.Logger
				var gotLogger bool
				cmd := app.NewCommand(
					func(ctx context.Context, _ app.Options) error { logger, gotLogger = fromContext(ctx); return nil },
					func(ctx context.Context, _ app.CandidatesOptions) error {
						logger, gotLogger = fromContext(ctx)
						return nil
					},
				)
				var stderr bytes.Buffer
				cmd.SetErr(&stderr)
				cmd.SetArgs(append(slices.Clone(sub), tc.args...))
				if err := cmd.ExecuteContext(t.Context()); err != nil {
					t.Fatal(err)
				}
				if !gotLogger {
					t.Fatal("no logger in the run function's context")
				}
				for v := 0; v <= tc.want+1; v++ {
					if got := logger.V(v).Enabled(); got != (v <= tc.want) {
						t.Errorf("V(%d) enabled = %v, want %v", v, got, v <= tc.want)
					}
				}
				// It writes to the command's standard error.
				logger.V(tc.want).Info("written")
				if !strings.Contains(stderr.String(), "written") {
					t.Errorf("stderr = %q, want the logged line", stderr.String())
				}
			})
		}
	}

	for name, args := range map[string][]string{
		"-v and --zap-log-level":  {"-v=1", "--zap-log-level=debug"},
		"-v out of range":         {"-v=200"},
		"candidates, both levels": {"candidates", "--resources=f.yaml", "-v=1", "--zap-log-level=debug", "nginx"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := run(t, args...)
			var usage app.UsageError
			if !errors.As(err, &usage) {
				t.Errorf("error = %v, want a UsageError (exit 2)", err)
			}
		})
	}
	if _, _, err := run(t, "--zap-log-level=loud"); err == nil {
		t.Error("an unknown --zap-log-level was accepted")
	}
}

func fromContext(ctx context.Context) (logr.Logger, bool) {
	l, err := logr.FromContext(ctx)
	return l, err == nil
}

// --image-credential-provider-config is loaded as the kubelet loads it before the server
// starts: a valid file or directory reaches the run function, an invalid one stops the command
// with the loader's message and nothing runs.
func TestImageCredentialProviderConfigFlag(t *testing.T) {
	const valid = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    defaultCacheDuration: 12h
    matchImages: ["*.dkr.ecr.*.amazonaws.com"]
`
	dir := t.TempDir()
	file := filepath.Join(dir, "providers.yaml")
	if err := os.WriteFile(file, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"a file": file, "a directory": dir} {
		t.Run(name, func(t *testing.T) {
			got, _, err := run(t, "--image-credential-provider-config="+path)
			if err != nil {
				t.Fatal(err)
			}
			if got.ImageCredentialProviderConfig != path {
				t.Errorf("ImageCredentialProviderConfig = %q, want %q", got.ImageCredentialProviderConfig, path)
			}
			if got.CredentialProviders == nil || got.CredentialProviders.MatchingAny("123456789012.dkr.ecr.eu-west-1.amazonaws.com/acme/app:v1") == nil {
				t.Errorf("CredentialProviders = %+v, want the ECR provider", got.CredentialProviders)
			}
		})
	}

	invalid := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(invalid, []byte(strings.Replace(valid, "    defaultCacheDuration: 12h\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ path, want string }{
		"a provider without defaultCacheDuration": {invalid, "defaultCacheDuration"},
		"a path that does not exist":              {filepath.Join(dir, "missing.yaml"), "missing.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			ran := false
			cmd := app.NewCommand(func(context.Context, app.Options) error { ran = true; return nil }, nil)
			cmd.SetArgs([]string{"--image-credential-provider-config=" + tc.path})
			err := cmd.ExecuteContext(t.Context())
			if err == nil || !strings.Contains(err.Error(), "--image-credential-provider-config: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one naming the flag and %q", err, tc.want)
			}
			if ran {
				t.Error("the server ran with an invalid configuration")
			}
		})
	}
}
