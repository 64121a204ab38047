package syncer

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// providerKeeper runs the credential-provider plugins for the provider entries of every routing
// resource and keeps their answers fresh: in memory for Resolve, and in the kuik-provider-*
// Secrets of the cluster resource namespace for the webhook's probes and for the next start.
//
// Each [Demand] is worked on by one worker at a time (a work queue): it is asked for at once
// when it first appears (unless a kuik-provider-* Secret from an earlier run holds an unexpired
// credential for it), then again at its renewal time; a plugin failure keeps the last good
// credential until it expires and retries every ProviderRetry. The plugins run apart from the
// workers (at most maxExecsPerProvider at once per provider), so a plugin that hangs holds no
// worker, and a demand is woken at its credential's expiry whether or not a plugin runs for
// it. Whenever the credential of a demand changes (obtained, renewed, failed, expired), the
// Secret is written again if its content changed and the resources using the demand are
// decided again, which re-applies the pairs whose Secret holds it.
type providerKeeper struct {
	plugins   *credentialprovider.Plugins
	namespace string
	core      corev1client.CoreV1Interface
	now       func() time.Time
	floor     time.Duration
	retry     time.Duration
	tokenTTL  time.Duration
	// existing returns a Secret of the cluster resource namespace from the cache.
	existing func(ctx context.Context, name string) (*corev1.Secret, bool)
	// changed is told the resources using a demand whose answer changed.
	changed func(ctx context.Context, users []ResourceKey)

	queue   workqueue.TypedRateLimitingInterface[Demand]
	secrets workqueue.TypedRateLimitingInterface[string]

	// version changes whenever an answer changes, for the resource memo's fingerprint.
	version atomic.Int64

	mu      sync.Mutex
	demands map[Demand]*demandState
	// uses is the demands of each resource, as last read.
	uses map[ResourceKey]map[Demand]string
	// written is the hash of what was last applied, by Secret name.
	written map[string]string
	// inFlight counts the plugins running, by provider.
	inFlight map[string]int
	// leftOut is, by Secret name, the demands whose credential does not fit in their Secret.
	leftOut map[string]map[Demand]bool
	// exported is the provider of each Secret whose gauges this keeper set, cleared when it
	// stops: a keeper that lost its lease must not go on reporting credentials it no longer
	// renews.
	exported map[string]string
	// maxSecretBytes bounds a provider Secret's data (MaxProviderSecretBytes).
	maxSecretBytes int

	// execs are the plugins running; run waits for them before it returns.
	execs sync.WaitGroup
}

// maxExecsPerProvider bounds the plugins of one provider running at once.
const maxExecsPerProvider = 2

// demandState is what the provider keeper knows of one demand.
type demandState struct {
	// users and the auths key each uses (the entry's Key; entries of one demand share it unless
	// they spell the path differently, then the first declared wins).
	users map[ResourceKey]string
	// reason and msg: a static reason (the plugin is never run), ProviderPending before the
	// first answer, ProviderFailed when the plugin failed and nothing valid is left.
	reason, msg string
	cred        *Obtained
	// failure is the last plugin error while cred is still valid ("" when the last run worked).
	failure  string
	failures int
	static   bool
	// running: a plugin runs for the demand; its end schedules the next run.
	running bool
}

func newProviderKeeper(cfg Config, core corev1client.CoreV1Interface) *providerKeeper {
	return &providerKeeper{
		plugins:   cfg.Plugins,
		namespace: cfg.ClusterResourceNamespace,
		core:      core,
		now:       cfg.Clock.Now,
		floor:     cfg.ProviderRenewFloor,
		retry:     cfg.ProviderRetry,
		tokenTTL:  cfg.ServiceAccountTokenTTL,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Demand](),
			workqueue.TypedRateLimitingQueueConfig[Demand]{Name: "secret-syncer-providers"}),
		secrets: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "secret-syncer-provider-secrets"}),
		demands:  map[Demand]*demandState{},
		uses:     map[ResourceKey]map[Demand]string{},
		written:  map[string]string{},
		inFlight: map[string]int{},
		leftOut:  map[string]map[Demand]bool{},
		exported: map[string]string{},

		maxSecretBytes: MaxProviderSecretBytes,
	}
}

// config is the plugins' configuration, nil when none is given.
func (k *providerKeeper) config() *credentialprovider.Config {
	if k == nil || k.plugins == nil {
		return nil
	}
	return k.plugins.Config()
}

