package keeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// memStore is an in-memory Store (our own interface; the ConfigMap store is tested on a real
// API server). saved records every inventory saved, in order.
type memStore struct {
	mu    sync.Mutex
	inv   keep.Inventory
	saved []keep.Inventory
	fail  atomic.Bool
}

func (s *memStore) Load(context.Context) (keep.Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv, nil
}

func (s *memStore) Save(_ context.Context, inv keep.Inventory) error {
	if s.fail.Load() {
		return errors.New("store refuses")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inv = inv
	s.saved = append(s.saved, inv)
	return nil
}

func (s *memStore) current() keep.Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv
}

// has reports whether the stored inventory holds repository:tag.
func (s *memStore) has(repository, tag string) (keep.Tag, bool) {
	for _, t := range s.current().Tags {
		if t.Repository == repository && t.Tag == tag {
			return t, true
		}
	}
	return keep.Tag{}, false
}

// creds gives the destination's credential for pushes and anonymous for public sources.
type creds struct{ push authn.Authenticator }

func (c creds) Push(context.Context, *v1alpha1.ImageMirror) (authn.Authenticator, error) {
	return c.push, nil
}

func (c creds) Source(_ context.Context, auth *v1alpha1.Auth, _ string) (authn.Authenticator, error) {
	if auth != nil {
		return nil, errors.New("no source credential in these tests")
	}
	return authn.Anonymous, nil
}

// recordingReporter records outcomes and statuses.
type recordingReporter struct {
	mu       sync.Mutex
	outcomes []Outcome
	status   map[string]v1alpha1.KeepStatus
	cond     map[string]metav1.Condition
	// holdBack, when set, answers errHeldBack (as the real reporter within its interval) once
	// for the first status it accepts.
	holdBack func(v1alpha1.KeepStatus) bool
	held     bool
}

func (r *recordingReporter) Outcome(_ context.Context, _ *v1alpha1.ImageMirror, o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, o)
}

func (r *recordingReporter) Status(_ context.Context, m *v1alpha1.ImageMirror, st v1alpha1.KeepStatus, c metav1.Condition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holdBack != nil && !r.held && r.holdBack(st) {
		r.held = true
		return errHeldBack
	}
	r.status[m.Name], r.cond[m.Name] = st, c
	return nil
}

func (r *recordingReporter) last(mirror string) (v1alpha1.KeepStatus, metav1.Condition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status[mirror], r.cond[mirror]
}

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

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is a keeper between real registries: sources on fake host names (the mirror cannot
// name a host with a port) dialled to local fronts, and a destination behind a front.
type fixture struct {
	t        *testing.T
	src      *testutil.Registry
	srcFront *testutil.Front
	dst      *testutil.Registry
	dstFront *testutil.Front
	// fronts maps a fake source host to its front.
	fronts    map[string]*testutil.Front
	store     *memStore
	report    *recordingReporter
	transport *http.Transport
	k         *Keeper

	mu        sync.Mutex
	pods      []keep.Pod
	alts      []v1alpha1.ImageAlternative
	mirror    v1alpha1.ImageMirror
	retention time.Duration
	// allowPrivate is the mirror's privateSources Allow.
	allowPrivate bool
	gathers      int
}

// dest is the mirror's destination path.
func (f *fixture) dest() string { return f.dstFront.Host + "/kuik/" }

func newFixture(t *testing.T, opts Options, clk *clock) *fixture {
	t.Helper()
	f := &fixture{t: t, store: &memStore{}, report: &recordingReporter{status: map[string]v1alpha1.KeepStatus{}, cond: map[string]metav1.Condition{}}, retention: time.Hour}
	f.src = testutil.NewRegistry(t, "", "")
	f.srcFront = testutil.NewFront(t, f.src)
	f.dst = testutil.NewRegistry(t, "pusher", "secret")
	f.dstFront = testutil.NewFront(t, f.dst)
	f.fronts = map[string]*testutil.Front{"src.test": f.srcFront}
	f.mirror = testutil.NewImageMirror("keep", f.dest()).Policy(v1alpha1.RewritePolicyAlways).Build()
	f.mirror.Spec.Keep = &v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: "push"}}}}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	f.transport = &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		front, fake := f.fronts[host]
		f.mu.Unlock()
		if fake {
			if port != "80" {
				return nil, fmt.Errorf("%s: only plain HTTP in tests", addr)
			}
			addr = front.Host
		}
		return dialer.DialContext(ctx, network, addr)
	}}
	t.Cleanup(f.transport.CloseIdleConnections)

	if opts.PlanInterval == 0 {
		opts.PlanInterval = time.Hour
	}
	for _, d := range []*time.Duration{&opts.SelfHealInterval, &opts.SweepInterval} {
		if *d == 0 {
			*d = time.Hour
		}
	}
	opts.StatusInterval = 20 * time.Millisecond
	opts.StallTimeout = 10 * time.Second
	if opts.Workers == 0 {
		opts.Workers = 2
	}
	opts.Namespace = "kuik-system"
	deps := Deps{
		Gather: f.gather,
		Store:  f.store,
		Creds:  creds{push: authn.FromConfig(authn.AuthConfig{Username: "pusher", Password: "secret"})},
		Report: f.report,
		DeleteTag: func(ctx context.Context, tag name.Tag, o transfer.Options) error {
			return remote.Delete(tag, remote.WithContext(ctx), remote.WithAuth(o.DestAuth), remote.WithTransport(o.Transport))
		},
	}
	if clk != nil {
		deps.Now = clk.Now
	}
	f.k = NewKeeper(opts, deps)
	f.k.transport = f.transport
	f.k.retryBase, f.k.retryMax, f.k.minGap = 50*time.Millisecond, 200*time.Millisecond, 10*time.Millisecond
	if clk != nil {
		f.k.mono = clk.Now
	}
	return f
}

