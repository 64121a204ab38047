package syncer

import (
	"fmt"
	"strings"
	"time"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Provider credentials: the decisions (this file) and the provider keeper that runs the
// plugins and keeps their results (providerkeeper*.go).
//
// An entry with auth.provider asks the provider for one image: the entry's LookupPath (the path
// its candidates are probed and looked up with), normalized, without the trailing '/' of a
// repositoryGroup or a mirror path — quay.io/acme for repositoryGroup quay.io/acme/,
// registry.tld/mirror for a mirror destination registry.tld/mirror/. The kubelet asks about each
// image it pulls; for a provider whose responses are keyed by Registry or Global (ECR, GCR and
// ACR's are) the answer is the same, and for an Image-keyed provider the credential of the
// group or mirror path is taken for every repository under it.

// Demand is what a provider entry asks a plugin for.
type Demand struct {
	Provider string
	// ServiceAccount is "namespace/name", or "" without serviceAccountRef.
	ServiceAccount string
	// Image is the image the plugin is asked about.
	Image string
}

// SecretName is the kuik-provider-* Secret the demand's credential is kept in.
func (d Demand) SecretName() string {
	return credentialprovider.SecretName(d.Provider, d.serviceAccountRef())
}

func (d Demand) serviceAccountRef() *v1alpha1.ServiceAccountReference {
	if d.ServiceAccount == "" {
		return nil
	}
	ns, name, _ := strings.Cut(d.ServiceAccount, "/")
	return &v1alpha1.ServiceAccountReference{Namespace: ns, Name: name}
}

// DemandOf returns what a provider entry asks for; false for an entry without a provider.
func DemandOf(e *Entry) (Demand, bool) {
	if e.Auth == nil || e.Auth.Provider == nil {
		return Demand{}, false
	}
	d := Demand{Provider: e.Auth.Provider.Name, Image: ProviderImage(e.LookupPath)}
	d.ServiceAccount = credentialprovider.ServiceAccountKey(e.Auth.Provider.ServiceAccountRef)
	return d, true
}

// ProviderImage is the image a provider is asked about for an entry's LookupPath.
func ProviderImage(lookupPath string) string {
	p, err := credentials.NormalizePath(lookupPath)
	if err != nil {
		p = lookupPath
	}
	return strings.TrimSuffix(p, "/")
}

// StaticReason is why a demand cannot be served whatever a plugin would answer: the provider is
// not configured, does not match the image, or needs a ServiceAccount the entry does not name.
// It returns "" for a demand a plugin can serve.
func StaticReason(cfg *credentialprovider.Config, d Demand) (reason, msg string) {
	var p *credentialprovider.Provider
	if cfg != nil {
		p = cfg.Provider(d.Provider)
	}
	switch {
	case p == nil:
		if cfg == nil {
			return v1alpha1.ReasonProviderNotConfigured, fmt.Sprintf("provider %q: the secret-syncer has no credential provider configuration (--image-credential-provider-config)", d.Provider)
		}
		return v1alpha1.ReasonProviderNotConfigured, fmt.Sprintf("provider %q is not in the secret-syncer's credential provider configuration", d.Provider)
	case !p.Matches(d.Image):
		return v1alpha1.ReasonProviderNotMatched, fmt.Sprintf("provider %q: its matchImages %q do not match %q", d.Provider, p.MatchImages, d.Image)
	case p.TokenAttributes != nil && p.TokenAttributes.RequireServiceAccount && d.ServiceAccount == "":
		return v1alpha1.ReasonServiceAccountRequired, fmt.Sprintf("provider %q requires a service account token: set auth.provider.serviceAccountRef", d.Provider)
	}
	return "", ""
}

// Obtained is a credential a plugin gave for a demand, with its lifetime: the record of a
// kuik-provider-* Secret, whose format is shared with the webhook and the keeper
// (credentialprovider.Secret).
type Obtained = credentialprovider.Obtained

// Schedule turns a plugin's answer into the syncer's lifetime: the credential expires when the
// plugin's cache duration says (the response's, else the provider's default); a credential the
// plugin asked not to cache (cacheDuration 0) is taken as valid for 2×floor. It is renewed when
// a third of its lifetime is left, but never sooner than floor after it was obtained, so that
// a short or zero duration does not turn into a loop (a lifetime under floor may then lapse
// before its renewal).
func Schedule(c credentialprovider.Credential, floor time.Duration) Obtained {
	o := Obtained{Auth: c.Auth, ObtainedAt: c.ObtainedAt, ExpiresAt: c.ExpiresAt}
	if o.ExpiresAt.IsZero() || !o.ExpiresAt.After(o.ObtainedAt) {
		o.ExpiresAt = o.ObtainedAt.Add(2 * floor)
	}
	life := o.ExpiresAt.Sub(o.ObtainedAt)
	o.RenewAt = o.ExpiresAt.Add(-life / 3)
	if o.RenewAt.Sub(o.ObtainedAt) < floor {
		o.RenewAt = o.ObtainedAt.Add(floor)
	}
	return o
}

// Keep is what the syncer keeps of a plugin's answer for a demand: the credential scheduled by
// [Schedule] and labelled with the demand. A credential that would not encode is no answer (it
// would block every other credential of its Secret): an error.
func Keep(d Demand, c credentialprovider.Credential, floor time.Duration) (*Obtained, error) {
	if _, err := credentials.Encode(map[string]credentials.AuthEntry{"x": c.Auth}); err != nil {
		return nil, fmt.Errorf("the plugin's credential cannot be written: %w", err)
	}
	o := Schedule(c, floor)
	o.Provider, o.ServiceAccount, o.Image = d.Provider, d.ServiceAccount, d.Image
	o.CacheKeyType, o.ResponseKey = c.CacheKeyType, c.Key
	o.Scope = credentialprovider.CacheScope(c.CacheKeyType, d.Image)
	return &o, nil
}

// pendingMessage says a demand's plugin has not answered yet.
func pendingMessage(d Demand) string {
	return fmt.Sprintf("provider %q has not answered yet for %q", d.Provider, d.Image)
}

// ProviderAnswer is the credential of a provider entry, or why there is none.
type ProviderAnswer struct {
	Auth credentials.AuthEntry
	// OK: Auth is to be used. With OK, a Reason (ProviderRenewalFailed) is a warning: the
	// credential is still valid but could not be renewed. Without OK, the entry is left out.
	OK              bool
	Reason, Message string
}

// ProviderLookup answers Resolve for a provider entry.
type ProviderLookup func(e *Entry) ProviderAnswer
