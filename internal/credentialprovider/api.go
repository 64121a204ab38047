package credentialprovider

// API CONTRACT (temporary file, written by the lead so that the webhook, the syncer and the
// chart can be built in parallel). The helper owning this package replaces the bodies, splits
// the file as it sees fit (config.go, exec.go, cache.go, match.go) and deletes this banner; the
// exported names and their meaning stay.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Request is one credential request.
type Request struct {
	// Image is the image (or repository) the credential is for; the plugin is sent it without
	// tag or digest.
	Image string
	// ServiceAccount identifies the token's ServiceAccount for the cache (namespace/name/uid);
	// empty without a token.
	ServiceAccount string
	// ServiceAccountToken and ServiceAccountAnnotations are passed to a plugin with tokenAttributes.
	ServiceAccountToken       string
	ServiceAccountAnnotations map[string]string
	// MinValidity: a cached response valid for less than this is not reused (the plugin runs
	// again); 0 reuses any unexpired response.
	MinValidity time.Duration
}

// Credential is what a plugin gave for an image.
type Credential struct {
	// Auth is the credential chosen from the response's auth map by the kubelet's rules (the
	// most specific key matching the image).
	Auth credentials.AuthEntry
	// Key is the auth map key it came from.
	Key string
	// ObtainedAt is when the plugin answered; ExpiresAt is ObtainedAt + the cache duration
	// (the response's, else the provider's default); a zero ExpiresAt means the plugin asked
	// not to cache it (cacheDuration 0).
	ObtainedAt, ExpiresAt time.Time
	// CacheKeyType is the response's (Image, Registry, Global).
	CacheKeyType string
	// FromCache is true when no plugin ran for this call.
	FromCache bool
}

// Options tune [Plugins].
type Options struct {
	// Timeout of one exec (default 1 minute, the kubelet's).
	Timeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Observe, when set, is called after each exec with the provider, the result ("success",
	// "error", "timeout", "invalid-response") and the exec's duration.
	Observe func(provider, result string, d time.Duration)
}

// Plugins runs the configured exec plugins, caching their responses per cacheKeyType and
// collapsing identical concurrent requests into one exec.
type Plugins struct{}

// NewPlugins runs the plugins of cfg from binDir.
func NewPlugins(cfg *Config, binDir string, opts Options) *Plugins { return &Plugins{} }

// Config returns the configuration.
func (p *Plugins) Config() *Config { return nil }

// ErrNotMatched is returned (wrapped) when the provider's matchImages do not match the image:
// no plugin ran.
var ErrNotMatched = errors.New("the provider's matchImages do not match the image")

// ErrUnknownProvider is returned (wrapped) for a provider name the configuration lacks.
var ErrUnknownProvider = errors.New("no such provider in the credential provider configuration")

// Get returns the credential the named provider gives for the image. Errors carry the plugin's
// stderr (never its stdout) and wrap ErrNotMatched, ErrUnknownProvider, or
// context.DeadlineExceeded for a timeout.
func (p *Plugins) Get(ctx context.Context, provider string, req Request) (Credential, error) {
	return Credential{}, errors.New("not implemented")
}

// SecretName is the kuik-provider-* Secret in the cluster resource namespace where the
// secret-syncer keeps the credentials a provider gave (for one ServiceAccount, when sa is set):
// kuik-provider-<provider lower-cased, reduced to DNS-1123 characters, cut>-<8 hex digits of a
// hash of the provider name and the ServiceAccount's namespace/name>.
func SecretName(provider string, sa *v1alpha1.ServiceAccountReference) string {
	h := sha256.New()
	h.Write([]byte(provider))
	if sa != nil {
		h.Write([]byte{0})
		h.Write([]byte(sa.Namespace + "/" + sa.Name))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:8]
	var b strings.Builder
	for _, r := range strings.ToLower(provider) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	// kuik-provider- (14) + 40 + - + 8 stays well under 63, so the name is also a valid label value.
	base := strings.Trim(b.String(), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	if base == "" {
		return v1alpha1.ProviderSecretPrefix + sum
	}
	return v1alpha1.ProviderSecretPrefix + base + "-" + sum
}