// start runs the keeper until the test ends.
func (f *fixture) start() {
	ctx, cancel := context.WithCancel(f.t.Context())
	done := make(chan error, 1)
	go func() { done <- f.k.Start(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Start: %v", err)
		}
	})
}

func (f *fixture) gather(context.Context) (Inputs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gathers++
	ix, errs := routing.NewIndex(f.alts, []v1alpha1.ImageMirror{f.mirror})
	if len(errs) > 0 {
		return Inputs{}, errors.Join(errs...)
	}
	return Inputs{
		Index:   ix,
		Mirrors: []keep.Mirror{{Name: f.mirror.Name, Destination: f.mirror.Spec.Destination.Path, Retention: f.retention, CountTemplates: true, AllowPrivateSources: f.allowPrivate}},
		Specs:   map[string]*v1alpha1.ImageMirror{f.mirror.Name: &f.mirror},
		Snapshot: keep.Snapshot{
			Pods:       slices.Clone(f.pods),
			Namespaces: map[string]labels.Set{"default": {"kubernetes.io/metadata.name": "default"}},
		},
		Safety:        keep.Safety{Synced: true},
		DeclaredHosts: map[string]struct{}{"src.test": {}},
		InsecureHosts: map[string]struct{}{"src.test": {}, "slow.test": {}},
	}, nil
}

// setPods replaces the live pods.
func (f *fixture) setPods(pods ...keep.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// pass triggers a plan pass and waits until one that gathered after the call has ended.
func (f *fixture) pass() {
	f.t.Helper()
	f.mu.Lock()
	g := f.gathers
	f.mu.Unlock()
	f.k.Trigger()
	testutil.Eventually(f.t, 10*time.Second, "a plan pass", func(context.Context) error {
		if n := f.k.passes.Load(); n < int64(g+1) {
			return fmt.Errorf("%d passes, want %d", n, g+1)
		}
		return nil
	})
}

// destHead HEADs ref at the destination registry itself (not through its front).
func (f *fixture) destHead(ctx context.Context, repoAndTag string) (string, error) {
	ref, err := name.ParseReference(f.dst.Host + "/kuik/" + repoAndTag)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(ref, remote.WithContext(ctx), remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: "pusher", Password: "secret"})))
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// waitKept waits until the destination holds repoAndTag with digest.
func (f *fixture) waitKept(repoAndTag, digest string) {
	f.t.Helper()
	testutil.Eventually(f.t, 20*time.Second, "the kept "+repoAndTag, func(ctx context.Context) error {
		got, err := f.destHead(ctx, repoAndTag)
		if err != nil {
			return err
		}
		if got != digest {
			return fmt.Errorf("destination digest %s, source %s", got, digest)
		}
		// The copy has ended (its referrers included).
		f.k.mu.Lock()
		defer f.k.mu.Unlock()
		if it := f.k.items[wantKey{"keep", f.dest() + repoAndTag}]; it == nil || !it.present || it.running {
			return fmt.Errorf("the keeper does not know %s present yet", repoAndTag)
		}
		return nil
	})
}

