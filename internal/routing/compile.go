package routing

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// What NewIndex compiles a routing resource into: its band, its selectors' scope, its entries and
// their credentials.

// band is a resource's place relative to the original image.
type band uint8

const (
	bandAlways band = iota
	bandOnFailure
)

func bandOf(p v1alpha1.RewritePolicy) band {
	if p == v1alpha1.RewritePolicyAlways {
		return bandAlways
	}
	return bandOnFailure
}

// scope is what the selectors of a resource let through; a nil selector selects everything,
// which spares the common case a call per lookup.
type scope struct {
	pods       labels.Selector
	namespaces labels.Selector
}

func compileScope(pod, namespace *metav1.LabelSelector) (scope, error) {
	var s scope
	var err error
	if s.pods, err = CompileSelector(pod); err != nil {
		return s, fmt.Errorf("spec.podSelector: %w", err)
	}
	if s.namespaces, err = CompileSelector(namespace); err != nil {
		return s, fmt.Errorf("spec.namespaceSelector: %w", err)
	}
	return s, nil
}

// CompileSelector turns a routing resource's selector into a labels.Selector; nil means every
// object (the API's meaning of an absent or empty selector).
func CompileSelector(sel *metav1.LabelSelector) (labels.Selector, error) {
	// LabelSelectorAsSelector turns nil into Nothing, while the API says nil selects everything.
	if sel == nil || len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(sel)
}

func (s *scope) selects(podLabels, namespaceLabels labels.Set) bool {
	return (s.pods == nil || s.pods.Matches(podLabels)) &&
		(s.namespaces == nil || s.namespaces.Matches(namespaceLabels))
}

// credential is what the list is deduplicated on besides the reference: the same reference
// with two credentials is two candidates, since either may be the only one allowed to pull.
type credential struct {
	secret   string
	provider string
}

func credentialOf(a *v1alpha1.Auth) credential {
	switch {
	case a == nil:
		return credential{}
	case a.SecretRef != nil:
		return credential{secret: a.SecretRef.Name}
	case a.Provider != nil:
		return credential{provider: a.Provider.Name}
	}
	return credential{}
}

type alternativeResource struct {
	name    string
	policy  v1alpha1.RewritePolicy
	dryRun  bool
	pin     bool
	band    band
	rank    int
	scope   scope
	group   bool
	entries []alternativeEntry
}

type alternativeEntry struct {
	path        string // normalized repository, or normalized group path without trailing '/'
	hostLen     int
	authPath    string
	lookupPath  string
	insecure    bool
	unavailable bool
	auth        *v1alpha1.Auth
	cred        credential
}

type mirrorResource struct {
	name       string
	policy     v1alpha1.RewritePolicy
	dryRun     bool
	pin        bool
	band       band
	scope      scope
	dest       string // normalized, without trailing '/'
	hostLen    int
	authPath   string
	lookupPath string
	insecure   bool
	auth       *v1alpha1.Auth
	cred       credential
	excludes   []excludeGlob
}

func compileAlternative(obj *v1alpha1.ImageAlternative) (*alternativeResource, error) {
	if errs := ValidateImageAlternative(obj); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	sc, err := compileScope(obj.Spec.PodSelector, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	res := &alternativeResource{
		name:    obj.Name,
		policy:  EffectivePolicy(obj.Spec.RewritePolicy),
		dryRun:  obj.Spec.DryRun,
		pin:     obj.Spec.PinDigest,
		scope:   sc,
		group:   obj.Spec.Alternatives[0].RepositoryGroup != "",
		entries: make([]alternativeEntry, len(obj.Spec.Alternatives)),
	}
	res.band = bandOf(res.policy)
	for j := range obj.Spec.Alternatives {
		a := &obj.Spec.Alternatives[j]
		e := &res.entries[j]
		e.authPath = AlternativeAuthPath(a)
		e.lookupPath = AlternativeLookupPath(a)
		if res.group {
			e.path, err = groupKind.parse(a.RepositoryGroup)
		} else {
			e.path, err = repositoryKind.parse(a.Repository)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.alternatives[%d]: %w", j, err)
		}
		e.hostLen = domainLen(e.path)
		e.insecure = a.Insecure
		e.unavailable = a.Unavailable
		// The index outlives the informer's object; a copy keeps candidates from aliasing it.
		e.auth = a.Auth.DeepCopy()
		e.cred = credentialOf(e.auth)
	}
	return res, nil
}

func compileMirror(obj *v1alpha1.ImageMirror) (*mirrorResource, error) {
	if errs := ValidateImageMirror(obj); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	sc, err := compileScope(obj.Spec.PodSelector, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	d := &obj.Spec.Destination
	res := &mirrorResource{
		name:       obj.Name,
		policy:     EffectivePolicy(obj.Spec.RewritePolicy),
		dryRun:     obj.Spec.DryRun,
		pin:        obj.Spec.PinDigest,
		scope:      sc,
		authPath:   MirrorAuthPath(d),
		lookupPath: MirrorLookupPath(d),
		insecure:   d.Insecure,
	}
	res.band = bandOf(res.policy)
	if res.dest, err = destinationKind.parse(d.Path); err != nil {
		return nil, fmt.Errorf("spec.destination.path: %w", err)
	}
	res.hostLen = domainLen(res.dest)
	if d.Pull != nil {
		res.auth = d.Pull.Auth.DeepCopy()
	}
	res.cred = credentialOf(res.auth)
	for i, g := range obj.Spec.ExcludeImages {
		eg, err := compileGlob(g)
		if err != nil {
			return nil, fmt.Errorf("spec.excludeImages[%d]: %w", i, err)
		}
		res.excludes = append(res.excludes, eg)
	}
	return res, nil
}
func EffectivePolicy(p v1alpha1.RewritePolicy) v1alpha1.RewritePolicy {
	if p == "" {
		return v1alpha1.RewritePolicyOnFailure
	}
	return p
}
