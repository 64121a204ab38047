package credentialprovider

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	kubeletconfigv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	credentialproviderv1alpha1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1alpha1"
	credentialproviderv1beta1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1beta1"
)

// Config is a validated CredentialProviderConfig: a file, or every *.json, *.yaml, *.yml file
// of a directory merged in name order, as the kubelet reads --image-credential-provider-config.
type Config struct {
	// Providers in configuration order.
	Providers []Provider
}

// Provider is one validated exec plugin of the configuration.
type Provider struct {
	Name string
	// MatchImages as written; matched with the kubelet's rules ([Provider.Matches]).
	MatchImages []string
	// DefaultCacheDuration applies when a response carries no cacheDuration.
	DefaultCacheDuration time.Duration
	// APIVersion of the exec request and response (credentialprovider.kubelet.k8s.io/v1, v1beta1, v1alpha1).
	APIVersion string
	Args       []string
	// Env as NAME=value, added on top of the process environment.
	Env []string
	// TokenAttributes is nil when the plugin takes no service-account token.
	TokenAttributes *TokenAttributes
	// File is the configuration file the provider was read from.
	File string
}

// TokenAttributes is a provider's tokenAttributes (KEP-4412).
type TokenAttributes struct {
	Audience string
	// CacheType is Token or ServiceAccount.
	CacheType              string
	RequireServiceAccount  bool
	RequiredAnnotationKeys []string
	OptionalAnnotationKeys []string
}

// The tokenAttributes cacheType values.
const (
	// CacheTypeToken caches a plugin's response per service-account token.
	CacheTypeToken = string(kubeletconfigv1.TokenServiceAccountTokenCacheType)
	// CacheTypeServiceAccount caches a plugin's response per ServiceAccount (and annotations).
	CacheTypeServiceAccount = string(kubeletconfigv1.ServiceAccountServiceAccountTokenCacheType)
)

// ErrInvalidConfig is wrapped by every error of [LoadConfig] and [Config.CheckBinDir].
var ErrInvalidConfig = errors.New("invalid credential provider configuration")

// supportedAPIVersions are the exec API versions the kubelet speaks, sorted as the kubelet
// lists them in its error.
var supportedAPIVersions = []string{
	credentialproviderv1.SchemeGroupVersion.String(),
	credentialproviderv1alpha1.SchemeGroupVersion.String(),
	credentialproviderv1beta1.SchemeGroupVersion.String(),
}

// validCacheTypes are the tokenAttributes cacheType values, sorted as the kubelet lists them.
var validCacheTypes = []string{CacheTypeServiceAccount, CacheTypeToken}

// configCodecs decode the published CredentialProviderConfig versions strictly (unknown and
// duplicate fields are errors), as the kubelet's codecs (serializer.EnableStrict) do. The
// kubelet 1.37 registers kubelet.config.k8s.io v1, v1beta1 and v1alpha1 for this kind.
var configCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(kubeletconfigv1.AddToScheme(s))
	utilruntime.Must(kubeletconfigv1beta1.AddToScheme(s))
	utilruntime.Must(kubeletconfigv1alpha1.AddToScheme(s))
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// rawProvider is one provider as decoded, whatever the config version, before validation.
type rawProvider struct {
	file                 string
	index                int // in its file
	name                 string
	matchImages          []string
	defaultCacheDuration *metav1.Duration
	apiVersion           string
	args                 []string
	env                  []string
	tokenAttributes      *kubeletconfigv1.ServiceAccountTokenAttributes
}