// srcDigest is the digest of repoAndTag at the source registry.
func srcDigest(t *testing.T, r *testutil.Registry, repoAndTag string) string {
	t.Helper()
	ref, err := name.ParseReference(r.Host + "/" + repoAndTag)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil {
		t.Fatal(err)
	}
	return desc.Digest.String()
}

// livePod is a pod in default running images in containers c0, c1, ….
func livePod(name string, images ...string) keep.Pod {
	p := keep.Pod{Namespace: "default", Name: name, Labels: labels.Set{"app": name}}
	for i, image := range images {
		p.Containers = append(p.Containers, keep.Container{Name: fmt.Sprintf("c%d", i), Image: image})
	}
	return p
}

// writes counts the requests that write (POST, PUT, PATCH, DELETE) among reqs.
func writes(reqs []testutil.Request) int {
	n := 0
	for _, r := range reqs {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			n++
		}
	}
	return n
}

func TestLivePodImageIsKeptVerbatimInventoryFirstThenNothingOnAnUnchangedPass(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.src.Push(t, "app:1")
	want := srcDigest(t, f.src, "app:1")
	repo := f.dstFront.Host + "/kuik/src.test/app"
	// Every write to the destination must find its tag already in the saved inventory.
	var early, seen atomic.Int64
	f.dstFront.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			seen.Add(1)
			if _, ok := f.store.has(repo, "1"); !ok {
				early.Add(1)
			}
		}
		return false
	})
	copied := promtest.ToFloat64(metrics.KeeperCopies.WithLabelValues("src.test", "Copied"))
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()

	f.waitKept("src.test/app:1", want)
	if got := promtest.ToFloat64(metrics.KeeperCopies.WithLabelValues("src.test", "Copied")) - copied; got != 1 {
		t.Errorf("kuik_keeper_copies_total{registry=src.test,result=Copied} grew by %g, want 1", got)
	}
	if seen.Load() == 0 || early.Load() != 0 {
		t.Fatalf("destination writes: %d, of which %d before the inventory was saved", seen.Load(), early.Load())
	}
	tag, ok := f.store.has(repo, "1")
	if !ok || tag.Mirror != "keep" || tag.Origin != "src.test/app:1" {
		t.Fatalf("inventory tag %+v (found %v)", tag, ok)
	}
	testutil.Eventually(t, 10*time.Second, "the inventory's digest", func(context.Context) error {
		if tag, _ := f.store.has(repo, "1"); tag.Digest != want {
			return fmt.Errorf("inventory digest %q, want %s", tag.Digest, want)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "status.keep", func(context.Context) error {
		st, cond := f.report.last("keep")
		if st.Desired != 1 || st.Present != 1 || st.Failed != 0 || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonKeeping {
			return fmt.Errorf("status %+v, condition %s/%s", st, cond.Status, cond.Reason)
		}
		return nil
	})

	f.srcFront.Reset()
	f.dstFront.Reset()
	f.pass()
	f.pass()
	if src, dst := f.srcFront.Requests(), f.dstFront.Requests(); len(src)+len(dst) != 0 {
		t.Fatalf("an unchanged pass sent %d source and %d destination requests: %+v %+v", len(src), len(dst), src, dst)
	}
}

func TestPrivateSourceUnderDenyIsNeverPushed(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.src.Push(t, "private:1")
	f.alts = []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("alt").Repository("src.test/private").SecretRef("private-pull").Repository("src.test/public").Build(),
	}
	f.setPods(livePod("web", "src.test/private:1"))
	f.start()
	f.pass()

	f.waitDenied(t, "a private source")
}

