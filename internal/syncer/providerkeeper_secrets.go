package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The provider keeper's Secret queue: each kuik-provider-* Secret is written from the valid
// credentials of its demands, with its gauges.

// deleteProviderGauges removes the gauges of a kuik-provider-* Secret this keeper no longer
// keeps: its leadership ended, or no demand of the Secret is left.
func deleteProviderGauges(provider, secret string) {
	metrics.ProviderCredentialExpiry.DeleteLabelValues(provider, secret)
	metrics.ProviderSecretBytes.DeleteLabelValues(provider, secret)
	metrics.ProviderSecretLeftOut.DeleteLabelValues(provider, secret)
}

func (k *providerKeeper) processSecret(ctx context.Context) bool {
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
func (k *providerKeeper) writeSecret(ctx context.Context, name string) error {
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
	s, err := credentialprovider.Secret(k.namespace, name, layout.Creds)
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
