package credentialprovider

import (
	"strings"
	"time"

	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
)

// globalCacheKey is the base key of Global responses; the angle brackets keep it apart from any
// image or registry, as the kubelet's.
const globalCacheKey = "<global>"

// cacheKey is where a response is cached: per provider, per base key (the image for Image, its
// registry host for Registry, globalCacheKey for Global) and per service-account identity.
type cacheKey struct {
	provider, base, identity string
}

// baseKey is the base cache key of a response of that cacheKeyType for the image.
func baseKey(cacheKeyType, image string) string {
	switch credentialproviderapi.PluginCacheKeyType(cacheKeyType) {
	case credentialproviderapi.RegistryPluginCacheKeyType:
		return registryOf(image)
	case credentialproviderapi.GlobalPluginCacheKeyType:
		return globalCacheKey
	default:
		return image
	}
}

// CacheScope is the part of the kubelet's cache key that a response of that cacheKeyType for
// the normalized image shares with other images: the registry host for Registry, "<global>" for
// Global, and "" for Image (the response serves that image only). Two images whose scopes for a
// response's cacheKeyType are equal and not empty are served by the same cached response.
func CacheScope(cacheKeyType, image string) string {
	switch credentialproviderapi.PluginCacheKeyType(cacheKeyType) {
	case credentialproviderapi.RegistryPluginCacheKeyType, credentialproviderapi.GlobalPluginCacheKeyType:
		return baseKey(cacheKeyType, image)
	default:
		return ""
	}
}

// registryOf is the registry host of a normalized image, as the kubelet's parseRegistry.
func registryOf(normalized string) string {
	host, _, _ := strings.Cut(normalized, "/")
	return host
}

// lookupLocked returns the cached response serving the image, looked up as the kubelet does:
// the image's entry, then its registry's, then the global one. An entry must be unexpired and
// valid for at least minValidity. p.mu is held.
func (p *Plugins) lookupLocked(provider, image, identity string, minValidity time.Duration) *response {
	now := p.opts.Now()
	for _, base := range []string{image, registryOf(image), globalCacheKey} {
		resp, ok := p.cache[cacheKey{provider: provider, base: base, identity: identity}]
		if !ok {
			continue
		}
		if left := resp.expiresAt.Sub(now); left > 0 && left >= minValidity {
			return resp
		}
	}
	return nil
}

// storeLocked caches a response under its cacheKeyType's key for the image, and drops the
// expired entries. p.mu is held.
func (p *Plugins) storeLocked(provider, image, identity string, resp *response) {
	now := p.opts.Now()
	for k, r := range p.cache {
		if !r.expiresAt.After(now) {
			delete(p.cache, k)
		}
	}
	p.cache[cacheKey{provider: provider, base: baseKey(resp.cacheKeyType, image), identity: identity}] = resp
}