// waitDenied waits for the one AuthRequired failure in status, and checks that what (a private
// source under Deny) was neither asked anything nor pushed.
func (f *fixture) waitDenied(t *testing.T, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "an AuthRequired failure in status", func(context.Context) error {
		st, _ := f.report.last("keep")
		if len(st.Failures) != 1 || st.Failures[0].Reason != v1alpha1.KeepAuthRequired {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if n := writes(f.dstFront.Requests()); n != 0 {
		t.Fatalf("%d writes to the destination for %s under Deny", n, what)
	}
	if n := len(f.srcFront.Requests()); n != 0 {
		t.Fatalf("%d requests to %s under Deny", n, what)
	}
}

// withProviderSource makes src.test/private a provider entry (provider ecr) whose registry
// requires the credential the secret-syncer obtained, kept in the kuik-provider-* Secret of a
// real API server's release namespace; the keeper resolves both credentials from that
// namespace's Secrets. It returns the digest of src.test/private:1.
func (f *fixture) withProviderSource(t *testing.T) string {
	t.Helper()
	obtained := credentials.AuthEntry{Username: "AWS", Password: "token-1"}
	f.src = testutil.NewRegistry(t, obtained.Username, obtained.Password)
	f.srcFront = testutil.NewFront(t, f.src)
	f.mu.Lock()
	f.fronts["src.test"] = f.srcFront
	f.mu.Unlock()
	f.src.Push(t, "private:1")
	ref, err := name.ParseReference(f.src.Host + "/private:1")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: obtained.Username, Password: obtained.Password})))
	if err != nil {
		t.Fatal(err)
	}
	f.alts = []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("alt").Repository("src.test/private").Provider("ecr").Repository("src.test/public").Build(),
	}

	k := newKube(t)
	release := k.namespace(t, nil)
	c, _ := k.startCache(t, release)
	now := time.Now()
	secrets := []*corev1.Secret{
		dockerConfigSecret(t, release, "push", map[string]credentials.AuthEntry{f.dest(): {Username: "pusher", Password: "secret"}}),
		providerSecret(t, release, "ecr", nil, map[string]*credentialprovider.Obtained{
			"src.test": {Auth: obtained, Provider: "ecr", Image: "src.test/private", CacheKeyType: "Registry", Scope: "src.test", ObtainedAt: now, RenewAt: now.Add(40 * time.Minute), ExpiresAt: now.Add(time.Hour)},
		}),
	}
	for _, s := range secrets {
		if err := k.cl.Create(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	eventuallyOK(t, func() error {
		return c.Get(t.Context(), client.ObjectKeyFromObject(secrets[1]), &corev1.Secret{})
	})
	f.k.deps.Creds = &secretCredentials{reader: c, namespace: release, now: time.Now}
	return desc.Digest.String()
}

// A provider entry's source is private exactly as a secretRef's: under Deny, nothing is asked
// of it nor pushed, though the syncer's credential for it is there.
func TestPrivateProviderSourceUnderDenyIsNeverPushed(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.withProviderSource(t)
	f.setPods(livePod("web", "src.test/private:1"))
	f.start()
	f.pass()

	f.waitDenied(t, "a private provider source")
}

// Under Allow, a provider entry's source is kept verbatim with the credential the syncer
// obtained (the source registry refuses any other).
func TestPrivateProviderSourceUnderAllowIsKeptWithTheSyncersCredential(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	want := f.withProviderSource(t)
	f.allowPrivate = true
	f.setPods(livePod("web", "src.test/private:1"))
	f.start()

	f.waitKept("src.test/private:1", want)
	ok := 0
	for _, r := range f.srcFront.Requests() {
		if r.Kind == testutil.KindManifest && r.Status == http.StatusOK {
			ok++
		}
	}
	if ok == 0 {
		t.Fatalf("no manifest request to the source was authorized: %+v", f.srcFront.Requests())
	}
}

func TestForgedOriginalImagesRecordCopiesNothing(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.src.Push(t, "secret:1")
	f.src.Push(t, "app:1")
	// The pod runs the mirror's copy of app:1 but claims it was routed from secret:1.
	p := livePod("web", f.dest()+"src.test/app:1")
	p.Annotations = map[string]string{
		v1alpha1.AnnotationOriginalImages: `{"c0":"src.test/secret:1"}`,
		v1alpha1.AnnotationRewrittenBy:    `{"c0":"ImageMirror/keep"}`,
	}
	f.setPods(p)
	f.start()
	f.pass()
	f.pass()
	if n := len(f.srcFront.Requests()); n != 0 {
		t.Fatalf("a forged record made %d source requests", n)
	}
	if n := writes(f.dstFront.Requests()); n != 0 {
		t.Fatalf("a forged record made %d destination writes", n)
	}
	if inv := f.store.current(); len(inv.Tags) != 0 {
		t.Fatalf("a forged record was inventoried: %+v", inv.Tags)
	}
}

func TestSelfHealRestoresADeletedTagWithoutTheSource(t *testing.T) {
	f := newFixture(t, Options{SelfHealInterval: 100 * time.Millisecond}, nil)
	f.src.Push(t, "app:1")
	want := srcDigest(t, f.src, "app:1")
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()
	f.waitKept("src.test/app:1", want)

	f.srcFront.Reset()
	f.dstFront.Reset()
	tag, err := name.ParseReference(f.dst.Host + "/kuik/src.test/app:1")
	if err != nil {
		t.Fatal(err)
	}
	// No check that the tag is gone: a 100 ms self-heal may restore it first. The manifest
	// PUT counted below is the restore.
	if err := remote.Delete(tag, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: "pusher", Password: "secret"}))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the tag put back", func(context.Context) error {
		if n := f.dstFront.Count(http.MethodPut, testutil.KindManifest); n == 0 {
			return errors.New("no manifest PUT yet")
		}
		return nil
	})
	f.waitKept("src.test/app:1", want)
	if reqs := f.srcFront.Requests(); len(reqs) != 0 {
		t.Fatalf("the self-heal sent %d requests to the source: %+v", len(reqs), reqs)
	}
	if n := f.dstFront.Count(http.MethodPut, testutil.KindManifest); n != 1 {
		t.Fatalf("the self-heal wrote %d manifests, want the tag only", n)
	}
}

