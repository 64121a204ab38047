package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// gauge returns the value of a gauge vector's series for a secret, false when it has none.
func gauge(vec *prometheus.GaugeVec, secret string) (float64, bool) {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	v, found := 0.0, false
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "secret" && l.GetValue() == secret {
				v, found = d.GetGauge().GetValue(), true
			}
		}
	}
	return v, found
}

// providerSecret waits for the kuik-provider-* Secret of the provider (no ServiceAccount).
func providerSecret(t *testing.T, e env, provider string, check func(s *corev1.Secret) error) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	eventually(t, "the provider secret", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(crns).Get(ctx, credentialprovider.SecretName(provider, nil), metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = s
		return check(s)
	})
	return got
}

// Registry-scoped answers (as ECR, GCR and ACR give) are kept once in the provider Secret,
// however many entries of the registry use them, and every entry's path reads a credential
// the registry accepts from it with the keyring rules (what the webhook probes with); a
// restart reuses it for every entry without running the plugin again.
func TestRegistryScopedAnswerIsKeptOnceInTheProviderSecret(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-registry-once", "1h", "")
	const repos = 24
	b := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n})
	var images []string
	for i := range repos {
		repo := fmt.Sprintf("acme/r%02d", i)
		images = append(images, p.registry.Push(t, repo+":v1"))
		b = b.Repository(p.registry.Host + "/" + repo).Provider(p.name).Inject(i%2 == 0)
	}
	ia := b.Build()
	stop := startSyncer(t, providerOptions(t, p, 10*time.Second))
	createNamespace(t, e, map[string]string{"scope": n})
	create(t, e, &ia)

	eventually(t, "the resource is ready", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		if c := readyCondition(got.Status.Conditions); c == nil || c.Reason != v1alpha1.ReasonSynced {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	ps := providerSecret(t, e, p.name, func(s *corev1.Secret) error {
		if a := authsOf(t, s); len(a) != 1 || a[p.registry.Host] == "" {
			return fmt.Errorf("holds %d auths keys (%v), want the registry's answer once", len(a), sortedKeys(a))
		}
		return nil
	})
	for _, image := range images {
		if err := pulls(t, ps, image); err != nil {
			t.Errorf("%s through the provider secret: %v", image, err)
		}
	}
	runs := p.requests(t)
	stop()

	startSyncer(t, providerOptions(t, p, 10*time.Second))
	eventually(t, "the restarted syncer decides the resource", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		if c := readyCondition(got.Status.Conditions); c == nil || c.Reason != v1alpha1.ReasonSynced {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	secretHolds(t, e, crns, ps.Name, authsOf(t, ps))
	if got := p.requests(t); got != runs {
		t.Errorf("the plugin ran %d more times after the restart, want the registry's answer reused for every entry", got-runs)
	}
}

// A provider Secret is bounded under the API server's limit: credentials that would push it
// past the bound are left out, the Secret is still written with the others, and each entry
// left out says so (Ready stays True with ProviderSecretFull, a Warning event, the left-out
// gauge). The credentials here are large and Image-scoped (one copy per entry), so that six
// of them are well over the API server's 1 MiB.
func TestProviderSecretStaysWithinItsBound(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-full", "1h", `  - {name: FAKE_PROVIDER_CACHE_KEY_TYPE, value: Image}
  - {name: FAKE_PROVIDER_PAD, value: "100000"}
`)
	startSyncer(t, providerOptions(t, p, 10*time.Second))
	const resources = 6
	for i := range resources {
		ia := testutil.NewImageAlternative(fmt.Sprintf("%s-%d", n, i)).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
			Repository(fmt.Sprintf("%s/acme/%s-%d", p.registry.Host, n, i)).Provider(p.name).Inject(true).Build()
		create(t, e, &ia)
	}
	var full []v1alpha1.ImageAlternative
	var ps *corev1.Secret
	eventually(t, "every resource is decided with its credential, some of them left out of the provider secret", func(ctx context.Context) error {
		full = nil
		for i := range resources {
			var got v1alpha1.ImageAlternative
			if err := e.cl.Get(ctx, clientKey(fmt.Sprintf("%s-%d", n, i)), &got); err != nil {
				return err
			}
			c := readyCondition(got.Status.Conditions)
			switch {
			case c == nil || c.Status != metav1.ConditionTrue:
				return fmt.Errorf("%s: condition %+v", got.Name, c)
			case c.Reason == v1alpha1.ReasonProviderSecretFull:
				full = append(full, got)
			case c.Reason != v1alpha1.ReasonSynced:
				return fmt.Errorf("%s: condition %+v", got.Name, c)
			}
		}
		if len(full) == 0 {
			return fmt.Errorf("no resource says %s", v1alpha1.ReasonProviderSecretFull)
		}
		s, err := e.cs.CoreV1().Secrets(crns).Get(ctx, credentialprovider.SecretName(p.name, nil), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); len(a)+len(full) != resources {
			return fmt.Errorf("the provider secret holds %d credentials, %d resources say theirs is left out, want %d in all", len(a), len(full), resources)
		}
		ps = s
		return nil
	})
	size := 0
	for _, v := range ps.Data {
		size += len(v)
	}
	if size > syncer.MaxProviderSecretBytes {
		t.Errorf("the provider secret holds %d bytes, over its bound of %d", size, syncer.MaxProviderSecretBytes)
	}
	if v, ok := gauge(metrics.ProviderSecretLeftOut, ps.Name); !ok || int(v) != len(full) {
		t.Errorf("left-out gauge %v (%v), want %d", v, ok, len(full))
	}
	eventually(t, "a Warning event says the credential was left out", func(ctx context.Context) error {
		if evs := injectionEvents(ctx, t, e.cs, full[0].UID); !hasEvent(evs, v1alpha1.ReasonProviderSecretFull) {
			return fmt.Errorf("no %s event among %d", v1alpha1.ReasonProviderSecretFull, len(evs))
		}
		return nil
	})
	t.Logf("%d of %d credentials of %d bytes fit in %d bytes", resources-len(full), resources, size/(resources-len(full)), syncer.MaxProviderSecretBytes)
}

// A provider keeper that stops (its leader lost the lease, or it shut down) exports no expiry
// gauge any more: KuikProviderCredentialExpiring would otherwise fire for ever on a standby for a
// credential no one renews there. Nor does it for a provider Secret no resource uses any more.
func TestStoppedKeeperExportsNoProviderGauges(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-gauges", "1h", "")
	stop := startSyncer(t, providerOptions(t, p, 10*time.Second))
	createNamespace(t, e, map[string]string{"scope": n})
	secret := credentialprovider.SecretName(p.name, nil)
	exported := func(context.Context) error {
		if _, ok := gauge(metrics.ProviderCredentialExpiry, secret); !ok {
			return fmt.Errorf("no expiry gauge for %s", secret)
		}
		return nil
	}
	ia := providerAlternative(p, n)
	create(t, e, &ia)
	eventually(t, "the leader exports the credential's expiry", exported)
	if err := e.cl.Delete(t.Context(), &ia); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the expiry goes with the last resource using the provider", func(ctx context.Context) error {
		if exported(ctx) == nil {
			return fmt.Errorf("%s still exported", secret)
		}
		return nil
	})

	again := providerAlternative(p, n+"-again")
	create(t, e, &again)
	eventually(t, "the leader exports the credential's expiry again", exported)
	stop()
	if v, ok := gauge(metrics.ProviderCredentialExpiry, secret); ok {
		t.Errorf("the stopped syncer still exports an expiry of %v for %s", v, secret)
	}
}

// hangingProvider is the configuration of one more fake provider, matching *.example, whose
// plugin hangs; its binary is installed in binDir by install.
type hangingProvider struct {
	name, stateDir string
}

func (h hangingProvider) yaml() string {
	return fmt.Sprintf(`- name: %s
  matchImages: ["*.example"]
  defaultCacheDuration: 1h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env:
  - {name: FAKE_PROVIDER_STATE_DIR, value: %q}
`, h.name, h.stateDir)
}

func (h hangingProvider) install(t *testing.T, binDir string) {
	fakeprovider.Build(t, binDir, h.name)
	fakeprovider.SetMode(t, h.stateDir, fakeprovider.ModeHang)
}

// Two providers whose plugins hang, each for several entries, hold none of the provider keeper's
// workers: a third provider's entry gets its credential while they hang (the plugins' timeout is
// longer than the wait).
func TestHangingProvidersDelayNoOtherProvider(t *testing.T) {
	e := harness(t)
	n := name(t)
	hangs := []hangingProvider{{name: "fake-hang-a", stateDir: t.TempDir()}, {name: "fake-hang-b", stateDir: t.TempDir()}}
	p := newProviderEnv(t, "fake-healthy", "1h", hangs[0].yaml()+hangs[1].yaml())
	for _, h := range hangs {
		h.install(t, p.binDir)
	}
	startSyncer(t, providerOptions(t, p, 10*time.Minute))
	b := testutil.NewImageAlternative(n + "-hang").Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n})
	for _, h := range hangs {
		for i := range 4 {
			b = b.Repository(fmt.Sprintf("%s.example/r%d", h.name, i)).Provider(h.name).Inject(true)
		}
	}
	hanging := b.Build()
	create(t, e, &hanging)
	eventually(t, "the hanging plugins run", func(context.Context) error {
		for _, h := range hangs {
			if reqs := fakeprovider.MustRequests(t, h.stateDir); len(reqs) < 2 {
				return fmt.Errorf("%s ran %d times", h.name, len(reqs))
			}
		}
		return nil
	})

	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	create(t, e, &ia)
	image := p.registry.Push(t, "acme/"+n+":v1")
	eventually(t, "the healthy provider's credential is injected while the others hang", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, "kuik-inject-imagealternative-"+n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return pulls(t, s, image)
	})
}

// A credential whose renewal hangs leaves the pull Secret when it expires, not when the plugin
// gives up (its timeout is longer than the wait): the expiry does not wait for the plugin.
func TestExpiryDoesNotWaitForAHangingRenewal(t *testing.T) {
	e := harness(t)
	n := name(t)
	p := newProviderEnv(t, "fake-expire-hang", "4s", "")
	startSyncer(t, providerOptions(t, p, 10*time.Minute))
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	create(t, e, &ia)
	key := p.registry.Host + "/acme/" + n
	secret := "kuik-inject-imagealternative-" + n
	eventually(t, "the credential is injected", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if authsOf(t, s)[key] == "" {
			return fmt.Errorf("holds %v", authsOf(t, s))
		}
		return nil
	})
	fakeprovider.SetMode(t, p.stateDir, fakeprovider.ModeHang)
	eventually(t, "the expired credential leaves the pull secret while its renewal hangs", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); a[key] != "" {
			return fmt.Errorf("holds %v", a)
		}
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return err
		}
		if c := readyCondition(got.Status.Conditions); c == nil || c.Reason != v1alpha1.ReasonProviderFailed || !strings.Contains(c.Message, "expired") {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	if reqs := fakeprovider.MustRequests(t, p.stateDir); len(reqs) < 2 {
		t.Fatalf("the plugin ran %d times, want the renewal to have started", len(reqs))
	}
}

// A plugin that echoes its request (service-account token included) and a timestamp to stderr
// leaks neither into the resource's condition nor its events, which hold the exit status and
// a redacted first line, the same on every retry; the syncer's log has the stderr.
func TestPluginStderrStaysInTheLogs(t *testing.T) {
	e := harness(t)
	n := name(t)
	grantTokenRights(t, e)
	p := newProviderEnv(t, "fake-echo", "1h", `  tokenAttributes:
    serviceAccountTokenAudience: kuik-test-audience
    cacheType: ServiceAccount
    requireServiceAccount: true
`)
	fakeprovider.SetMode(t, p.stateDir, fakeprovider.ModeEcho)
	saNS := createNamespace(t, e, nil)
	if _, err := e.cs.CoreV1().ServiceAccounts(saNS).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logged []string
	startSyncerWith(t, providerOptions(t, p, 10*time.Second), cp.ConfigAsServiceAccount(crns, serviceAccount), func(line string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, line)
	})
	createNamespace(t, e, map[string]string{"scope": n})
	ia := providerAlternative(p, n)
	ia.Spec.Alternatives[0].Auth.Provider.ServiceAccountRef = &v1alpha1.ServiceAccountReference{Namespace: saNS, Name: "puller"}
	create(t, e, &ia)

	message := func(ctx context.Context) (string, error) {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
			return "", err
		}
		c := readyCondition(got.Status.Conditions)
		if c == nil || c.Reason != v1alpha1.ReasonProviderFailed {
			return "", fmt.Errorf("condition %+v", c)
		}
		return c.Message, nil
	}
	var first string
	eventually(t, "the failure is reported", func(ctx context.Context) error {
		var err error
		first, err = message(ctx)
		return err
	})
	// Sampled while the plugin is retried three times, the message never changes.
	runs := p.requests(t)
	last := first
	eventually(t, "the plugin is retried three times", func(ctx context.Context) error {
		m, err := message(ctx)
		if err != nil {
			return err
		}
		if m != first {
			t.Fatalf("the condition message changed between retries:\n%s\n%s", first, m)
		}
		last = m
		if got := p.requests(t); got < runs+3 {
			return fmt.Errorf("%d runs", got)
		}
		return nil
	})
	if !strings.Contains(last, "exit status 1") {
		t.Errorf("the condition message %q lacks the exit status", last)
	}
	var got v1alpha1.ImageAlternative
	if err := e.cl.Get(t.Context(), clientKey(n), &got); err != nil {
		t.Fatal(err)
	}
	evs := injectionEvents(t.Context(), t, e.cs, got.UID)
	if len(evs) == 0 {
		t.Fatal("no event")
	}
	reqs := fakeprovider.MustRequests(t, p.stateDir)
	for _, r := range reqs {
		if r.Token == "" {
			t.Fatal("the plugin got no token")
		}
		for _, text := range append([]string{last}, eventMessages(evs)...) {
			if strings.Contains(text, r.Token) || strings.Contains(text, "CredentialProviderRequest") {
				t.Fatalf("the request leaks into status or events: %q", text)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logged, "\n"), "CredentialProviderRequest") {
		t.Error("the syncer's log lacks the plugin's stderr")
	}
}

func eventMessages(evs []corev1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Message
	}
	return out
}
