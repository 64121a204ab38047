package credentialprovider

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fakeprovider.CleanupBuild()
	os.Exit(code)
}

const (
	apiV1       = "credentialprovider.kubelet.k8s.io/v1"
	apiV1beta1  = "credentialprovider.kubelet.k8s.io/v1beta1"
	apiV1alpha1 = "credentialprovider.kubelet.k8s.io/v1alpha1"
)

var testKey = []byte("plugins-test-key")

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// observation is one call of Options.Observe.
type observation struct{ Provider, Result string }

// fixture is a Plugins running the fake provider "fake" (and "other", matching other.io).
type fixture struct {
	plugins  *Plugins
	stateDir string
	clock    *clock
	mu       sync.Mutex
	observed []observation
}

// newFixture runs the fake plugin as provider "fake" matching *.example.com, with env on top
// of the test key and state dir; edit changes the provider before the Plugins is built.
func newFixture(t *testing.T, env []string, edit func(*Provider), opts ...func(*Options)) *fixture {
	t.Helper()
	binDir, stateDir := t.TempDir(), t.TempDir()
	fakeprovider.Build(t, binDir, "fake")
	fakeprovider.Build(t, binDir, "other")
	p := Provider{
		Name:                 "fake",
		MatchImages:          []string{"*.example.com"},
		DefaultCacheDuration: 10 * time.Minute,
		APIVersion:           apiV1,
		Env: append([]string{
			fakeprovider.EnvKey + "=" + string(testKey),
			fakeprovider.EnvStateDir + "=" + stateDir,
		}, env...),
	}
	if edit != nil {
		edit(&p)
	}
	other := Provider{Name: "other", MatchImages: []string{"other.io"}, DefaultCacheDuration: time.Minute, APIVersion: apiV1,
		Env: []string{fakeprovider.EnvStateDir + "=" + stateDir}}
	f := &fixture{stateDir: stateDir, clock: &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}}
	o := Options{
		Now: f.clock.Now,
		Observe: func(provider, result string, _ time.Duration) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.observed = append(f.observed, observation{provider, result})
		},
	}
	for _, edit := range opts {
		edit(&o)
	}
	f.plugins = NewPlugins(&Config{Providers: []Provider{p, other}}, binDir, o)
	return f
}

func (f *fixture) get(t *testing.T, image string) Credential {
	t.Helper()
	c, err := f.plugins.Get(t.Context(), "fake", Request{Image: image})
	if err != nil {
		t.Fatalf("Get(%s): %v", image, err)
	}
	return c
}

// execs counts the plugin's runs so far.
func (f *fixture) execs(t *testing.T) int {
	t.Helper()
	return len(fakeprovider.MustRequests(t, f.stateDir))
}

func (f *fixture) observations() []observation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]observation(nil), f.observed...)
}

// checkMinted fails unless c is a credential the fake plugin minted with testKey, unexpired.
func checkMinted(t *testing.T, c Credential) {
	t.Helper()
	if c.Auth.Username != fakeprovider.Username || !fakeprovider.Verify(testKey, c.Auth.Password, time.Now()) {
		t.Errorf("credential %q is not an unexpired fake provider credential", c.Auth.Username)
	}
}

