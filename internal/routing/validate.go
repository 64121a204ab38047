package routing

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Bounds of the CRD schema, repeated here so that an object that bypassed the schema (an
// older CRD, a test) is refused the same way.
const (
	maxAlternatives  = 32
	maxExcludeImages = 64
	maxGlobLen       = 512
	maxPathLen       = 255
	maxNameLen       = 253
	maxNamespaceLen  = 63
	minRetention     = time.Hour
	maxRetention     = 8760 * time.Hour
)

// hostPortOnly is the CRD's test for a destination.path that is a registry host with a port and
// nothing after it, which would otherwise read as a name with a tag.
var hostPortOnly = regexp.MustCompile(`^[^/@:]*:[0-9]+$`)

const msgHostPortOnly = "a registry host with a port must end with '/' to name its root, e.g. registry.tld:5000/"

// ValidateImageAlternative returns every reason obj cannot be indexed, each with the JSON
// path of the field at fault. It mirrors the CRD's schema and CEL rules and also parses every
// reference, so the webhook and the index agree on what is valid.
func ValidateImageAlternative(obj *v1alpha1.ImageAlternative) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, validateSelector(obj.Spec.PodSelector, spec.Child("podSelector"))...)
	errs = append(errs, validateSelector(obj.Spec.NamespaceSelector, spec.Child("namespaceSelector"))...)

	switch p := obj.Spec.RewritePolicy; p {
	case "", v1alpha1.RewritePolicyAlways, v1alpha1.RewritePolicyOnFailure:
	case v1alpha1.RewritePolicyNone:
		errs = append(errs, field.Invalid(spec.Child("rewritePolicy"), p, "None is only valid for ImageMirror"))
	default:
		errs = append(errs, field.NotSupported(spec.Child("rewritePolicy"), p,
			[]v1alpha1.RewritePolicy{v1alpha1.RewritePolicyAlways, v1alpha1.RewritePolicyOnFailure}))
	}

	altsPath := spec.Child("alternatives")
	alts := obj.Spec.Alternatives
	switch {
	case len(alts) == 0:
		errs = append(errs, field.Required(altsPath, "at least one entry is required"))
	case len(alts) > maxAlternatives:
		errs = append(errs, field.TooMany(altsPath, len(alts), maxAlternatives))
	}

	// The first entry that names exactly one form sets the form of the list.
	firstForm := -1
	for i := range alts {
		a := &alts[i]
		p := altsPath.Index(i)
		hasRepo, hasGroup := a.Repository != "", a.RepositoryGroup != ""
		switch {
		case hasRepo && hasGroup:
			errs = append(errs, field.Forbidden(p, "exactly one of repository or repositoryGroup must be set, not both"))
		case !hasRepo && !hasGroup:
			errs = append(errs, field.Required(p, "exactly one of repository or repositoryGroup must be set"))
		case firstForm < 0:
			firstForm = i
		case (alts[firstForm].Repository != "") != hasRepo:
			errs = append(errs, field.Invalid(p.Child(formName(hasRepo)), formValue(a),
				fmt.Sprintf("every entry must use the same form: %s uses %s",
					altsPath.Index(firstForm), formName(!hasRepo))))
		}
		if hasRepo {
			errs = append(errs, validateReference(a.Repository, p.Child("repository"), repositoryKind)...)
		}
		if hasGroup {
			errs = append(errs, validateReference(a.RepositoryGroup, p.Child("repositoryGroup"), groupKind)...)
		}
		errs = append(errs, validateAuth(a.Auth, p.Child("auth"))...)
	}
	return errs
}

// ValidateImageMirror is ValidateImageAlternative for an ImageMirror.
func ValidateImageMirror(obj *v1alpha1.ImageMirror) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, validateSelector(obj.Spec.PodSelector, spec.Child("podSelector"))...)
	errs = append(errs, validateSelector(obj.Spec.NamespaceSelector, spec.Child("namespaceSelector"))...)

	switch p := obj.Spec.RewritePolicy; p {
	case "", v1alpha1.RewritePolicyAlways, v1alpha1.RewritePolicyOnFailure, v1alpha1.RewritePolicyNone:
	default:
		errs = append(errs, field.NotSupported(spec.Child("rewritePolicy"), p,
			[]v1alpha1.RewritePolicy{v1alpha1.RewritePolicyAlways, v1alpha1.RewritePolicyOnFailure, v1alpha1.RewritePolicyNone}))
	}

	excl := spec.Child("excludeImages")
	if len(obj.Spec.ExcludeImages) > maxExcludeImages {
		errs = append(errs, field.TooMany(excl, len(obj.Spec.ExcludeImages), maxExcludeImages))
	}
	seen := make(map[string]bool, len(obj.Spec.ExcludeImages))
	for i, g := range obj.Spec.ExcludeImages {
		p := excl.Index(i)
		switch {
		case g == "":
			errs = append(errs, field.Required(p, "a glob must not be empty"))
			continue
		case len(g) > maxGlobLen:
			errs = append(errs, field.TooLong(p, g, maxGlobLen))
		case seen[g]:
			errs = append(errs, field.Duplicate(p, g))
		}
		seen[g] = true
		for _, err := range checkGlob(g) {
			errs = append(errs, field.Invalid(p, g, err.Error()))
		}
	}

	dest := spec.Child("destination")
	switch path := obj.Spec.Destination.Path; {
	case path == "":
		errs = append(errs, field.Required(dest.Child("path"), "the mirror's registry path is required"))
	case hostPortOnly.MatchString(path):
		errs = append(errs, field.Invalid(dest.Child("path"), path, msgHostPortOnly))
	default:
		errs = append(errs, validateReference(path, dest.Child("path"), destinationKind)...)
	}
	if pull := obj.Spec.Destination.Pull; pull != nil {
		errs = append(errs, validateAuth(pull.Auth, dest.Child("pull", "auth"))...)
	}
	if keep := obj.Spec.Keep; keep != nil {
		errs = append(errs, validateKeep(keep, spec.Child("keep"))...)
	}
	return errs
}

