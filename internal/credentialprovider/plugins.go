package credentialprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/enix/kuik/internal/credentials"
)

// Request is one credential request.
type Request struct {
	// Image is the image (or repository) the credential is for; the plugin is sent it without
	// tag or digest ([NormalizeImage]).
	Image string
	// ServiceAccount identifies the token's ServiceAccount for the cache (namespace/name/uid);
	// empty without a token.
	ServiceAccount string
	// ServiceAccountToken and ServiceAccountAnnotations are passed to a plugin with
	// tokenAttributes (and ignored for one without). ServiceAccountAnnotations may hold all the
	// ServiceAccount's annotations: as the kubelet, only the provider's required and optional
	// keys are passed, and a missing required key fails the request without running the plugin
	// ([ErrRequiredAnnotationMissing]).
	ServiceAccountToken       string
	ServiceAccountAnnotations map[string]string
	// MinValidity: a cached response valid for less than this is not reused (the plugin runs
	// again); 0 reuses any unexpired response. A fresh response is returned whatever its
	// validity.
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
	// not to cache it (cacheDuration 0, or no cacheDuration and a default of 0).
	ObtainedAt, ExpiresAt time.Time
	// CacheKeyType is the response's (Image, Registry, Global).
	CacheKeyType string
	// FromCache is true when no plugin ran for this call.
	FromCache bool
}

// The results passed to [Options.Observe].
const (
	ResultSuccess         = "success"
	ResultError           = "error"
	ResultTimeout         = "timeout"
	ResultInvalidResponse = "invalid-response"
)

// DefaultTimeout is the kubelet's timeout of one plugin exec.
const DefaultTimeout = time.Minute

// Options tune [Plugins].
type Options struct {
	// Timeout of one exec (default [DefaultTimeout], the kubelet's).
	Timeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Observe, when set, is called after each exec with the provider, the result
	// ([ResultSuccess], [ResultError], [ResultTimeout], [ResultInvalidResponse]) and the exec's
	// duration.
	Observe func(provider, result string, d time.Duration)
}

var (
	// ErrNotMatched is returned (wrapped) when the provider's matchImages do not match the
	// image: no plugin ran.
	ErrNotMatched = errors.New("the provider's matchImages do not match the image")
	// ErrUnknownProvider is returned (wrapped) for a provider name the configuration lacks.
	ErrUnknownProvider = errors.New("no such provider in the credential provider configuration")
	// ErrServiceAccountRequired is returned (wrapped) when the provider's tokenAttributes
	// require a service account and the request has no token: no plugin ran.
	ErrServiceAccountRequired = errors.New("the provider requires a service account token")
	// ErrRequiredAnnotationMissing is returned (wrapped) when the ServiceAccount lacks an
	// annotation the provider's tokenAttributes require: no plugin ran.
	ErrRequiredAnnotationMissing = errors.New("the service account lacks an annotation the provider requires")
	// ErrInvalidResponse is returned (wrapped) when the plugin's stdout is not a valid
	// CredentialProviderResponse of the request's apiVersion.
	ErrInvalidResponse = errors.New("invalid credential provider response")
	// ErrNoCredential is returned (wrapped, with credentials.ErrNoCredentialForPath) when the
	// response's auth map gives no credential for the image.
	ErrNoCredential = errors.New("the provider's response holds no credential for the image")
)

// Plugins runs the configured exec plugins, caching their responses per cacheKeyType and
// collapsing identical concurrent requests into one exec. It is safe for concurrent use.
type Plugins struct {
	cfg    *Config
	binDir string
	opts   Options

	mu      sync.Mutex
	cache   map[cacheKey]*response
	flights map[flightKey]*flight
}

// NewPlugins runs the plugins of cfg from binDir.
func NewPlugins(cfg *Config, binDir string, opts Options) *Plugins {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Plugins{
		cfg:     cfg,
		binDir:  binDir,
		opts:    opts,
		cache:   map[cacheKey]*response{},
		flights: map[flightKey]*flight{},
	}
}

// Config returns the configuration.
func (p *Plugins) Config() *Config { return p.cfg }

// response is a plugin's decoded answer, as cached.
type response struct {
	auth         *credentials.DockerConfig
	cacheKeyType string
	obtainedAt   time.Time
	expiresAt    time.Time // zero: not cached
}

// flightKey identifies identical requests: the same provider, image, token and annotations.
type flightKey struct {
	provider, image, identity string
}

// flight is one exec that identical requests wait for.
type flight struct {
	done    chan struct{}
	resp    *response
	err     error
	waiters int
	cancel  context.CancelFunc
}

