package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// keeper runs the credential-provider plugins for the provider entries of every routing
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
type keeper struct {
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

// demandState is what the keeper knows of one demand.
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

func newKeeper(cfg Config, core corev1client.CoreV1Interface) *keeper {
	return &keeper{
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
func (k *keeper) config() *credentialprovider.Config {
	if k == nil || k.plugins == nil {
		return nil
	}
	return k.plugins.Config()
}

// use records the provider entries of a resource (nil for a resource gone): new demands are
// asked for, demands no resource uses any more are dropped from their Secret.
func (k *keeper) use(ctx context.Context, rk ResourceKey, r *Resource) {
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
func (k *keeper) restored(ctx context.Context, d Demand) *Obtained {
	if k.existing == nil {
		return nil
	}
	s, ok := k.existing(ctx, d.SecretName())
	if !ok {
		return nil
	}
	cfg, err := credentials.ParseSecret(s)
	if err != nil {
		return nil
	}
	_, key, err := cfg.Lookup(d.Image)
	if err != nil {
		return nil
	}
	o := ParseProviderSecret(s)[key]
	if o == nil || o.Provider != d.Provider || o.ServiceAccount != d.ServiceAccount || !o.Valid(k.now()) {
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
func (k *keeper) answer(e *Entry) ProviderAnswer {
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
func (k *keeper) run(ctx context.Context, workers int) {
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

// deleteProviderGauges removes the gauges of a kuik-provider-* Secret this keeper no longer
// keeps: its leadership ended, or no demand of the Secret is left.
func deleteProviderGauges(provider, secret string) {
	metrics.ProviderCredentialExpiry.DeleteLabelValues(provider, secret)
	metrics.ProviderSecretBytes.DeleteLabelValues(provider, secret)
	metrics.ProviderSecretLeftOut.DeleteLabelValues(provider, secret)
}

// repair queues a kuik-provider-* Secret that changed in the cluster (someone deleted or edited
// it): it is compared with what it should hold and written again if they differ.
func (k *keeper) repair(name string) {
	k.mu.Lock()
	delete(k.written, name)
	k.mu.Unlock()
	k.secrets.Add(name)
}

// dirtyAll queues every kuik-provider-* Secret known, so that one left by resources deleted
// while no syncer ran is emptied.
func (k *keeper) dirtyAll(names []string) {
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

func (k *keeper) processDemand(ctx context.Context) bool {
	d, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(d)
	k.sync(ctx, d)
	return true
}

// sync asks the plugin for a demand when it is due, and schedules the next time. The plugin
// runs apart from the worker (at most maxExecsPerProvider at once per provider), so a plugin
// that hangs holds no worker, and the wake-up at a credential's expiry takes it out at once,
// whether or not a plugin is still running for it.
func (k *keeper) sync(ctx context.Context, d Demand) {
	now := k.now()
	k.mu.Lock()
	st := k.demands[d]
	if st == nil || st.static {
		k.mu.Unlock()
		return
	}
	if st.cred != nil && !st.cred.Valid(now) {
		// Expired before it could be renewed: out of every Secret now, not after the plugin
		// answers (or hangs).
		st.cred, st.failure = nil, ""
		st.reason, st.msg = v1alpha1.ReasonProviderFailed, fmt.Sprintf("provider %q: the credential for %q expired before it could be renewed", d.Provider, d.Image)
		users := slices.Collect(maps.Keys(st.users))
		k.mu.Unlock()
		k.publish(ctx, d, users)
		k.mu.Lock()
		if st = k.demands[d]; st == nil {
			k.mu.Unlock()
			return
		}
	}
	if st.running {
		k.mu.Unlock()
		return
	}
	if st.cred.Valid(now) && now.Before(st.cred.RenewAt) && st.failure == "" {
		wait := st.cred.RenewAt.Sub(now)
		k.mu.Unlock()
		k.queue.AddAfter(d, wait)
		return
	}
	// A provider runs at most maxExecsPerProvider plugins at once, so that one that hangs
	// does not start a plugin for each of its entries: the others wait their turn.
	if k.inFlight[d.Provider] >= maxExecsPerProvider {
		k.mu.Unlock()
		k.queue.AddAfter(d, time.Second)
		return
	}
	k.inFlight[d.Provider]++
	st.running = true
	var minValidity, untilExpiry time.Duration
	if st.cred != nil {
		minValidity = st.cred.ExpiresAt.Sub(st.cred.RenewAt)
		untilExpiry = st.cred.ExpiresAt.Sub(now)
	}
	renewing := st.cred != nil
	k.mu.Unlock()

	if renewing {
		k.queue.AddAfter(d, max(untilExpiry, time.Millisecond))
	}
	k.execs.Go(func() {
		cred, err := k.obtain(ctx, d, minValidity)
		k.finish(ctx, d, st, renewing, cred, err)
	})
}

// finish takes a plugin's answer for a demand whose state was st when the plugin started.
func (k *keeper) finish(ctx context.Context, d Demand, st *demandState, renewing bool, cred credentialprovider.Credential, err error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("provider", d.Provider, "image", d.Image)
	var o *Obtained
	if err == nil {
		o, err = Keep(d, cred, k.floor)
	}
	now := k.now()

	k.mu.Lock()
	k.inFlight[d.Provider]--
	st.running = false
	if ctx.Err() != nil || k.demands[d] != st {
		// Shutting down (or leadership lost): not the plugin's failure. Or the demand was
		// dropped while the plugin ran (a new one runs its own).
		k.mu.Unlock()
		return
	}
	var next time.Duration
	if err != nil {
		st.failures++
		msg := err.Error()
		if pe, ok := errors.AsType[*credentialprovider.PluginError](err); ok {
			// Its stderr to the logs only: it may echo the request, token included.
			log = log.WithValues("stderr", pe.Stderr)
		}
		log.Error(err, "credential provider failed", "failures", st.failures)
		if st.cred.Valid(now) {
			st.failure = msg
			next = min(k.backoff(st.failures), st.cred.ExpiresAt.Sub(now))
		} else {
			st.cred, st.failure = nil, ""
			st.reason, st.msg = v1alpha1.ReasonProviderFailed, fmt.Sprintf("provider %q: %s", d.Provider, msg)
			next = k.backoff(st.failures)
		}
		if renewing {
			metrics.ProviderRenewals.WithLabelValues(d.Provider, metrics.ResultError).Inc()
		}
	} else {
		st.cred, st.failure, st.failures, st.reason, st.msg = o, "", 0, "", ""
		// Wake at expiry too, should the floor put the renewal after it.
		next = min(o.RenewAt.Sub(now), o.ExpiresAt.Sub(now))
		if renewing {
			metrics.ProviderRenewals.WithLabelValues(d.Provider, metrics.ResultSuccess).Inc()
		}
		log.V(1).Info("credential obtained", "expiresAt", o.ExpiresAt, "renewAt", o.RenewAt, "fromCache", cred.FromCache)
	}
	users := slices.Collect(maps.Keys(st.users))
	k.mu.Unlock()

	k.queue.AddAfter(d, max(next, time.Millisecond))
	k.publish(ctx, d, users)
}

// publish tells of a demand whose answer changed: the resource memo's fingerprint moves, its
// Secret is written again if its content changed, and its users are decided again.
func (k *keeper) publish(ctx context.Context, d Demand, users []ResourceKey) {
	k.version.Add(1)
	k.secrets.Add(d.SecretName())
	if k.changed != nil {
		k.changed(ctx, users)
	}
}

// backoff is the wait before the n-th retry: ProviderRetry, doubling up to 8×.
func (k *keeper) backoff(n int) time.Duration {
	return k.retry * time.Duration(1<<min(max(n-1, 0), 3))
}

// obtain runs the provider for a demand, with a fresh service-account token when it takes one.
func (k *keeper) obtain(ctx context.Context, d Demand, minValidity time.Duration) (credentialprovider.Credential, error) {
	req := credentialprovider.Request{Image: d.Image, MinValidity: minValidity}
	p := k.config().Provider(d.Provider)
	if p != nil && p.TokenAttributes != nil && d.ServiceAccount != "" {
		if err := k.serviceAccountToken(ctx, d, p.TokenAttributes, &req); err != nil {
			return credentialprovider.Credential{}, err
		}
	}
	return k.plugins.Get(ctx, d.Provider, req)
}

// serviceAccountToken fills the request with a token for the demand's ServiceAccount (the
// provider's audience, ServiceAccountTokenTTL) and the annotations the provider asks for.
func (k *keeper) serviceAccountToken(ctx context.Context, d Demand, ta *credentialprovider.TokenAttributes, req *credentialprovider.Request) error {
	ref := d.serviceAccountRef()
	sas := k.core.ServiceAccounts(ref.Namespace)
	sa, err := sas.Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading service account %s: %w", d.ServiceAccount, err)
	}
	annotations := map[string]string{}
	for _, key := range ta.RequiredAnnotationKeys {
		v, ok := sa.Annotations[key]
		if !ok {
			return fmt.Errorf("service account %s lacks the annotation %q the provider requires", d.ServiceAccount, key)
		}
		annotations[key] = v
	}
	for _, key := range ta.OptionalAnnotationKeys {
		if v, ok := sa.Annotations[key]; ok {
			annotations[key] = v
		}
	}
	tr, err := sas.CreateToken(ctx, ref.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{ta.Audience},
			ExpirationSeconds: ptr.To(int64(k.tokenTTL / time.Second)),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for service account %s: %w", d.ServiceAccount, err)
	}
	req.ServiceAccount = d.ServiceAccount + "/" + string(sa.UID)
	req.ServiceAccountToken = tr.Status.Token
	if len(annotations) > 0 {
		req.ServiceAccountAnnotations = annotations
	}
	return nil
}

func (k *keeper) processSecret(ctx context.Context) bool {
	name, shutdown := k.secrets.Get()
	if shutdown {
		return false
	}
	defer k.secrets.Done(name)
	if err := k.writeSecret(ctx, name); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "writing provider secret", "secret", name)
		k.secrets.AddRateLimited(name)
		return true
	}
	k.secrets.Forget(name)
	return true
}

// writeSecret applies a kuik-provider-* Secret with the valid credentials of its demands, laid
// out by [LayOutProviderSecret], when that changes what it holds. The demands whose credential
// is left out (or back in) are decided again, so that their resources say so.
func (k *keeper) writeSecret(ctx context.Context, name string) error {
	now := k.now()
	var demands []SecretDemand
	provider, account := "", ""
	k.mu.Lock()
	for _, d := range slices.SortedFunc(maps.Keys(k.demands), compareDemands) {
		if d.SecretName() != name {
			continue
		}
		if provider != "" && (d.Provider != provider || d.ServiceAccount != account) {
			continue // another pair whose Secret would have this name: never mixed in
		}
		provider, account = d.Provider, d.ServiceAccount
		st := k.demands[d]
		sd := SecretDemand{Demand: d, Key: firstKey(st.users), Static: st.static}
		if st.cred.Valid(now) {
			sd.Cred = st.cred
		}
		demands = append(demands, sd)
	}
	k.mu.Unlock()
	// Outside the lock: Resolve's lookups need not wait for a large Secret's layout.
	layout := LayOutProviderSecret(demands, k.maxSecretBytes)
	k.mu.Lock()
	leftOut := map[Demand]bool{}
	for _, d := range layout.LeftOut {
		leftOut[d] = true
	}
	var moved []ResourceKey
	if prev := k.leftOut[name]; !maps.Equal(prev, leftOut) {
		for d, st := range k.demands {
			if prev[d] != leftOut[d] {
				moved = append(moved, slices.Collect(maps.Keys(st.users))...)
			}
		}
		if len(leftOut) == 0 {
			delete(k.leftOut, name)
		} else {
			k.leftOut[name] = leftOut
		}
	}
	prev := k.written[name]
	gone := ""
	if provider != "" {
		k.exported[name] = provider
	} else if p, ok := k.exported[name]; ok {
		gone = p // no demand left: its gauges go
		delete(k.exported, name)
	}
	k.mu.Unlock()
	if gone != "" {
		deleteProviderGauges(gone, name)
	}
	if len(moved) > 0 {
		k.version.Add(1)
		if k.changed != nil {
			k.changed(ctx, moved)
		}
	}

	var earliest time.Time
	for _, o := range layout.Creds {
		if earliest.IsZero() || o.ExpiresAt.Before(earliest) {
			earliest = o.ExpiresAt
		}
	}
	s, err := ProviderSecret(k.namespace, name, layout.Creds)
	if err != nil {
		return err
	}
	hash := dataHash(s.Data)
	if prev == "" && k.existing != nil {
		if cur, ok := k.existing(ctx, name); ok && isOurs(cur) {
			prev = dataHash(cur.Data)
		} else if !ok && len(layout.Creds) == 0 {
			prev = hash // nothing there, nothing to keep: no empty Secret is created
		}
	}
	if provider != "" {
		if earliest.IsZero() {
			metrics.ProviderCredentialExpiry.DeleteLabelValues(provider, name)
		} else {
			metrics.ProviderCredentialExpiry.WithLabelValues(provider, name).Set(float64(earliest.Unix()))
		}
		metrics.ProviderSecretBytes.WithLabelValues(provider, name).Set(float64(dataBytes(s.Data)))
		metrics.ProviderSecretLeftOut.WithLabelValues(provider, name).Set(float64(len(layout.LeftOut)))
	}
	if len(layout.LeftOut) > 0 {
		logr.FromContextOrDiscard(ctx).Info("provider secret full: credentials left out", "secret", name,
			"leftOut", len(layout.LeftOut), "bytes", dataBytes(s.Data), "maxBytes", k.maxSecretBytes)
	}
	if hash == prev {
		k.mu.Lock()
		k.written[name] = hash
		k.mu.Unlock()
		return nil
	}
	if _, err := k.core.Secrets(k.namespace).Apply(ctx, ApplyConfiguration(s), metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		metrics.ProviderSecretWrites.WithLabelValues(metrics.ResultError).Inc()
		return fmt.Errorf("applying provider secret %s/%s: %w", k.namespace, name, err)
	}
	metrics.ProviderSecretWrites.WithLabelValues(metrics.ResultSuccess).Inc()
	k.mu.Lock()
	k.written[name] = hash
	k.mu.Unlock()
	return nil
}

// firstKey is the auths key of a demand: the one of its first user, in a stable order.
func firstKey(users map[ResourceKey]string) string {
	keys := slices.SortedFunc(maps.Keys(users), func(a, b ResourceKey) int { return strings.Compare(a.String(), b.String()) })
	if len(keys) == 0 {
		return ""
	}
	return users[keys[0]]
}

func compareDemands(a, b Demand) int {
	return strings.Compare(a.Provider+"\x00"+a.ServiceAccount+"\x00"+a.Image, b.Provider+"\x00"+b.ServiceAccount+"\x00"+b.Image)
}

func isOurs(s *corev1.Secret) bool {
	return s.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedBySecretSyncer && s.Type == corev1.SecretTypeDockerConfigJson
}

// dataHash identifies a Secret's data.
func dataHash(data map[string][]byte) string {
	b, err := json.Marshal(data)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