func TestSelfHealSendsOnlyHeadsOnceEachRepositoryIsKnown(t *testing.T) {
	f := newFixture(t, Options{SelfHealInterval: 50 * time.Millisecond}, nil)
	f.src.Push(t, "app:1")
	f.src.Push(t, "web:2")
	f.setPods(livePod("a", "src.test/app:1"), livePod("b", "src.test/web:2"))
	f.start()
	f.waitKept("src.test/app:1", srcDigest(t, f.src, "app:1"))
	f.waitKept("src.test/web:2", srcDigest(t, f.src, "web:2"))
	// Let one self-heal pass over both tags make its puller, then count from a clean log.
	present := func() float64 {
		return promtest.ToFloat64(metrics.KeeperSelfHealChecks.WithLabelValues(string(headPresent)))
	}
	base := present()
	testutil.Eventually(t, 10*time.Second, "a first self-heal pass", func(context.Context) error {
		if n := present() - base; n < 2 {
			return fmt.Errorf("%g self-heal checks found their tag", n)
		}
		return nil
	})
	f.srcFront.Reset()
	f.dstFront.Reset()
	testutil.Eventually(t, 10*time.Second, "five more self-heal passes", func(context.Context) error {
		if n := f.dstFront.Count(http.MethodHead, testutil.KindManifest); n < 10 {
			return fmt.Errorf("%d HEADs", n)
		}
		return nil
	})
	for _, r := range f.dstFront.Requests() {
		if r.Method != http.MethodHead || r.Kind != testutil.KindManifest {
			t.Errorf("self-heal sent %s %s (%s), want HEADs of manifests only", r.Method, r.Path, r.Kind)
		}
	}
	if reqs := f.srcFront.Requests(); len(reqs) != 0 {
		t.Errorf("self-heal sent %d requests to the source", len(reqs))
	}
}