// LoadConfig reads and validates a configuration file or directory with the kubelet's rules
// (strict decoding: unknown fields are refused). Errors name the file, the provider and the
// field, with the kubelet's wording. It does not look at the bin dir.
//
// As the kubelet (readCredentialProviderConfig in pkg/credentialprovider/plugin/config.go): a
// directory is read as its *.json, *.yaml and *.yml entries that are not directories, in
// lexicographic order of their names, other entries ignored, none at all an error; the
// providers of every file are concatenated and a name seen twice, in one file or in two, is an
// error. Each file must be a kubelet.config.k8s.io CredentialProviderConfig (v1, v1beta1 or
// v1alpha1). Beyond the kubelet, an empty provider name is refused (the kubelet only fails later,
// looking for its binary).
//
// Errors wrap ErrInvalidConfig; a validation error holds one line per problem, such as
// `/etc/kuik/providers.yaml: providers[1] "ecr": defaultCacheDuration: Required value`.
func LoadConfig(path string) (*Config, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var all []rawProvider
	seen := map[string]rawProvider{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: unable to read file %q: %w", ErrInvalidConfig, f, err)
		}
		providers, err := decodeConfig(data)
		if err != nil {
			return nil, fmt.Errorf("%w: error decoding config %q: %w", ErrInvalidConfig, f, err)
		}
		for i := range providers {
			p := &providers[i]
			p.file, p.index = f, i
			if first, ok := seen[p.name]; ok {
				return nil, fmt.Errorf("%w: %s: providers[%d]: duplicate provider name %q found in configuration file(s) (first at %s: providers[%d])",
					ErrInvalidConfig, f, i, p.name, first.file, first.index)
			}
			seen[p.name] = *p
			all = append(all, *p)
		}
	}
	if errs := validate(path, all); len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalidConfig, errors.Join(errs...))
	}
	cfg := &Config{Providers: make([]Provider, 0, len(all))}
	for _, r := range all {
		p := Provider{
			Name:                 r.name,
			MatchImages:          slices.Clone(r.matchImages),
			DefaultCacheDuration: r.defaultCacheDuration.Duration,
			APIVersion:           r.apiVersion,
			Args:                 slices.Clone(r.args),
			Env:                  slices.Clone(r.env),
			File:                 r.file,
		}
		if ta := r.tokenAttributes; ta != nil {
			p.TokenAttributes = &TokenAttributes{
				Audience:               ta.ServiceAccountTokenAudience,
				CacheType:              string(ta.CacheType),
				RequireServiceAccount:  *ta.RequireServiceAccount,
				RequiredAnnotationKeys: slices.Clone(ta.RequiredServiceAccountAnnotationKeys),
				OptionalAnnotationKeys: slices.Clone(ta.OptionalServiceAccountAnnotationKeys),
			}
		}
		cfg.Providers = append(cfg.Providers, p)
	}
	return cfg, nil
}

// configFiles returns the files to read for a config path, as the kubelet picks them.
func configFiles(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("credential provider config path is empty")
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("unable to access path %q: %w", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("unable to read directory %q: %w", path, err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	slices.Sort(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no configuration files found in directory %q", path)
	}
	return files, nil
}

// decodeConfig decodes one file strictly into its providers.
func decodeConfig(data []byte) ([]rawProvider, error) {
	obj, gvk, err := configCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Kind != "CredentialProviderConfig" {
		return nil, fmt.Errorf("failed to decode %q (wrong Kind)", gvk.Kind)
	}
	if gvk.Group != kubeletconfigv1.GroupName {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group: %s", gvk.Group)
	}
	var out []rawProvider
	switch c := obj.(type) {
	case *kubeletconfigv1.CredentialProviderConfig:
		for _, p := range c.Providers {
			out = append(out, rawProvider{
				name: p.Name, matchImages: p.MatchImages, defaultCacheDuration: p.DefaultCacheDuration,
				apiVersion: p.APIVersion, args: p.Args, env: envOf(p.Env, func(e kubeletconfigv1.ExecEnvVar) (string, string) { return e.Name, e.Value }),
				tokenAttributes: p.TokenAttributes,
			})
		}
	case *kubeletconfigv1beta1.CredentialProviderConfig:
		for _, p := range c.Providers {
			out = append(out, rawProvider{
				name: p.Name, matchImages: p.MatchImages, defaultCacheDuration: p.DefaultCacheDuration,
				apiVersion: p.APIVersion, args: p.Args, env: envOf(p.Env, func(e kubeletconfigv1beta1.ExecEnvVar) (string, string) { return e.Name, e.Value }),
			})
		}
	case *kubeletconfigv1alpha1.CredentialProviderConfig:
		for _, p := range c.Providers {
			out = append(out, rawProvider{
				name: p.Name, matchImages: p.MatchImages, defaultCacheDuration: p.DefaultCacheDuration,
				apiVersion: p.APIVersion, args: p.Args, env: envOf(p.Env, func(e kubeletconfigv1alpha1.ExecEnvVar) (string, string) { return e.Name, e.Value }),
			})
		}
	default:
		return nil, fmt.Errorf("unable to convert %T to *CredentialProviderConfig", obj)
	}
	return out, nil
}

// envOf turns a config's env list into NAME=value strings.
func envOf[E any](env []E, nv func(E) (string, string)) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for _, e := range env {
		n, v := nv(e)
		out = append(out, n+"="+v)
	}
	return out
}

// Provider returns the provider of that name, or nil.
func (c *Config) Provider(name string) *Provider {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

// MatchingAny returns the first provider whose matchImages match the image, or nil.
func (c *Config) MatchingAny(image string) *Provider {
	normalized, err := NormalizeImage(image)
	if err != nil {
		return nil
	}
	for i := range c.Providers {
		if c.Providers[i].matches(normalized) {
			return &c.Providers[i]
		}
	}
	return nil
}
