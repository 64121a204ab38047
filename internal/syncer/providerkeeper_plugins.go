package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The provider keeper's demand queue: when a plugin runs for a demand, what its answer changes,
// and the service-account token it is given.

func (k *providerKeeper) processDemand(ctx context.Context) bool {
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
func (k *providerKeeper) sync(ctx context.Context, d Demand) {
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
func (k *providerKeeper) finish(ctx context.Context, d Demand, st *demandState, renewing bool, cred credentialprovider.Credential, err error) {
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
func (k *providerKeeper) publish(ctx context.Context, d Demand, users []ResourceKey) {
	k.version.Add(1)
	k.secrets.Add(d.SecretName())
	if k.changed != nil {
		k.changed(ctx, users)
	}
}

// backoff is the wait before the n-th retry: ProviderRetry, doubling up to 8×.
func (k *providerKeeper) backoff(n int) time.Duration {
	return k.retry * time.Duration(1<<min(max(n-1, 0), 3))
}

// obtain runs the provider for a demand, with a fresh service-account token when it takes one.
func (k *providerKeeper) obtain(ctx context.Context, d Demand, minValidity time.Duration) (credentialprovider.Credential, error) {
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
func (k *providerKeeper) serviceAccountToken(ctx context.Context, d Demand, ta *credentialprovider.TokenAttributes, req *credentialprovider.Request) error {
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