func TestSweepDeletesAnUnusedTagAfterRetentionAndNeverAnInUseOne(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newFixture(t, Options{SweepInterval: 30 * time.Millisecond, SelfHealInterval: 20 * time.Millisecond}, clk)
	f.src.Push(t, "app:1")
	f.src.Push(t, "app:2")
	d1, d2 := srcDigest(t, f.src, "app:1"), srcDigest(t, f.src, "app:2")
	f.setPods(livePod("a", "src.test/app:1"), livePod("b", "src.test/app:2"))
	f.start()
	f.waitKept("src.test/app:1", d1)
	f.waitKept("src.test/app:2", d2)
	repo := f.dstFront.Host + "/kuik/src.test/app"

	// b goes away: its tag is stamped unused, and kept while within retention.
	f.setPods(livePod("a", "src.test/app:1"))
	f.pass()
	testutil.Eventually(t, 10*time.Second, "the unused stamp", func(context.Context) error {
		if tag, _ := f.store.has(repo, "2"); tag.UnusedSince.IsZero() {
			return fmt.Errorf("app:2 not stamped: %+v", tag)
		}
		return nil
	})
	sweeps := f.k.sweeps.Load()
	testutil.Eventually(t, 10*time.Second, "more sweeps", func(context.Context) error {
		if f.k.sweeps.Load() < sweeps+3 {
			return errors.New("waiting")
		}
		return nil
	})
	if _, err := f.destHead(t.Context(), "src.test/app:2"); err != nil {
		t.Fatalf("app:2 deleted within retention: %v", err)
	}

	clk.Add(f.retention + time.Minute)
	testutil.Eventually(t, 10*time.Second, "app:2 deleted", func(ctx context.Context) error {
		if _, err := f.destHead(ctx, "src.test/app:2"); err == nil {
			return errors.New("app:2 still at the destination")
		}
		if _, ok := f.store.has(repo, "2"); ok {
			return errors.New("app:2 still in the inventory")
		}
		return nil
	})
	sweeps = f.k.sweeps.Load()
	clk.Add(10 * f.retention)
	testutil.Eventually(t, 10*time.Second, "more sweeps", func(context.Context) error {
		if f.k.sweeps.Load() < sweeps+3 {
			return errors.New("waiting")
		}
		return nil
	})
	if got, err := f.destHead(t.Context(), "src.test/app:1"); err != nil || got != d1 {
		t.Fatalf("the in-use app:1 is gone: %s %v", got, err)
	}
	if tag, ok := f.store.has(repo, "1"); !ok || !tag.UnusedSince.IsZero() {
		t.Fatalf("the in-use app:1 in the inventory: %+v (found %v)", tag, ok)
	}
	// The self-heal does not bring back what the sweep deleted.
	if _, err := f.destHead(t.Context(), "src.test/app:2"); err == nil {
		t.Fatal("the deleted app:2 is back at the destination")
	}
}

func TestARateLimitedHostIsFrozenWhileAnotherHostsCopyGoesThrough(t *testing.T) {
	f := newFixture(t, Options{Workers: 1}, nil)
	slow := testutil.NewRegistry(t, "", "")
	slowFront := testutil.NewFront(t, slow)
	f.mu.Lock()
	f.fronts["slow.test"] = slowFront
	f.mu.Unlock()
	slow.Push(t, "app:1")
	slow.SetBehavior(testutil.RateLimit)
	f.src.Push(t, "app:1")
	want := srcDigest(t, f.src, "app:1")
	quota := promtest.ToFloat64(metrics.KeeperCopies.WithLabelValues("other", "QuotaExceeded"))
	f.setPods(livePod("a", "slow.test/app:1"), livePod("b", "src.test/app:1"))
	f.start()

	f.waitKept("src.test/app:1", want)
	testutil.Eventually(t, 10*time.Second, "the rate-limited host parked", func(context.Context) error {
		f.k.mu.Lock()
		defer f.k.mu.Unlock()
		it := f.k.items[wantKey{"keep", f.dest() + "slow.test/app:1"}]
		if it == nil || it.fail == nil || it.fail.reason != v1alpha1.KeepQuotaExceeded {
			return fmt.Errorf("slow item %+v", it)
		}
		if hq := f.k.q.hosts["slow.test"]; hq == nil || !hq.parkedUntil.After(time.Now()) {
			return errors.New("slow.test not parked")
		}
		return nil
	})
	// slow.test is declared by no routing resource: its label is "other".
	if got := promtest.ToFloat64(metrics.KeeperCopies.WithLabelValues("other", "QuotaExceeded")) - quota; got < 1 {
		t.Errorf("kuik_keeper_copies_total{registry=other,result=QuotaExceeded} grew by %g", got)
	}
	before := len(slowFront.Requests())
	for range 3 {
		f.pass()
	}
	if after := len(slowFront.Requests()); after != before {
		t.Fatalf("the frozen host got %d more requests", after-before)
	}
}

