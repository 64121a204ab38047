package routing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Index holds compiled routing resources. Build it once per change and share it read-only
// across goroutines: nothing in it is written after NewIndex returns, but for a bounded cache
// of parsed images that is safe for concurrent use.
type Index struct {
	root         node
	alternatives []*alternativeResource // by name
	mirrors      []*mirrorResource      // by name, rewritePolicy None left out

	// withDryRun is the index of every resource, the dry-run ones included, when there is a
	// dry-run resource; nil otherwise. This index (the enforcing one) leaves them out.
	withDryRun *Index
	// trial: this is a WithDryRun index; its candidates have Trial set.
	trial bool

	// parsed caches parseImage: the pods of a rollout carry the same images, and parsing is
	// most of a lookup (the reference grammar's regular expressions).
	parsed     sync.Map // string -> imageRef
	parsedSize atomic.Int32
}

// maxParsed bounds the parse cache; past it images are parsed every time (a new Index, built
// on every routing resource change, starts empty).
const maxParsed = 4096

func (ix *Index) parse(image string) (imageRef, error) {
	if ix == nil {
		return parseImage(image)
	}
	if v, ok := ix.parsed.Load(image); ok {
		return v.(imageRef), nil
	}
	ref, err := parseImage(image)
	if err == nil && ix.parsedSize.Load() < maxParsed {
		if _, loaded := ix.parsed.LoadOrStore(image, ref); !loaded {
			ix.parsedSize.Add(1)
		}
	}
	return ref, err
}

// node is one path segment of the trie; the host is the first segment below the root.
type node struct {
	children map[string]*node
	// exact holds the entries whose repository is the path to this node.
	exact []entryRef
	// group holds the entries whose repositoryGroup is the path to this node: they match the
	// repositories one level below.
	group []entryRef
}

type entryRef struct {
	alternative int // index in Index.alternatives
	entry       int // index in spec.alternatives
}

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

// NewIndex compiles the routing resources. An invalid resource is left out and reported with
// an error naming it and its faulty fields; the others are indexed, so that one bad object
// does not stop routing for every pod.
//
// The index enforces: resources with spec.dryRun are left out of it, so they never change what
// it decides. When there are some, [Index.WithDryRun] is the index of every resource, to tell
// what would be decided if they enforced.
func NewIndex(alternatives []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) (*Index, []error) {
	var errs []error
	alts := make([]*v1alpha1.ImageAlternative, len(alternatives))
	for i := range alternatives {
		alts[i] = &alternatives[i]
	}
	slices.SortStableFunc(alts, func(a, b *v1alpha1.ImageAlternative) int { return cmp.Compare(a.Name, b.Name) })
	var compiledAlts []*alternativeResource
	for _, obj := range alts {
		res, err := compileAlternative(obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", KindImageAlternative, obj.Name, err))
			continue
		}
		compiledAlts = append(compiledAlts, res)
	}

	ms := make([]*v1alpha1.ImageMirror, len(mirrors))
	for i := range mirrors {
		ms[i] = &mirrors[i]
	}
	slices.SortStableFunc(ms, func(a, b *v1alpha1.ImageMirror) int { return cmp.Compare(a.Name, b.Name) })
	var compiledMirrors []*mirrorResource
	for _, obj := range ms {
		res, err := compileMirror(obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", KindImageMirror, obj.Name, err))
			continue
		}
		if res.policy == v1alpha1.RewritePolicyNone {
			continue
		}
		compiledMirrors = append(compiledMirrors, res)
	}

	ix := build(compiledAlts, compiledMirrors, false)
	if slices.ContainsFunc(compiledAlts, func(r *alternativeResource) bool { return r.dryRun }) ||
		slices.ContainsFunc(compiledMirrors, func(r *mirrorResource) bool { return r.dryRun }) {
		ix.withDryRun = build(compiledAlts, compiledMirrors, true)
	}
	return ix, errs
}

// build indexes the compiled resources, the dry-run ones only when dryRun. The resources are
// shared between the two indexes and read-only once compiled; rank is the index's own.
func build(alts []*alternativeResource, mirrors []*mirrorResource, dryRun bool) *Index {
	ix := &Index{trial: dryRun}
	for _, res := range alts {
		if res.dryRun && !dryRun {
			continue
		}
		r := *res
		r.rank = len(ix.alternatives)
		ix.add(&r)
	}
	for _, res := range mirrors {
		if res.dryRun && !dryRun {
			continue
		}
		ix.mirrors = append(ix.mirrors, res)
	}
	return ix
}

// WithDryRun is the index of every valid resource, those with spec.dryRun included, or nil
// when no resource is a dry run. Its candidates from dry-run resources have DryRun set.
func (ix *Index) WithDryRun() *Index {
	if ix == nil {
		return nil
	}
	return ix.withDryRun
}

// Len is the number of resources that can route an image: the valid ones, ImageMirrors with
// rewritePolicy None left out.
func (ix *Index) Len() int {
	if ix == nil {
		return 0
	}
	return len(ix.alternatives) + len(ix.mirrors)
}

func (ix *Index) add(res *alternativeResource) {
	ref := entryRef{alternative: len(ix.alternatives)}
	ix.alternatives = append(ix.alternatives, res)
	for j := range res.entries {
		n := &ix.root
		for seg := range strings.SplitSeq(res.entries[j].path, "/") {
			child := n.children[seg]
			if child == nil {
				if n.children == nil {
					n.children = make(map[string]*node)
				}
				child = &node{}
				n.children[seg] = child
			}
			n = child
		}
		ref.entry = j
		if res.group {
			n.group = append(n.group, ref)
		} else {
			n.exact = append(n.exact, ref)
		}
	}
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

// AlternativeAuthPath is the auths key of an ImageAlternative entry in the Secret kuik injects:
// its repository or repositoryGroup as written.
func AlternativeAuthPath(a *v1alpha1.Alternative) string {
	if a.RepositoryGroup != "" {
		return a.RepositoryGroup
	}
	return a.Repository
}

// MirrorAuthPath is the auths key of an ImageMirror in the Secret kuik injects: its
// destination.path without the trailing '/'.
func MirrorAuthPath(d *v1alpha1.MirrorDestination) string {
	return strings.TrimSuffix(d.Path, "/")
}

// AlternativeLookupPath is the registry path an ImageAlternative entry's credential is looked up
// for in its secretRef Secret, by the kubelet's rules: the repository itself, or for a group the
// path with its trailing '/', so that only auths keys matching every repository of the group
// count (a key for one repository below it does not).
func AlternativeLookupPath(a *v1alpha1.Alternative) string {
	if a.RepositoryGroup != "" {
		return withSlash(a.RepositoryGroup)
	}
	return a.Repository
}

// MirrorLookupPath is the registry path an ImageMirror's credential is looked up for in its
// secretRef Secret: destination.path with its trailing '/', so that a key written with the slash
// (registry.tld/mirror/) matches, as it does for the kubelet pulling any image under the mirror.
func MirrorLookupPath(d *v1alpha1.MirrorDestination) string {
	return withSlash(d.Path)
}

func withSlash(p string) string {
	if strings.HasSuffix(p, "/") {
		return p
	}
	return p + "/"
}

// EffectivePolicy is a resource's rewritePolicy, OnFailure when unset (the CRD's default).
func EffectivePolicy(p v1alpha1.RewritePolicy) v1alpha1.RewritePolicy {
	if p == "" {
		return v1alpha1.RewritePolicyOnFailure
	}
	return p
}
