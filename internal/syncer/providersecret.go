package syncer

import (
	"encoding/json"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
)

// What a kuik-provider-* Secret holds, and how it stays within the API server's limit.
//
// The credential is kept in the kuik-provider-* Secret of the (provider, serviceAccountRef)
// pair, in the cluster resource namespace, under the entry's auths key, so the webhook probes
// the entry with exactly what the pods' Secrets get. A data key next to .dockerconfigjson
// (credentialprovider.CredentialsKey; the format is credentialprovider.Secret's, shared with
// the keeper) records, for each auths key, the image asked and when the credential was
// obtained, is to be renewed and expires: the admission policy lets no one but the syncer
// change a reserved Secret's data, so a restart can trust it and reuse what has not expired.
//
// The kubelet caches a plugin's answer under the key its cacheKeyType names: the image for
// Image, the image's registry host for Registry, one key per provider for Global (ECR, GCR and
// ACR answer Registry or Global), and serves every image of that registry (or every image) from
// it. The Secret follows it: an answer shared that way is written once, under the key of the
// plugin's auth map it came from (the registry host for ECR), and every entry of the registry
// reads it with the keyring rules the webhook and the kubelet apply (credentials.Lookup). Only
// Image answers, and shared ones that would not read back as their own, are written under the
// entry's auths key. The data is bounded by [MaxProviderSecretBytes], well under the API
// server's 1 MiB: what does not fit is left out, and its entries are told so (reason
// ProviderSecretFull, event, kuik_secret_syncer_provider_secret_left_out).

// MaxProviderSecretBytes bounds the data of one kuik-provider-* Secret: three quarters of the
// API server's limit on a Secret's data (1 MiB), so that a Secret close to the bound is still
// written, and reported, before the limit refuses it.
const MaxProviderSecretBytes = 768 << 10

// SecretDemand is one demand of a kuik-provider-* Secret, as [LayOutProviderSecret] reads it.
type SecretDemand struct {
	Demand Demand
	// Key is the entry's auths key.
	Key string
	// Cred is the demand's valid credential; nil when it has none (pending, failed, expired).
	Cred *Obtained
	// Static: no plugin may serve the demand (ProviderNotMatched, ServiceAccountRequired...),
	// so it must read nothing from the Secret, as the kubelet never asks a plugin that does not
	// match.
	Static bool
}

// ProviderLayout is what a kuik-provider-* Secret holds.
type ProviderLayout struct {
	// Creds are the credentials by auths key.
	Creds map[string]*Obtained
	// LeftOut are the demands with a valid credential that is not in the Secret, to keep it
	// within the bound.
	LeftOut []Demand
	// Bytes is the size of the Secret's data.
	Bytes int
}