// use records the provider entries of a resource (nil for a resource gone): new demands are
// asked for, demands no resource uses any more are dropped from their Secret.
func (k *providerKeeper) use(ctx context.Context, rk ResourceKey, r *Resource) {
	next := map[Demand]string{}
	if r != nil && r.Policy != v1alpha1.RewritePolicyNone {
		for i := range r.Entries {
			if d, ok := DemandOf(&r.Entries[i]); ok {
				if _, dup := next[d]; !dup {
					next[d] = r.Entries[i].Key
				}
			}
		}
	}
	var ask []Demand
	dirty := map[string]struct{}{}
	k.mu.Lock()
	prev := k.uses[rk]
	if maps.Equal(prev, next) {
		k.mu.Unlock()
		return
	}
	if len(next) == 0 {
		delete(k.uses, rk)
	} else {
		k.uses[rk] = next
	}
	for d := range prev {
		if _, still := next[d]; still {
			continue
		}
		if st := k.demands[d]; st != nil {
			delete(st.users, rk)
			if len(st.users) == 0 {
				delete(k.demands, d)
				dirty[d.SecretName()] = struct{}{}
			}
		}
	}
	for d, key := range next {
		st := k.demands[d]
		if st != nil {
			if _, known := st.users[rk]; !known {
				st.users[rk] = key
			}
			continue
		}
		st = &demandState{users: map[ResourceKey]string{rk: key}}
		k.demands[d] = st
		if reason, msg := StaticReason(k.config(), d); reason != "" {
			st.reason, st.msg, st.static = reason, msg, true
			continue
		}
		st.reason, st.msg = v1alpha1.ReasonProviderPending, pendingMessage(d)
		if o := k.restored(ctx, d); o != nil {
			st.cred, st.reason, st.msg = o, "", ""
			k.queue.AddAfter(d, o.RenewAt.Sub(k.now()))
			continue
		}
		ask = append(ask, d)
	}
	k.mu.Unlock()
	k.version.Add(1)
	for _, d := range ask {
		k.queue.Add(d)
	}
	for name := range dirty {
		k.secrets.Add(name)
	}
}

// restored is the unexpired credential an earlier run kept for the demand, or nil: the one its
// image reads in the Secret by the keyring rules, if it was obtained for that very demand, or,
// for a Registry or Global answer, for the same provider and ServiceAccount and a Scope that
// the kubelet would serve the image from.
func (k *providerKeeper) restored(ctx context.Context, d Demand) *Obtained {
	if k.existing == nil {
		return nil
	}
	s, ok := k.existing(ctx, d.SecretName())
	if !ok {
		return nil
	}
	o, key := credentialprovider.Stored(s, d.Provider, d.serviceAccountRef(), d.Image, k.now())
	if o == nil {
		return nil
	}
	switch {
	case o.Image == d.Image:
	case o.Scope != "" && o.Scope == credentialprovider.CacheScope(o.CacheKeyType, d.Image):
		c := *o
		c.Image = d.Image
		o = &c
	default:
		return nil
	}
	if o.Scope != "" {
		o.ResponseKey = key
	}
	return o
}

// answer is Resolve's view of a provider entry.
func (k *providerKeeper) answer(e *Entry) ProviderAnswer {
	d, ok := DemandOf(e)
	if !ok {
		return ProviderAnswer{}
	}
	if k == nil || k.plugins == nil {
		reason, msg := StaticReason(nil, d)
		return ProviderAnswer{Reason: reason, Message: msg}
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.demands[d]
	switch {
	case st == nil:
		if reason, msg := StaticReason(k.config(), d); reason != "" {
			return ProviderAnswer{Reason: reason, Message: msg}
		}
		return ProviderAnswer{Reason: v1alpha1.ReasonProviderPending, Message: pendingMessage(d)}
	case st.cred.Valid(now) && st.failure != "":
		return ProviderAnswer{Auth: st.cred.Auth, OK: true, Reason: v1alpha1.ReasonProviderRenewalFailed,
			Message: fmt.Sprintf("provider %q could not renew the credential for %q, which stays in use until %s: %s", d.Provider, d.Image, st.cred.ExpiresAt.UTC().Format(time.RFC3339), st.failure)}
	case st.cred.Valid(now) && k.leftOut[d.SecretName()][d]:
		return ProviderAnswer{Auth: st.cred.Auth, OK: true, Reason: v1alpha1.ReasonProviderSecretFull,
			Message: fmt.Sprintf("provider %q: the credential for %q does not fit in the provider secret %s (bounded to %d bytes), so the webhook probes the entry without it; spread the entries of this provider over serviceAccountRefs, or use fewer entries", d.Provider, d.Image, d.SecretName(), k.maxSecretBytes)}
	case st.cred.Valid(now):
		return ProviderAnswer{Auth: st.cred.Auth, OK: true}
	case st.reason != "":
		return ProviderAnswer{Reason: st.reason, Message: st.msg}
	default:
		return ProviderAnswer{Reason: v1alpha1.ReasonProviderFailed, Message: fmt.Sprintf("provider %q: the credential for %q expired", d.Provider, d.Image)}
	}
}

// run works the queues until ctx ends.
func (k *providerKeeper) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k.processDemand(ctx) {
			}
		})
	}
	wg.Go(func() {
		for k.processSecret(ctx) {
		}
	})
	<-ctx.Done()
	k.queue.ShutDown()
	k.secrets.ShutDown()
	wg.Wait()
	k.execs.Wait()
	k.mu.Lock()
	for name, provider := range k.exported {
		deleteProviderGauges(provider, name)
	}
	clear(k.exported)
	k.mu.Unlock()
}

// repair queues a kuik-provider-* Secret that changed in the cluster (someone deleted or edited
// it): it is compared with what it should hold and written again if they differ.
func (k *providerKeeper) repair(name string) {
	k.mu.Lock()
	delete(k.written, name)
	k.mu.Unlock()
	k.secrets.Add(name)
}

// dirtyAll queues every kuik-provider-* Secret known, so that one left by resources deleted
// while no syncer ran is emptied.
func (k *providerKeeper) dirtyAll(names []string) {
	for _, n := range names {
		k.secrets.Add(n)
	}
	k.mu.Lock()
	var known []string
	for d := range k.demands {
		known = append(known, d.SecretName())
	}
	k.mu.Unlock()
	for _, n := range known {
		k.secrets.Add(n)
	}
}
