package syncer

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// LeftOut is an injecting entry whose credential is not written, and why.
type LeftOut struct {
	Resource ResourceKey
	// Entry is the entry's JSON path (spec.alternatives[1], spec.destination).
	Entry string
	// Path is the entry's registry path as written.
	Path string
	// Reason is one of the v1alpha1 condition reasons: SecretNotFound, NotDockerConfig,
	// InvalidDockerConfig, NoCredentialForPath, ProviderNotConfigured.
	Reason string
	// Message says what was wrong, naming the Secret.
	Message string
}

func (l LeftOut) String() string {
	return fmt.Sprintf("%s: entry %s (%s) left out: %s: %s", l.Resource, l.Entry, l.Path, l.Reason, l.Message)
}

// Resolution is the credential of every injecting entry of one resource, resolved once and
// shared by all the resource's namespaces.
type Resolution struct {
	// Credentials by auths key, for the entries that resolved; when several entries share a
	// key, the first in declared order that resolved.
	Credentials map[string]credentials.AuthEntry
	// LeftOut lists the injecting entries that did not resolve, in declared order.
	LeftOut []LeftOut
	// Warnings lists the injecting entries that resolved with a credential that could not be
	// renewed (ProviderRenewalFailed): it is used until it expires.
	Warnings []LeftOut
	// Injecting is the number of injecting entries.
	Injecting int
}

// SecretLookup returns a Secret of the cluster resource namespace by name, or false.
type SecretLookup func(name string) (*corev1.Secret, bool)

// Resolve finds, for each injecting entry of the resource, the credential the kubelet would use
// from its secretRef Secret for every image the entry serves (credentials.DockerConfig.Lookup of
// Entry.LookupPath, the path the webhook probes with too). An entry
// whose Secret is missing, is not a docker config, does not parse, holds no credential for the
// path, or would not encode, is left out with a reason; a provider entry is left out with
// ProviderNotConfigured when providers is nil, else with what providers answers (the credential
// the provider keeper obtained, or why there is none). Each Secret is parsed once however many
// entries use it.
func Resolve(r *Resource, secrets SecretLookup, providers ProviderLookup) *Resolution {
	res := &Resolution{Credentials: map[string]credentials.AuthEntry{}}
	cache := map[string]parsedSecret{}
	for i := range r.Entries {
		e := &r.Entries[i]
		if !e.Injects {
			// A provider entry that does not inject is still probed with the credential of its
			// provider Secret: say when that Secret could not hold it.
			if e.Auth != nil && e.Auth.Provider != nil && providers != nil {
				if a := providers(e); a.OK && a.Reason == v1alpha1.ReasonProviderSecretFull {
					res.Warnings = append(res.Warnings, LeftOut{Resource: r.Key(), Entry: e.Field, Path: e.Path, Reason: a.Reason, Message: a.Message})
				}
			}
			continue
		}
		res.Injecting++
		leftOut := func(reason, msg string) {
			res.LeftOut = append(res.LeftOut, LeftOut{Resource: r.Key(), Entry: e.Field, Path: e.Path, Reason: reason, Message: msg})
		}
		if e.Auth.SecretRef == nil {
			var a ProviderAnswer
			if providers != nil {
				a = providers(e)
			} else if d, ok := DemandOf(e); ok {
				a.Reason, a.Message = StaticReason(nil, d)
			}
			if !a.OK {
				leftOut(a.Reason, a.Message)
				continue
			}
			if _, err := credentials.Encode(map[string]credentials.AuthEntry{e.Key: a.Auth}); err != nil {
				leftOut(v1alpha1.ReasonInvalidDockerConfig, fmt.Sprintf("provider %q: %v", e.Auth.Provider.Name, err))
				continue
			}
			if a.Reason != "" {
				res.Warnings = append(res.Warnings, LeftOut{Resource: r.Key(), Entry: e.Field, Path: e.Path, Reason: a.Reason, Message: a.Message})
			}
			if _, dup := res.Credentials[e.Key]; !dup {
				res.Credentials[e.Key] = a.Auth
			}
			continue
		}
		name := e.Auth.SecretRef.Name
		p, ok := cache[name]
		if !ok {
			p = parseRef(name, secrets)
			cache[name] = p
		}
		if p.config == nil {
			leftOut(p.reason, p.msg)
			continue
		}
		auth, _, err := p.config.Lookup(e.LookupPath)
		if err != nil {
			leftOut(v1alpha1.ReasonNoCredentialForPath, fmt.Sprintf("secret %q: %v", name, err))
			continue
		}
		// Every entry written must decode: encode it alone first, so one bad entry is left out
		// instead of failing the whole Secret.
		if _, err := credentials.Encode(map[string]credentials.AuthEntry{e.Key: auth}); err != nil {
			leftOut(v1alpha1.ReasonInvalidDockerConfig, fmt.Sprintf("secret %q: %v", name, err))
			continue
		}
		if _, dup := res.Credentials[e.Key]; !dup {
			res.Credentials[e.Key] = auth
		}
	}
	return res
}

// parsedSecret is a secretRef Secret read once: its docker config, or why there is none.
type parsedSecret struct {
	config *credentials.DockerConfig
	reason string
	msg    string
}

func parseRef(name string, secrets SecretLookup) (p parsedSecret) {
	s, ok := secrets(name)
	if !ok {
		p.reason, p.msg = v1alpha1.ReasonSecretNotFound, fmt.Sprintf("secret %q not found in the cluster resource namespace", name)
		return p
	}
	c, err := credentials.ParseSecret(s)
	switch {
	case errors.Is(err, credentials.ErrNotDockerConfig):
		p.reason, p.msg = v1alpha1.ReasonNotDockerConfig, err.Error()
	case err != nil:
		p.reason, p.msg = v1alpha1.ReasonInvalidDockerConfig, err.Error()
	default:
		p.config = c
	}
	return p
}

// Data is the .dockerconfigjson of a pull Secret holding the credentials of the given auths keys
// (those that resolved; the others are absent). No key gives {"auths":{}}.
func (res *Resolution) Data(keys []string) ([]byte, error) {
	auths := make(map[string]credentials.AuthEntry, len(keys))
	for _, k := range keys {
		if a, ok := res.Credentials[k]; ok {
			auths[k] = a
		}
	}
	data, err := credentials.Encode(auths)
	if err != nil {
		return nil, fmt.Errorf("encoding pull secret: %w", err)
	}
	return data, nil
}

// Reasons lists the distinct reasons of the entries left out, sorted.
func (res *Resolution) Reasons() []string {
	var out []string
	for _, l := range res.LeftOut {
		if !slices.Contains(out, l.Reason) {
			out = append(out, l.Reason)
		}
	}
	slices.Sort(out)
	return out
}