func TestGetRoundTripsEachAPIVersion(t *testing.T) {
	for _, apiVersion := range []string{apiV1, apiV1beta1, apiV1alpha1} {
		t.Run(apiVersion, func(t *testing.T) {
			f := newFixture(t, nil, func(p *Provider) { p.APIVersion = apiVersion })
			c := f.get(t, "registry.example.com/team/app:v1@sha256:"+sixtyFourHex)
			checkMinted(t, c)
			want := Credential{
				Auth:         c.Auth,
				Key:          "registry.example.com",
				ObtainedAt:   f.clock.Now(),
				ExpiresAt:    f.clock.Now().Add(time.Hour),
				CacheKeyType: "Registry",
			}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			reqs := fakeprovider.MustRequests(t, f.stateDir)
			if len(reqs) != 1 || reqs[0].APIVersion != apiVersion || reqs[0].Image != "registry.example.com/team/app" {
				t.Errorf("requests = %+v, want one %s request for registry.example.com/team/app", reqs, apiVersion)
			}
			if diff := cmp.Diff([]observation{{"fake", ResultSuccess}}, f.observations()); diff != "" {
				t.Errorf("observed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetReadsAConfigFileEndToEnd(t *testing.T) {
	dir, binDir, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	fakeprovider.Build(t, binDir, "ecr-like")
	p := writeFile(t, dir, "providers.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"+
		"  - name: ecr-like\n"+
		"    matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\n"+
		"    defaultCacheDuration: 12h\n"+
		"    apiVersion: credentialprovider.kubelet.k8s.io/v1\n"+
		"    env:\n"+
		"      - {name: "+fakeprovider.EnvStateDir+", value: \""+stateDir+"\"}\n")
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckBinDir(binDir); err != nil {
		t.Fatal(err)
	}
	c, err := NewPlugins(cfg, binDir, Options{}).Get(t.Context(), "ecr-like", Request{Image: "123.dkr.ecr.eu-west-1.amazonaws.com/app:v1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Key != "123.dkr.ecr.eu-west-1.amazonaws.com" || !fakeprovider.Verify([]byte(fakeprovider.DefaultKey), c.Auth.Password, time.Now()) {
		t.Errorf("Get = key %q, want a valid credential for 123.dkr.ecr.eu-west-1.amazonaws.com", c.Key)
	}
}

func TestGetPassesArgsAndEnvOnTopOfTheProcessEnvironment(t *testing.T) {
	t.Setenv("KUIK_TEST_INHERITED", "from-process")
	t.Setenv("KUIK_TEST_OVERRIDDEN", "from-process")
	f := newFixture(t, []string{
		fakeprovider.EnvRecordEnv + "=KUIK_TEST_INHERITED,KUIK_TEST_OVERRIDDEN,KUIK_TEST_CONFIG",
		"KUIK_TEST_OVERRIDDEN=from-config",
		"KUIK_TEST_CONFIG=from-config",
	}, func(p *Provider) { p.Args = []string{"get-credentials", "--region=eu-west-1"} })
	f.get(t, "registry.example.com/app")
	reqs := fakeprovider.MustRequests(t, f.stateDir)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	if diff := cmp.Diff([]string{"get-credentials", "--region=eu-west-1"}, reqs[0].Args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	want := map[string]string{
		"KUIK_TEST_INHERITED":  "from-process",
		"KUIK_TEST_OVERRIDDEN": "from-config",
		"KUIK_TEST_CONFIG":     "from-config",
	}
	if diff := cmp.Diff(want, reqs[0].Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestGetKillsAHangingPluginAndItsChildrenAtTheTimeout(t *testing.T) {
	f := newFixture(t, nil, nil, func(o *Options) { o.Timeout = 3 * time.Second })
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeHang)
	_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), fakeprovider.HangStderr) {
		t.Errorf("error %q lacks the plugin's stderr %q", err, fakeprovider.HangStderr)
	}
	if diff := cmp.Diff([]observation{{"fake", ResultTimeout}}, f.observations()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
	b, err := os.ReadFile(filepath.Join(f.stateDir, fakeprovider.ChildPIDFile))
	if err != nil {
		t.Fatalf("the hanging plugin recorded no child: %v", err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	testutil.Eventually(t, 10*time.Second, "the plugin's child is killed", func(context.Context) error {
		if alive(pid) {
			return errors.New("still running")
		}
		return nil
	})
}

// alive reports whether the process runs (a zombie waiting for its parent does not run).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func TestGetErrorCarriesStderrAndNeverStdout(t *testing.T) {
	f := newFixture(t, nil, nil)
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeFail)
	_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app"})
	if err == nil {
		t.Fatal("Get succeeded with a failing plugin")
	}
	if !strings.Contains(err.Error(), fakeprovider.FailStderr) || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("error %q lacks the exit status or the plugin's stderr", err)
	}
	if strings.Contains(err.Error(), fakeprovider.FailStdoutSecret) {
		t.Errorf("error %q holds the plugin's stdout", err)
	}
	if diff := cmp.Diff([]observation{{"fake", ResultError}}, f.observations()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

// A plugin that echoes its request and the time to stderr: the error shows the exit status and
// the first line redacted (the same on every run), the PluginError's Stderr has it all, for logs.
func TestGetErrorShowsOnlyARedactedFirstLineOfStderr(t *testing.T) {
	f := newFixture(t, nil, nil)
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeEcho)
	var msgs []string
	for range 2 {
		_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app"})
		pe, ok := errors.AsType[*PluginError](err)
		if !ok {
			t.Fatalf("Get = %v, want a PluginError", err)
		}
		if !strings.Contains(pe.Stderr, "CredentialProviderRequest") || !strings.Contains(pe.Stderr, fakeprovider.FailStderr) {
			t.Errorf("Stderr %q lacks what the plugin wrote", pe.Stderr)
		}
		msgs = append(msgs, err.Error())
	}
	want := `credential provider "fake", image "registry.example.com/app": running ` + f.plugins.binDir + `/fake: exit status 1; stderr: [redacted] got [redacted]`
	for _, m := range msgs {
		if diff := cmp.Diff(want, m); diff != "" {
			t.Errorf("error (-want +got):\n%s", diff)
		}
	}
}

func TestRedactLine(t *testing.T) {
	tests := map[string]struct{ line, token, want string }{
		"words kept":                     {"error: access denied", "", "error: access denied"},
		"a timestamp and an id redacted": {"2026-12-02T00:00:00Z request req-42 failed", "", "[redacted] request [redacted] failed"},
		"the token redacted":             {"token=abc was refused", "abc", "token=[redacted] was refused"},
		"a long word redacted":           {"got eyJhbGciOiJSUzI1NiIsImtpZCI6", "", "got [redacted]"},
		"bounded":                        {strings.Repeat("word ", 100), "", strings.TrimSpace(strings.Repeat("word ", 40)) + "..."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := redactLine(tc.line, tc.token); got != tc.want {
				t.Errorf("redactLine(%q) = %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

func TestGetRefusesInvalidResponses(t *testing.T) {
	tests := map[string]struct {
		env  []string
		mode string
		want string // the error after `credential provider "fake", image "registry.example.com/app": `
	}{
		"stdout that is not JSON": {
			mode: fakeprovider.ModeGarbage,
			want: "invalid credential provider response: stdout is not a JSON object with apiVersion and kind",
		},
		"stdout larger than a MiB": {
			mode: fakeprovider.ModeFlood,
			want: "invalid credential provider response: stdout exceeds 1048576 bytes",
		},
		"another apiVersion than the request's": {
			env: []string{fakeprovider.EnvResponseAPIVersion + "=" + apiV1beta1},
			want: "invalid credential provider response: apiVersion from credential plugin response did not match expected apiVersion:" +
				"credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
		},
		"another kind": {
			env:  []string{fakeprovider.EnvResponseKind + "=CredentialProviderRequest"},
			want: `invalid credential provider response: unexpected kind "CredentialProviderRequest", want CredentialProviderResponse`,
		},
		"an unknown cacheKeyType": {
			env:  []string{fakeprovider.EnvCacheKeyType + "=Pod"},
			want: `invalid credential provider response: credential provider plugin did not return a valid cacheKeyType: "Pod" (want Image, Registry or Global)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.env, nil)
			if tc.mode != "" {
				fakeprovider.SetMode(t, f.stateDir, tc.mode)
			}
			_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app"})
			if !errors.Is(err, ErrInvalidResponse) {
				t.Fatalf("Get = %v, want an error wrapping ErrInvalidResponse", err)
			}
			if diff := cmp.Diff(`credential provider "fake", image "registry.example.com/app": `+tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]observation{{"fake", ResultInvalidResponse}}, f.observations()); diff != "" {
				t.Errorf("observed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetHonoursCacheDuration(t *testing.T) {
	tests := map[string]struct {
		ttl            string
		defaultCache   time.Duration
		wantExpiresIn  time.Duration // 0: not cached
		wantSecondExec bool
	}{
		"absent: the provider's default":                  {ttl: fakeprovider.TTLAbsent, defaultCache: 10 * time.Minute, wantExpiresIn: 10 * time.Minute},
		"absent with a default of 0: not cached":          {ttl: fakeprovider.TTLAbsent, defaultCache: 0, wantSecondExec: true},
		"0: not cached, the next Get runs the plugin":     {ttl: "0s", defaultCache: 10 * time.Minute, wantSecondExec: true},
		"positive: cached that long, over the default":    {ttl: "30m", defaultCache: 10 * time.Minute, wantExpiresIn: 30 * time.Minute},
		"positive with a default of 0: cached that long ": {ttl: "30m", defaultCache: 0, wantExpiresIn: 30 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, []string{fakeprovider.EnvTTL + "=" + tc.ttl}, func(p *Provider) { p.DefaultCacheDuration = tc.defaultCache })
			first := f.get(t, "registry.example.com/app")
			checkMinted(t, first)
			var wantExpires time.Time
			if tc.wantExpiresIn > 0 {
				wantExpires = f.clock.Now().Add(tc.wantExpiresIn)
			}
			if !first.ExpiresAt.Equal(wantExpires) {
				t.Errorf("ExpiresAt = %v, want %v", first.ExpiresAt, wantExpires)
			}
			second := f.get(t, "registry.example.com/app")
			if got, want := f.execs(t), map[bool]int{false: 1, true: 2}[tc.wantSecondExec]; got != want {
				t.Errorf("%d execs after two Gets, want %d", got, want)
			}
			if second.FromCache == tc.wantSecondExec {
				t.Errorf("second Get FromCache = %v, want %v", second.FromCache, !tc.wantSecondExec)
			}
			if tc.wantExpiresIn == 0 {
				return
			}
			// Expired: the plugin runs again.
			f.clock.Advance(tc.wantExpiresIn)
			if third := f.get(t, "registry.example.com/app"); third.FromCache {
				t.Errorf("Get after expiry came from the cache")
			}
			if got := f.execs(t); got != 2 {
				t.Errorf("%d execs after expiry, want 2", got)
			}
		})
	}
}

func TestGetCachesPerCacheKeyType(t *testing.T) {
	type step struct {
		image    string
		wantExec bool
	}
	tests := map[string][]step{
		"Image": {
			{"a.example.com/team/app:v1", true},
			{"a.example.com/team/app:v2", false}, // the same image, another tag
			{"a.example.com/team/other", true},
			{"b.example.com/team/app", true},
		},
		"Registry": {
			{"a.example.com/team/app", true},
			{"a.example.com/team/other", false},
			{"a.example.com/elsewhere/x", false},
			{"b.example.com/team/app", true},
			{"b.example.com/x", false},
		},
		"Global": {
			{"a.example.com/team/app", true},
			{"b.example.com/other", false},
			{"c.example.com/x/y/z", false},
		},
	}
	for cacheKeyType, steps := range tests {
		t.Run(cacheKeyType, func(t *testing.T) {
			f := newFixture(t, []string{
				fakeprovider.EnvCacheKeyType + "=" + cacheKeyType,
				fakeprovider.EnvAuthKey + "=*.example.com",
			}, nil)
			execs := 0
			for _, s := range steps {
				c := f.get(t, s.image)
				checkMinted(t, c)
				if c.CacheKeyType != cacheKeyType || c.Key != "*.example.com" {
					t.Errorf("Get(%s) = type %q key %q, want %q *.example.com", s.image, c.CacheKeyType, c.Key, cacheKeyType)
				}
				if s.wantExec {
					execs++
				}
				if got := f.execs(t); got != execs || c.FromCache == s.wantExec {
					t.Errorf("after Get(%s): %d execs (FromCache %v), want %d", s.image, got, c.FromCache, execs)
				}
			}
		})
	}
}

func TestGetPicksTheMostSpecificAuthKey(t *testing.T) {
	f := newFixture(t, []string{
		fakeprovider.EnvCacheKeyType + "=Global",
		fakeprovider.EnvAuthKey + "=*.example.com,a.example.com/team,quay.io",
	}, nil)
	tests := map[string]string{
		"a.example.com/team/app": "a.example.com/team",
		"a.example.com/other":    "*.example.com",
		"b.example.com/team/app": "*.example.com",
	}
	for image, wantKey := range tests {
		if c := f.get(t, image); c.Key != wantKey {
			t.Errorf("Get(%s) key = %q, want %q", image, c.Key, wantKey)
		}
	}

	// A cached response without a key for the image gives no credential; the kubelet does not
	// run the plugin again either.
	f = newFixture(t, []string{fakeprovider.EnvCacheKeyType + "=Global"}, nil)
	f.get(t, "a.example.com/app")
	_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "b.example.com/app"})
	if !errors.Is(err, ErrNoCredential) || !errors.Is(err, credentials.ErrNoCredentialForPath) {
		t.Errorf("Get of another registry = %v, want ErrNoCredential", err)
	}
}

func TestGetRunsAgainForMinValidity(t *testing.T) {
	f := newFixture(t, []string{fakeprovider.EnvTTL + "=1h"}, nil)
	f.get(t, "registry.example.com/app")
	f.clock.Advance(50 * time.Minute)
	get := func(minValidity time.Duration) Credential {
		c, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app", MinValidity: minValidity})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := get(10 * time.Minute); !c.FromCache {
		t.Errorf("a response valid 10m more is not reused for MinValidity 10m")
	}
	if c := get(11 * time.Minute); c.FromCache || !c.ExpiresAt.Equal(f.clock.Now().Add(time.Hour)) {
		t.Errorf("a response valid 10m more is reused for MinValidity 11m (FromCache %v, ExpiresAt %v)", c.FromCache, c.ExpiresAt)
	}
	if got := f.execs(t); got != 2 {
		t.Errorf("%d execs, want 2", got)
	}
	// The new response replaced the old one.
	if c := get(59 * time.Minute); !c.FromCache {
		t.Errorf("the fresh response is not reused")
	}
}

func TestGetNeverRunsAProviderThatDoesNotMatch(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, image := range []string{"quay.io/acme/app", "example.com/app", "a.b.example.com/app", "nginx"} {
		if _, err := f.plugins.Get(t.Context(), "fake", Request{Image: image}); !errors.Is(err, ErrNotMatched) {
			t.Errorf("Get(%s) = %v, want ErrNotMatched", image, err)
		}
	}
	if _, err := f.plugins.Get(t.Context(), "missing", Request{Image: "a.example.com/x"}); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("Get of an unknown provider = %v, want ErrUnknownProvider", err)
	}
	if _, err := f.plugins.Get(t.Context(), "fake", Request{Image: "Not/A/Reference"}); err == nil {
		t.Errorf("Get of an invalid image succeeded")
	}
	if got := f.execs(t); got != 0 {
		t.Errorf("%d execs, want none", got)
	}
	if got := f.observations(); len(got) != 0 {
		t.Errorf("observed %v, want nothing", got)
	}
	// The other provider, matching other.io, runs for its images only.
	if _, err := f.plugins.Get(t.Context(), "other", Request{Image: "other.io/x"}); err != nil {
		t.Errorf("Get(other, other.io/x): %v", err)
	}
	if got := f.execs(t); got != 1 {
		t.Errorf("%d execs, want 1", got)
	}
}

// waiters returns how many callers wait for the flight of an image without a token.
func (f *fixture) waiters(image string) int {
	f.plugins.mu.Lock()
	defer f.plugins.mu.Unlock()
	if fl, ok := f.plugins.flights[flightKey{provider: "fake", image: image}]; ok {
		return fl.waiters
	}
	return 0
}

func TestGetCollapsesIdenticalConcurrentRequestsIntoOneExec(t *testing.T) {
	// Not cached (cacheDuration 0): only the collapsing keeps the count at one.
	f := newFixture(t, []string{fakeprovider.EnvTTL + "=0s"}, nil)
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeBlock)
	const n = 20
	creds := make([]Credential, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			creds[i], errs[i] = f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app:v1"})
		})
	}
	testutil.Eventually(t, 20*time.Second, "every Get waits for the exec", func(context.Context) error {
		if w := f.waiters("registry.example.com/app"); w != n {
			return errors.New(strconv.Itoa(w) + " waiting")
		}
		return nil
	})
	fakeprovider.Release(t, f.stateDir)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Get %d: %v", i, errs[i])
		}
		if creds[i] != creds[0] {
			t.Errorf("Get %d = %+v, want the same credential as Get 0 %+v", i, creds[i], creds[0])
		}
	}
	if got := f.execs(t); got != 1 {
		t.Errorf("%d execs for %d identical concurrent Gets, want 1", got, n)
	}
	if diff := cmp.Diff([]observation{{"fake", ResultSuccess}}, f.observations()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestGetStopsTheExecOnlyWhenEveryCallerGaveUp(t *testing.T) {
	f := newFixture(t, nil, nil)
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeBlock)
	const image = "registry.example.com/app"
	leaving, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := f.plugins.Get(leaving, "fake", Request{Image: image})
		left <- err
	}()
	stayed := make(chan error, 1)
	go func() {
		_, err := f.plugins.Get(t.Context(), "fake", Request{Image: image})
		stayed <- err
	}()
	testutil.Eventually(t, 20*time.Second, "both Gets wait", func(context.Context) error {
		if f.waiters(image) != 2 {
			return errors.New("not yet")
		}
		return nil
	})
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("the canceled Get = %v, want context.Canceled", err)
	}
	fakeprovider.Release(t, f.stateDir)
	if err := <-stayed; err != nil {
		t.Errorf("the Get that stayed = %v, want the credential", err)
	}

	// A lone caller that gives up stops the exec.
	f = newFixture(t, nil, nil)
	fakeprovider.SetMode(t, f.stateDir, fakeprovider.ModeBlock)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.plugins.Get(ctx, "fake", Request{Image: image})
		done <- err
	}()
	testutil.Eventually(t, 20*time.Second, "the Get waits", func(context.Context) error {
		if f.execs(t) != 1 {
			return errors.New("the plugin did not start")
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Get = %v, want context.Canceled", err)
	}
	testutil.Eventually(t, 20*time.Second, "the exec is stopped", func(context.Context) error {
		if diff := cmp.Diff([]observation{{"fake", ResultError}}, f.observations()); diff != "" {
			return errors.New(diff)
		}
		return nil
	})
}

// jwt is an unsigned JWT whose payload has the audience.
func jwt(audience, subject string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(`{"aud":["`+audience+`"],"sub":"`+subject+`"}`)) + ".sig"
}

func tokenProvider(cacheType string, require bool) func(*Provider) {
	return func(p *Provider) {
		p.TokenAttributes = &TokenAttributes{
			Audience:               "kuik-test-audience",
			CacheType:              cacheType,
			RequireServiceAccount:  require,
			RequiredAnnotationKeys: []string{"example.com/role"},
			OptionalAnnotationKeys: []string{"example.com/region", "example.com/absent"},
		}
		if !require {
			p.TokenAttributes.RequiredAnnotationKeys = nil
		}
	}
}

func TestGetPassesTheTokenAndTheProvidersAnnotations(t *testing.T) {
	f := newFixture(t, nil, tokenProvider(CacheTypeServiceAccount, true))
	token := jwt("kuik-test-audience", "system:serviceaccount:team:puller")
	c, err := f.plugins.Get(t.Context(), "fake", Request{
		Image:               "registry.example.com/app",
		ServiceAccount:      "team/puller/uid-1",
		ServiceAccountToken: token,
		ServiceAccountAnnotations: map[string]string{
			"example.com/role":   "reader",
			"example.com/region": "eu",
			"example.com/other":  "not passed",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkMinted(t, c)
	reqs := fakeprovider.MustRequests(t, f.stateDir)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	want := fakeprovider.RecordedRequest{
		APIVersion:  apiV1,
		Image:       "registry.example.com/app",
		Token:       token,
		Annotations: map[string]string{"example.com/role": "reader", "example.com/region": "eu"},
		Audiences:   []string{"kuik-test-audience"},
	}
	got := reqs[0]
	got.Time = time.Time{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestGetWithTokenAttributesRefusesWithoutRunning(t *testing.T) {
	f := newFixture(t, nil, tokenProvider(CacheTypeServiceAccount, true))
	_, err := f.plugins.Get(t.Context(), "fake", Request{Image: "registry.example.com/app"})
	if !errors.Is(err, ErrServiceAccountRequired) {
		t.Errorf("Get without a token = %v, want ErrServiceAccountRequired", err)
	}
	_, err = f.plugins.Get(t.Context(), "fake", Request{
		Image: "registry.example.com/app", ServiceAccount: "team/puller/uid-1", ServiceAccountToken: jwt("a", "b"),
		ServiceAccountAnnotations: map[string]string{"example.com/region": "eu"},
	})
	if !errors.Is(err, ErrRequiredAnnotationMissing) || !strings.Contains(err.Error(), "example.com/role") {
		t.Errorf("Get without the required annotation = %v, want ErrRequiredAnnotationMissing naming example.com/role", err)
	}
	if got := f.execs(t); got != 0 {
		t.Errorf("%d execs, want none", got)
	}

	// Without requireServiceAccount the plugin runs without a token.
	f = newFixture(t, nil, tokenProvider(CacheTypeToken, false))
	f.get(t, "registry.example.com/app")
	if reqs := fakeprovider.MustRequests(t, f.stateDir); len(reqs) != 1 || reqs[0].Token != "" {
		t.Errorf("requests = %+v, want one without token", reqs)
	}
}

func TestGetCachesPerServiceAccountOrToken(t *testing.T) {
	request := func(sa, token string) Request {
		return Request{
			Image: "registry.example.com/app", ServiceAccount: sa, ServiceAccountToken: token,
			ServiceAccountAnnotations: map[string]string{"example.com/role": "reader"},
		}
	}
	tests := map[string]struct {
		cacheType string
		steps     []struct {
			req      Request
			wantExec bool
		}
	}{
		"ServiceAccount: a new token of the same account reuses, another account runs": {
			cacheType: CacheTypeServiceAccount,
			steps: []struct {
				req      Request
				wantExec bool
			}{
				{request("team/a/uid-a", "token-1"), true},
				{request("team/a/uid-a", "token-2"), false},
				{request("team/b/uid-b", "token-3"), true},
				{Request{Image: "registry.example.com/app", ServiceAccount: "team/a/uid-a", ServiceAccountToken: "token-4",
					ServiceAccountAnnotations: map[string]string{"example.com/role": "writer"}}, true},
			},
		},
		"Token: each token runs": {
			cacheType: CacheTypeToken,
			steps: []struct {
				req      Request
				wantExec bool
			}{
				{request("team/a/uid-a", "token-1"), true},
				{request("team/a/uid-a", "token-1"), false},
				{request("team/a/uid-a", "token-2"), true},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil, tokenProvider(tc.cacheType, true))
			execs := 0
			for i, s := range tc.steps {
				c, err := f.plugins.Get(t.Context(), "fake", s.req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if s.wantExec {
					execs++
				}
				if got := f.execs(t); got != execs || c.FromCache == s.wantExec {
					t.Errorf("step %d: %d execs (FromCache %v), want %d", i, got, c.FromCache, execs)
				}
			}
		})
	}
}

func TestGetRefusesTheTokenEchoedAsPasswordUnlessCachedPerToken(t *testing.T) {
	req := Request{
		Image: "registry.example.com/app", ServiceAccount: "team/a/uid-a", ServiceAccountToken: "the-token",
		ServiceAccountAnnotations: map[string]string{"example.com/role": "reader"},
	}
	f := newFixture(t, []string{fakeprovider.EnvEchoToken + "=1"}, tokenProvider(CacheTypeServiceAccount, true))
	_, err := f.plugins.Get(t.Context(), "fake", req)
	if !errors.Is(err, ErrInvalidResponse) || strings.Contains(err.Error(), "the-token") {
		t.Errorf("Get = %v, want ErrInvalidResponse without the token", err)
	}
	f = newFixture(t, []string{fakeprovider.EnvEchoToken + "=1"}, tokenProvider(CacheTypeToken, true))
	c, err := f.plugins.Get(t.Context(), "fake", req)
	if err != nil || c.Auth.Password != "the-token" {
		t.Errorf("Get with cacheType Token = %v, %v; want the echoed token", c.Auth.Username, err)
	}
}

func TestAPluginCredentialPullsFromARegistryThatAcceptsOnlyUnexpiredOnes(t *testing.T) {
	reg := testutil.NewRegistryFunc(t, "127.0.0.1:0", fakeprovider.Check(testKey, nil))
	reg.Username, reg.Password = fakeprovider.Username, fakeprovider.Mint(testKey, time.Now().Add(time.Hour))
	image := reg.Push(t, "team/app:v1")

	f := newFixture(t, nil, func(p *Provider) { p.MatchImages = []string{reg.Host} })
	c := f.get(t, image)
	if c.Key != reg.Host {
		t.Errorf("credential key %q, want %q", c.Key, reg.Host)
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	pull := func(a credentials.AuthEntry) error {
		_, err := remote.Head(ref, remote.WithContext(t.Context()),
			remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password})))
		return err
	}
	if err := pull(c.Auth); err != nil {
		t.Errorf("pulling with the plugin's credential: %v", err)
	}
	refused := reg.Unauthorized()
	expired := credentials.AuthEntry{Username: fakeprovider.Username, Password: fakeprovider.Mint(testKey, time.Now().Add(-time.Second))}
	if err := pull(expired); err == nil {
		t.Errorf("pulling with an expired credential succeeded")
	}
	forged := credentials.AuthEntry{Username: fakeprovider.Username, Password: fakeprovider.Mint([]byte("other key"), time.Now().Add(time.Hour))}
	if err := pull(forged); err == nil {
		t.Errorf("pulling with a credential of another key succeeded")
	}
	if reg.Unauthorized() == refused {
		t.Errorf("the registry refused nothing")
	}
}
