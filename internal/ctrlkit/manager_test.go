package ctrlkit

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/enix/kuik/internal/testenv"
)

// settings are the fields of manager.Options that ManagerOptions and own decide.
type settings struct {
	Metrics, Health                           string
	Election, ReleaseOnCancel                 bool
	ID, Namespace                             string
	LeaseDuration, RenewDeadline, RetryPeriod *time.Duration
	// OwnScheme and OwnCache: own's are kept.
	OwnScheme, OwnCache bool
}

func settingsOf(m, own manager.Options) settings {
	return settings{
		Metrics: m.Metrics.BindAddress, Health: m.HealthProbeBindAddress,
		Election: m.LeaderElection, ReleaseOnCancel: m.LeaderElectionReleaseOnCancel,
		ID: m.LeaderElectionID, Namespace: m.LeaderElectionNamespace,
		LeaseDuration: m.LeaseDuration, RenewDeadline: m.RenewDeadline, RetryPeriod: m.RetryPeriod,
		OwnScheme: m.Scheme == own.Scheme, OwnCache: cmp.Equal(m.Cache.DefaultNamespaces, own.Cache.DefaultNamespaces),
	}
}

func ptr(d time.Duration) *time.Duration { return &d }

func TestManagerOptions(t *testing.T) {
	own := manager.Options{
		Scheme:                  runtime.NewScheme(),
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{"ns": {}}},
		LeaderElectionNamespace: "ns",
		LeaderElectionID:        "kuik-default",
	}
	for name, tc := range map[string]struct {
		o    ManagerOptions
		want settings
	}{
		"zero: servers off, the binary's Lease, controller-runtime's timings": {
			o:    ManagerOptions{},
			want: settings{Metrics: "0", ReleaseOnCancel: true, ID: "kuik-default", Namespace: "ns", OwnScheme: true, OwnCache: true},
		},
		`health "0" is off, metrics "0" stays`: {
			o:    ManagerOptions{MetricsBindAddress: "0", HealthProbeBindAddress: "0"},
			want: settings{Metrics: "0", ReleaseOnCancel: true, ID: "kuik-default", Namespace: "ns", OwnScheme: true, OwnCache: true},
		},
		"every setting": {
			o: ManagerOptions{
				MetricsBindAddress: ":8080", HealthProbeBindAddress: "127.0.0.1:8081", LeaderElection: true, LeaderElectionID: "other",
				LeaseDuration: 90 * time.Second, RenewDeadline: time.Minute, RetryPeriod: 5 * time.Second,
			},
			want: settings{
				Metrics: ":8080", Health: "127.0.0.1:8081", Election: true, ReleaseOnCancel: true, ID: "other", Namespace: "ns",
				LeaseDuration: ptr(90 * time.Second), RenewDeadline: ptr(time.Minute), RetryPeriod: ptr(5 * time.Second),
				OwnScheme: true, OwnCache: true,
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := managerOptions(logr.Discard(), tc.o, own)
			if diff := cmp.Diff(tc.want, settingsOf(got, own)); diff != "" {
				t.Errorf("manager options (-want +got):\n%s", diff)
			}
		})
	}
}

// The manager's runnables get a context of their own: it carries the logger of NewManager's.
func TestRunnablesLogToTheLogger(t *testing.T) {
	var buf bytes.Buffer
	logger := funcr.New(func(prefix, args string) { buf.WriteString(args) }, funcr.Options{})
	mopts := managerOptions(logger, ManagerOptions{}, manager.Options{})
	if mopts.Logger != logger {
		t.Error("the manager's logger is not the context's")
	}
	logr.FromContextOrDiscard(mopts.BaseContext()).Info("probe line")
	if !bytes.Contains(buf.Bytes(), []byte("probe line")) {
		t.Errorf("a runnable's line went elsewhere: %q", buf.String())
	}
}

// The manager runs on a copy of the configuration, without client-side rate limiting, with
// the binary's user agent unless the configuration has one.
func TestNewManagerConfig(t *testing.T) {
	for name, tc := range map[string]struct{ agent, want string }{
		"no user agent":    {"", "kuik-test"},
		"the config's one": {"theirs", "theirs"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10, UserAgent: tc.agent}
			mgr, err := NewManager(context.Background(), cfg, "kuik-test", ManagerOptions{}, manager.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := mgr.GetConfig()
			if got == cfg || cfg.QPS != 5 || cfg.Burst != 10 || cfg.UserAgent != tc.agent {
				t.Errorf("the caller's configuration changed: %+v", cfg)
			}
			if got.QPS != -1 || got.Burst != 0 || got.UserAgent != tc.want {
				t.Errorf("QPS %v, burst %d, user agent %q; want -1, 0, %q", got.QPS, got.Burst, got.UserAgent, tc.want)
			}
		})
	}
}

// The health server answers /healthz/ping, and /readyz/informers once the informers (none
// here) have synced.
func TestNewManagerHealthChecks(t *testing.T) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	mgr, err := NewManager(t.Context(), &rest.Config{Host: "https://127.0.0.1:1"}, "kuik-test", ManagerOptions{HealthProbeBindAddress: addr}, manager.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	for _, path := range []string{"/healthz/ping", "/readyz/informers"} {
		var code int
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
			if err != nil {
				return false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil // not listening yet
			}
			resp.Body.Close()
			code = resp.StatusCode
			return true, nil
		})
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d, %v; want 200", path, code, err)
		}
	}
}
