package credentialprovider

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

// The kubelet's checks of a configuration: its validation, and its plugin binaries.

// validate applies the kubelet's validateCredentialProviderConfig (pkg/credentialprovider/
// plugin/config.go, with the KubeletServiceAccountTokenForCredentialProviders gate on, its
// default since 1.34) to the merged providers, field paths relative to each provider.
func validate(path string, providers []rawProvider) []error {
	var errs []error
	if len(providers) == 0 {
		errs = append(errs, fmt.Errorf("%s: %w", path, field.Required(field.NewPath("providers"), "at least 1 item in plugins is required")))
	}
	for _, p := range providers {
		for _, e := range validateProvider(p) {
			errs = append(errs, fmt.Errorf("%s: providers[%d] %q: %w", p.file, p.index, p.name, e))
		}
	}
	return errs
}

// validateProvider returns the kubelet's errors for one provider; names are checked for
// uniqueness when the files are merged.
func validateProvider(p rawProvider) field.ErrorList {
	var errs field.ErrorList
	name := field.NewPath("name")
	switch p.name {
	case "":
		errs = append(errs, field.Required(name, ""))
	case ".":
		errs = append(errs, field.Invalid(name, p.name, "provider name cannot be '.'"))
	case "..":
		errs = append(errs, field.Invalid(name, p.name, "provider name cannot be '..'"))
	}
	if strings.Contains(p.name, "/") {
		errs = append(errs, field.Invalid(name, p.name, "provider name cannot contain '/'"))
	}
	if strings.Contains(p.name, " ") {
		errs = append(errs, field.Invalid(name, p.name, "provider name cannot contain spaces"))
	}

	apiVersion := field.NewPath("apiVersion")
	if p.apiVersion == "" {
		errs = append(errs, field.Required(apiVersion, ""))
	} else if !slices.Contains(supportedAPIVersions, p.apiVersion) {
		errs = append(errs, field.NotSupported(apiVersion, p.apiVersion, supportedAPIVersions))
	}

	matchImages := field.NewPath("matchImages")
	if len(p.matchImages) == 0 {
		errs = append(errs, field.Required(matchImages, "at least 1 item in matchImages is required"))
	}
	for i, m := range p.matchImages {
		// The kubelet's ParseSchemelessURL: url.Parse of "https://" + the pattern.
		if _, err := url.Parse("https://" + m); err != nil {
			errs = append(errs, field.Invalid(matchImages.Index(i), m, fmt.Sprintf("match image is invalid: %s", err.Error())))
		}
	}

	defaultCacheDuration := field.NewPath("defaultCacheDuration")
	if p.defaultCacheDuration == nil {
		errs = append(errs, field.Required(defaultCacheDuration, ""))
	} else if p.defaultCacheDuration.Duration < 0 {
		errs = append(errs, field.Invalid(defaultCacheDuration, p.defaultCacheDuration.Duration.String(), "must be greater than or equal to 0"))
	}

	if ta := p.tokenAttributes; ta != nil {
		errs = append(errs, validateTokenAttributes(field.NewPath("tokenAttributes"), p.apiVersion, ta)...)
	}
	return errs
}

// validateTokenAttributes is the kubelet's tokenAttributes part of the validation.
func validateTokenAttributes(fld *field.Path, apiVersion string, ta *kubeletconfigv1.ServiceAccountTokenAttributes) field.ErrorList {
	var errs field.ErrorList
	if ta.ServiceAccountTokenAudience == "" {
		errs = append(errs, field.Required(fld.Child("serviceAccountTokenAudience"), ""))
	}
	if ta.RequireServiceAccount == nil {
		errs = append(errs, field.Required(fld.Child("requireServiceAccount"), ""))
	}
	if v1 := credentialproviderv1.SchemeGroupVersion.String(); apiVersion != v1 {
		errs = append(errs, field.Forbidden(fld, fmt.Sprintf("tokenAttributes is only supported for %s API version", v1)))
	}
	if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(fld.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(fld.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(fld.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
	var both []string
	for _, k := range ta.RequiredServiceAccountAnnotationKeys {
		if slices.Contains(ta.OptionalServiceAccountAnnotationKeys, k) && !slices.Contains(both, k) {
			both = append(both, k)
		}
	}
	if len(both) > 0 {
		slices.Sort(both)
		errs = append(errs, field.Invalid(fld, both, "annotation keys cannot be both required and optional"))
	}
	cacheType := fld.Child("cacheType")
	switch {
	case ta.CacheType == "":
		errs = append(errs, field.Required(cacheType, fmt.Sprintf("cacheType is required to be set when tokenAttributes is specified. Supported values are: %s", strings.Join(validCacheTypes, ", "))))
	case slices.Contains(validCacheTypes, string(ta.CacheType)):
	default:
		errs = append(errs, field.NotSupported(cacheType, ta.CacheType, validCacheTypes))
	}
	return errs
}

// validateAnnotationKeys: each key a qualified name (case aside, as annotation keys), no
// duplicate.
func validateAnnotationKeys(fld *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	for i, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(fld.Index(i), k, msg))
		}
		if slices.Contains(keys[:i], k) {
			errs = append(errs, field.Duplicate(fld.Index(i), k))
		}
	}
	return errs
}

// CheckBinDir verifies that every provider's binary is an executable file in binDir, as the
// kubelet does at start (RegisterCredentialProviderPlugins: the directory must exist, and
// exec.LookPath must find binDir/name), and that it is a regular file. Errors wrap
// ErrInvalidConfig and name each provider whose binary is missing or not executable.
func (c *Config) CheckBinDir(binDir string) error {
	if _, err := os.Stat(binDir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: plugin binary directory %s did not exist", ErrInvalidConfig, binDir)
		}
		return fmt.Errorf("%w: error inspecting binary directory %s: %w", ErrInvalidConfig, binDir, err)
	}
	var errs []error
	for i := range c.Providers {
		p := &c.Providers[i]
		bin := filepath.Join(binDir, p.Name)
		if _, err := exec.LookPath(bin); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				errs = append(errs, fmt.Errorf("provider %q: plugin binary executable %s did not exist", p.Name, bin))
			} else {
				errs = append(errs, fmt.Errorf("provider %q: error inspecting binary executable %s: %w", p.Name, bin, err))
			}
			continue
		}
		if info, err := os.Stat(bin); err != nil || !info.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("provider %q: plugin binary executable %s is not a regular file", p.Name, bin))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}