// validateKeep checks spec.keep. A destination the mirror cannot name an image under is no
// error here: that depends on the image, and the keeper reports it in status.
func validateKeep(k *v1alpha1.MirrorKeep, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if k.Push != nil && k.Push.Auth != nil {
		p := p.Child("push", "auth", "secretRef", "name")
		errs = append(errs, validateName(k.Push.Auth.SecretRef.Name, p, maxNameLen, validation.IsDNS1123Subdomain)...)
	}
	if r := k.Retention; r != nil && (r.Duration < minRetention || r.Duration > maxRetention) {
		errs = append(errs, field.Invalid(p.Child("retention"), r.Duration.String(), "must be from 1h to 8760h"))
	}
	switch ps := k.PrivateSources; ps {
	case "", v1alpha1.PrivateSourcesDeny, v1alpha1.PrivateSourcesAllow:
	default:
		errs = append(errs, field.NotSupported(p.Child("privateSources"), ps,
			[]v1alpha1.PrivateSourcesPolicy{v1alpha1.PrivateSourcesDeny, v1alpha1.PrivateSourcesAllow}))
	}
	return errs
}

func validateReference(s string, p *field.Path, kind pathKind) field.ErrorList {
	if len(s) > maxPathLen {
		return field.ErrorList{field.TooLong(p, s, maxPathLen)}
	}
	if _, err := kind.parse(s); err != nil {
		return field.ErrorList{field.Invalid(p, s, err.Error())}
	}
	return nil
}

func validateSelector(sel *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, p)
	if len(errs) == 0 {
		// The conversion the index does must not fail where the validation passed.
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, field.Invalid(p, sel.String(), err.Error()))
		}
	}
	return errs
}

func validateAuth(a *v1alpha1.Auth, p *field.Path) field.ErrorList {
	if a == nil {
		return nil
	}
	var errs field.ErrorList
	switch {
	case a.SecretRef != nil && a.Provider != nil:
		errs = append(errs, field.Forbidden(p, "exactly one of secretRef or provider must be set, not both"))
	case a.SecretRef == nil && a.Provider == nil:
		errs = append(errs, field.Required(p, "exactly one of secretRef or provider must be set"))
	}
	if a.SecretRef != nil {
		errs = append(errs, validateName(a.SecretRef.Name, p.Child("secretRef", "name"), maxNameLen, validation.IsDNS1123Subdomain)...)
	}
	if a.Provider != nil {
		pp := p.Child("provider")
		// A provider is named by the kubelet's configuration, under its own rules.
		errs = append(errs, validateName(a.Provider.Name, pp.Child("name"), maxNameLen, nil)...)
		if sa := a.Provider.ServiceAccountRef; sa != nil {
			sp := pp.Child("serviceAccountRef")
			errs = append(errs, validateName(sa.Namespace, sp.Child("namespace"), maxNamespaceLen, validation.IsDNS1123Label)...)
			errs = append(errs, validateName(sa.Name, sp.Child("name"), maxNameLen, validation.IsDNS1123Subdomain)...)
		}
	}
	return errs
}

// validateName checks an object name: not empty, at most maxLen bytes and, when valid is set,
// a name the API server would give an object (a Secret, a ServiceAccount, a namespace), so a
// reference that can never resolve is refused at admission instead of failing later.
func validateName(s string, p *field.Path, maxLen int, valid func(string) []string) field.ErrorList {
	switch {
	case s == "":
		return field.ErrorList{field.Required(p, "must not be empty")}
	case len(s) > maxLen:
		return field.ErrorList{field.TooLong(p, s, maxLen)}
	}
	if valid != nil {
		if msgs := valid(s); len(msgs) > 0 {
			return field.ErrorList{field.Invalid(p, s, strings.Join(msgs, "; "))}
		}
	}
	return nil
}

func formName(repository bool) string {
	if repository {
		return "repository"
	}
	return "repositoryGroup"
}

func formValue(a *v1alpha1.Alternative) string {
	if a.Repository != "" {
		return a.Repository
	}
	return a.RepositoryGroup
}