// LayOutProviderSecret decides what a kuik-provider-* Secret holds for its demands (in a stable
// order: the first of two demands that cannot share wins, as the first declared entry does):
//
//   - a credential whose Scope is shared (Registry, Global) is written under its ResponseKey,
//     once for every demand of the same Scope (the newest, as the kubelet's cache keeps the
//     newest answer);
//   - an Image credential is written under the demand's auths key, as is a shared one whose key
//     is taken by another Scope;
//   - then each demand is looked up in the result with the keyring rules, as the webhook does
//     for its entry: it must read its own credential, or one of its Scope; a demand without a
//     credential must read nothing, or (unless Static) the credential of a Scope the kubelet
//     would serve it from. A shared credential that breaks this for some demand is written under
//     its demands' own keys instead;
//   - credentials past maxBytes of data, in that order, are left out.
func LayOutProviderSecret(demands []SecretDemand, maxBytes int) ProviderLayout {
	own := make([]bool, len(demands))
	dropped := make([]bool, len(demands))
layout:
	for {
		creds := map[string]*Obtained{}
		users := map[string][]int{}
		var order []string
		for i, sd := range demands {
			if sd.Cred == nil || dropped[i] {
				continue
			}
			key := sd.Key
			if sd.Cred.Scope != "" && sd.Cred.ResponseKey != "" && !own[i] {
				key = sd.Cred.ResponseKey
			}
			cur, taken := creds[key]
			switch {
			case !taken:
				creds[key] = sd.Cred
				order = append(order, key)
			case cur.Scope != "" && cur.Scope == sd.Cred.Scope:
				if sd.Cred.ObtainedAt.After(cur.ObtainedAt) {
					creds[key] = sd.Cred
				}
			case key != sd.Key:
				own[i] = true
				continue layout
			default:
				continue // two entries of one auths key: the first wins
			}
			users[key] = append(users[key], i)
		}

		size := emptyProviderSecretBytes
		for n, key := range order {
			size += providerEntryBytes(key, creds[key])
			if size <= maxBytes {
				continue
			}
			for _, k := range order[n:] {
				for _, i := range users[k] {
					dropped[i] = true
				}
			}
			continue layout
		}

		auths := make(map[string]credentials.AuthEntry, len(creds))
		for k, o := range creds {
			auths[k] = o.Auth
		}
		cfg := credentials.NewDockerConfig(auths)
		for i, sd := range demands {
			var holder *Obtained
			k := ""
			if _, key, err := cfg.Lookup(sd.Demand.Image); err == nil {
				holder, k = creds[key], key
			}
			mine := sd.Cred
			if dropped[i] {
				mine = nil
			}
			if readsAsItsOwn(sd, mine, holder) {
				continue
			}
			changed := false
			if holder != nil && holder.Scope != "" {
				for _, j := range users[k] {
					if !own[j] {
						own[j], changed = true, true
					}
				}
			}
			if !changed && mine != nil && mine.Scope != "" && !own[i] {
				own[i], changed = true, true
			}
			if changed {
				continue layout
			}
			// Nothing left to move: the demand reads as it would with one key per entry.
		}

		out := ProviderLayout{Creds: creds, Bytes: size}
		if s, err := credentialprovider.Secret("", "", creds); err == nil {
			out.Bytes = dataBytes(s.Data)
		}
		for i, sd := range demands {
			if dropped[i] {
				out.LeftOut = append(out.LeftOut, sd.Demand)
			}
		}
		return out
	}
}

// readsAsItsOwn reports whether a demand whose credential is mine (nil: none) may read holder
// (nil: nothing) from the Secret.
func readsAsItsOwn(sd SecretDemand, mine, holder *Obtained) bool {
	switch {
	case holder == nil:
		return mine == nil
	case holder == mine:
		return true
	case sd.Static:
		return false
	case mine != nil:
		return mine.Scope != "" && holder.Scope == mine.Scope
	default:
		return holder.Scope != "" && holder.Scope == credentialprovider.CacheScope(holder.CacheKeyType, sd.Demand.Image)
	}
}

// emptyProviderSecretBytes is the data of a kuik-provider-* Secret holding nothing.
var emptyProviderSecretBytes = func() int {
	s, err := credentialprovider.Secret("", "", nil)
	if err != nil {
		panic(err)
	}
	return dataBytes(s.Data)
}()

// providerEntryBytes is what one credential adds to a kuik-provider-* Secret's data: its auths
// entry, its record, and a comma in each.
func providerEntryBytes(key string, o *Obtained) int {
	auths, err := credentials.Encode(map[string]credentials.AuthEntry{key: o.Auth})
	if err != nil {
		return 0 // Keep only keeps credentials that encode
	}
	rec, err := json.Marshal(map[string]*Obtained{key: o})
	if err != nil {
		return 0
	}
	return len(auths) - len(`{"auths":{}}`) + 1 + len(rec) - len(`{}`) + 1
}

// dataBytes is the size of a Secret's data as the API server bounds it (its values).
func dataBytes(data map[string][]byte) int {
	n := 0
	for _, v := range data {
		n += len(v)
	}
	return n
}