func TestNoPushWhileTheInventoryCannotBeSaved(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.src.Push(t, "app:1")
	want := srcDigest(t, f.src, "app:1")
	f.store.fail.Store(true)
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()
	// Several refused saves, each after a backoff: nothing reaches either registry.
	testutil.Eventually(t, 10*time.Second, "retries of the save", func(context.Context) error {
		f.k.mu.Lock()
		defer f.k.mu.Unlock()
		if it := f.k.items[wantKey{"keep", f.dest() + "src.test/app:1"}]; it == nil || it.attempts < 3 {
			return errors.New("fewer than 3 attempts")
		}
		return nil
	})
	if src, dst := len(f.srcFront.Requests()), len(f.dstFront.Requests()); src+dst != 0 {
		t.Fatalf("%d source and %d destination requests without a saved inventory", src, dst)
	}
	f.store.fail.Store(false)
	f.waitKept("src.test/app:1", want)
}

func TestARefusedPushCredentialMakesKeepReadyFalse(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.k.deps.Creds = creds{push: authn.FromConfig(authn.AuthConfig{Username: "pusher", Password: "wrong"})}
	f.src.Push(t, "app:1")
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()
	testutil.Eventually(t, 10*time.Second, "KeepReady False/PushDenied", func(context.Context) error {
		st, cond := f.report.last("keep")
		if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonPushDenied {
			return fmt.Errorf("condition %s/%s", cond.Status, cond.Reason)
		}
		if st.Failed != 1 || len(st.Failures) != 1 || st.Failures[0].Reason != v1alpha1.KeepPushFailed {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if n := f.dst.Unauthorized(); n == 0 {
		t.Fatal("the destination refused nothing")
	}
	if n := len(f.srcFront.Requests()); n != 0 {
		t.Fatalf("%d source requests though the destination refused the credential first", n)
	}
}

// A status write the reporter holds back (errHeldBack) is written at a later status pass: the
// scheduler does not take it as reported.
func TestAStatusWriteHeldBackIsWrittenLater(t *testing.T) {
	f := newFixture(t, Options{StatusInterval: 50 * time.Millisecond}, nil)
	f.report.holdBack = func(st v1alpha1.KeepStatus) bool { return st.Present == 1 }
	f.src.Push(t, "app:1")
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()
	testutil.Eventually(t, 10*time.Second, "status.keep after a held-back write", func(context.Context) error {
		st, _ := f.report.last("keep")
		if st.Present != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	f.report.mu.Lock()
	held := f.report.held
	f.report.mu.Unlock()
	if !held {
		t.Fatal("no write was held back: the test tested nothing")
	}
}

func TestHealersMakeANewPullerWhenThePushCredentialChanges(t *testing.T) {
	var h healers
	pk := pullerKey{mirror: "m"}
	cred := func(pw string) authn.Authenticator {
		return authn.FromConfig(authn.AuthConfig{Username: "pusher", Password: pw})
	}
	a, err := h.puller(t.Context(), pk, cred("one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := h.puller(t.Context(), pk, cred("one"), nil); b != a {
		t.Error("the same credential made a new puller")
	}
	c, _ := h.puller(t.Context(), pk, cred("two"), nil)
	if c == a {
		t.Error("a rotated credential kept the old puller")
	}
	h.stale(pk)
	d, _ := h.puller(t.Context(), pk, cred("two"), nil)
	if d == c {
		t.Error("a puller whose HEAD failed served the next pass")
	}
	e := d
	for range healerPasses {
		e, _ = h.puller(t.Context(), pk, cred("two"), nil)
	}
	if e == d {
		t.Errorf("a puller served more than %d passes", healerPasses)
	}
	h.keep(map[pullerKey]*remote.Puller{})
	if len(h.m) != 0 {
		t.Errorf("a mirror with no kept tag keeps %d pullers", len(h.m))
	}
}