// Get returns the credential the named provider gives for the image. The plugin runs only when
// its matchImages match the image and no cached response serves it: the cache is looked up as
// the kubelet's, for the image, then its registry, then the provider's global entry, each
// unexpired and valid for at least req.MinValidity, within the same service-account identity
// (the ServiceAccount and the passed annotations, plus the token itself with cacheType Token).
// Identical concurrent requests share one exec; the exec is stopped when every caller waiting
// for it has given up (its context done) or after the timeout.
//
// A failed run is a [PluginError] (its message holds the redacted first line of the plugin's
// stderr, never its stdout; its Stderr field the rest, for logs); errors wrap ErrNotMatched,
// ErrUnknownProvider, ErrServiceAccountRequired, ErrRequiredAnnotationMissing,
// ErrInvalidResponse, ErrNoCredential, or context.DeadlineExceeded for a timeout.
func (p *Plugins) Get(ctx context.Context, provider string, req Request) (Credential, error) {
	prov := p.cfg.Provider(provider)
	if prov == nil {
		return Credential{}, fmt.Errorf("credential provider %q: %w", provider, ErrUnknownProvider)
	}
	image, err := NormalizeImage(req.Image)
	if err != nil {
		return Credential{}, fmt.Errorf("credential provider %q: %w", provider, err)
	}
	fail := func(err error) (Credential, error) {
		return Credential{}, fmt.Errorf("credential provider %q, image %q: %w", provider, image, err)
	}
	if !prov.matches(image) {
		return fail(ErrNotMatched)
	}
	call := execRequest{image: image}
	identity := ""
	if ta := prov.TokenAttributes; ta != nil {
		switch {
		case req.ServiceAccountToken != "":
			annotations, err := prov.ServiceAccountAnnotations(req.ServiceAccountAnnotations)
			if err != nil {
				return fail(err)
			}
			call.token, call.annotations = req.ServiceAccountToken, annotations
			identity = serviceAccountIdentity(req.ServiceAccount, annotations, req.ServiceAccountToken, ta.CacheType)
		case ta.RequireServiceAccount:
			return fail(ErrServiceAccountRequired)
		}
	}

	fk := flightKey{provider: provider, image: image, identity: identity}
	if identity != "" {
		// Identical means the same token too, whatever the cacheType, as the kubelet's
		// singleflight key.
		fk.identity += "\x00" + hashOf(call.token)
	}
	p.mu.Lock()
	if resp := p.lookupLocked(provider, image, identity, req.MinValidity); resp != nil {
		p.mu.Unlock()
		return p.credential(prov, image, resp, true, fail)
	}
	f, ok := p.flights[fk]
	if !ok {
		f = &flight{done: make(chan struct{})}
		var execCtx context.Context
		// The exec outlives the caller that started it as long as another waits for it.
		execCtx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
		p.flights[fk] = f
		go p.fly(execCtx, prov, call, identity, fk, f)
	}
	f.waiters++
	p.mu.Unlock()

	select {
	case <-f.done:
		if f.err != nil {
			return fail(f.err)
		}
		return p.credential(prov, image, f.resp, false, fail)
	case <-ctx.Done():
		p.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if p.flights[fk] == f {
				delete(p.flights, fk)
			}
		}
		p.mu.Unlock()
		return fail(fmt.Errorf("waiting for the plugin: %w", ctx.Err()))
	}
}

// fly runs one exec for a flight, caches its response and releases the waiters.
func (p *Plugins) fly(ctx context.Context, prov *Provider, call execRequest, identity string, fk flightKey, f *flight) {
	defer f.cancel()
	resp, err := p.exec(ctx, prov, call)
	p.mu.Lock()
	if err == nil && !resp.expiresAt.IsZero() {
		p.storeLocked(prov.Name, call.image, identity, resp)
	}
	if p.flights[fk] == f {
		delete(p.flights, fk)
	}
	f.resp, f.err = resp, err
	p.mu.Unlock()
	close(f.done)
}

// credential chooses the image's credential from a response.
func (p *Plugins) credential(prov *Provider, image string, resp *response, fromCache bool, fail func(error) (Credential, error)) (Credential, error) {
	auth, key, err := resp.auth.Lookup(image)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrNoCredential, err))
	}
	return Credential{
		Auth:         auth,
		Key:          key,
		ObtainedAt:   resp.obtainedAt,
		ExpiresAt:    resp.expiresAt,
		CacheKeyType: resp.cacheKeyType,
		FromCache:    fromCache,
	}, nil
}

// ServiceAccountAnnotations returns the annotations of a ServiceAccount that the provider's
// tokenAttributes ask for, as the kubelet extracts them: every required key (an error wrapping
// ErrRequiredAnnotationMissing when one is absent) and the optional keys present. It returns
// nil for a provider without tokenAttributes.
func (p *Provider) ServiceAccountAnnotations(all map[string]string) (map[string]string, error) {
	ta := p.TokenAttributes
	if ta == nil {
		return nil, nil
	}
	out := make(map[string]string, len(ta.RequiredAnnotationKeys)+len(ta.OptionalAnnotationKeys))
	for _, k := range ta.RequiredAnnotationKeys {
		v, ok := all[k]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrRequiredAnnotationMissing, k)
		}
		out[k] = v
	}
	for _, k := range ta.OptionalAnnotationKeys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// serviceAccountIdentity is the service-account part of a cache key, as the kubelet's
// generateServiceAccountCacheKey: the ServiceAccount, the annotations passed, and with
// cacheType Token a hash of the token.
func serviceAccountIdentity(serviceAccount string, annotations map[string]string, token, cacheType string) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(serviceAccount))
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		b.WriteString(" " + strconv.Quote(k) + "=" + strconv.Quote(annotations[k]))
	}
	if cacheType == CacheTypeToken {
		b.WriteString(" token=" + hashOf(token))
	}
	return b.String()
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
