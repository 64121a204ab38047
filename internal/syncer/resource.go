package syncer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Resource is what the syncer reads of a routing resource: its identity (for the Secret's name
// and ownerReference), its policy and scope, and its entries. Build it with [FromImageAlternative]
// or [FromImageMirror]; it is read-only afterwards.
type Resource struct {
	Kind       routing.Kind
	Name       string
	UID        types.UID
	Generation int64
	// Policy is the rewritePolicy, defaulted to OnFailure.
	Policy v1alpha1.RewritePolicy
	// Entries are every entry in declared order (one for a mirror), injecting or not: the
	// non-injecting ones still tell which entry served a container.
	Entries []Entry

	namespaces labels.Selector // nil selects every namespace
}

// Source is the value of the kuik.enix.io/rewritten-by annotation naming this resource.
func (r *Resource) Source() routing.Source { return routing.Source{Kind: r.Kind, Name: r.Name} }

// Key identifies the resource among both kinds.
func (r *Resource) Key() ResourceKey { return ResourceKey{Kind: r.Kind, Name: r.Name} }

// SecretName is the name of the resource's pull Secret in every namespace.
func (r *Resource) SecretName() string { return routing.PullSecretName(r.Kind, r.Name) }

// Injecting reports whether at least one entry's credential is to be injected: a resource none
// of whose entries injects writes no Secret, and neither does an ImageMirror whose policy is None.
func (r *Resource) Injecting() bool {
	if r.Policy == v1alpha1.RewritePolicyNone {
		return false
	}
	for i := range r.Entries {
		if r.Entries[i].Injects {
			return true
		}
	}
	return false
}

// SelectsNamespace reports whether the namespaceSelector selects a namespace with these labels.
// An absent or empty selector selects every namespace; podSelector never narrows it.
func (r *Resource) SelectsNamespace(nsLabels labels.Set) bool {
	return r.namespaces == nil || r.namespaces.Matches(nsLabels)
}

// ResourceKey names a routing resource of either kind.
type ResourceKey struct {
	Kind routing.Kind
	Name string
}

func (k ResourceKey) String() string { return string(k.Kind) + "/" + k.Name }

// entryForm is how an entry matches the image a container was rewritten to.
type entryForm uint8

const (
	formRepository entryForm = iota // the image's repository is the entry
	formGroup                       // the image's repository is one level below the entry
	formMirror                      // the image's repository is anywhere below the entry
)

// Entry is one alternative, or a mirror's destination.
type Entry struct {
	// Index in spec.alternatives (0 for a mirror).
	Index int
	// Field is the JSON path of the entry, for reports: spec.alternatives[1] or spec.destination.
	Field string
	// Path is the registry path as written: repository, repositoryGroup, or destination.path
	// without its trailing '/'.
	Path string
	// Key is the auths key written for the entry: Path, unless the kubelet would not read Path
	// as the same registry path (a Docker Hub short form such as nginx or acme/foo, whose first
	// segment it would take for a host), in which case the normalized path
	// (docker.io/library/nginx).
	Key string
	// Auth is the entry's credential; nil for anonymous.
	Auth *v1alpha1.Auth
	// Injects is Auth.Injects().
	Injects bool

	form entryForm
	name string // normalized repository name or path, no trailing '/'
}

// ErrInvalidResource is wrapped by FromImageAlternative and FromImageMirror for a resource whose
// entries or selectors do not parse; the API server's validation normally keeps them out.
var ErrInvalidResource = errors.New("invalid routing resource")

// newResource reads what both kinds share: identity, policy and namespaceSelector.
func newResource(kind routing.Kind, meta *metav1.ObjectMeta, policy v1alpha1.RewritePolicy, namespaces *metav1.LabelSelector) (*Resource, error) {
	r := &Resource{
		Kind:       kind,
		Name:       meta.Name,
		UID:        meta.UID,
		Generation: meta.Generation,
		Policy:     routing.EffectivePolicy(policy),
	}
	var err error
	if r.namespaces, err = routing.CompileSelector(namespaces); err != nil {
		return nil, fmt.Errorf("%w: %s %q: spec.namespaceSelector: %w", ErrInvalidResource, r.Kind, r.Name, err)
	}
	return r, nil
}

// FromImageAlternative reads an ImageAlternative.
func FromImageAlternative(obj *v1alpha1.ImageAlternative) (*Resource, error) {
	r, err := newResource(routing.KindImageAlternative, &obj.ObjectMeta, obj.Spec.RewritePolicy, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	r.Entries = make([]Entry, 0, len(obj.Spec.Alternatives))
	for i := range obj.Spec.Alternatives {
		a := &obj.Spec.Alternatives[i]
		e := Entry{Index: i, Field: fmt.Sprintf("spec.alternatives[%d]", i), Path: routing.AlternativeAuthPath(a), Auth: a.Auth, Injects: a.Auth.Injects()}
		switch {
		case a.Repository != "":
			e.form = formRepository
			e.name, err = routing.NormalizeRepository(a.Repository)
		case a.RepositoryGroup != "":
			e.form = formGroup
			e.name, err = routing.NormalizeGroup(a.RepositoryGroup)
		default:
			err = errors.New("neither repository nor repositoryGroup is set")
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %s: %w", ErrInvalidResource, r.Kind, r.Name, e.Field, err)
		}
		e.Key = authsKey(e.Path)
		r.Entries = append(r.Entries, e)
	}
	return r, nil
}

// FromImageMirror reads an ImageMirror.
func FromImageMirror(obj *v1alpha1.ImageMirror) (*Resource, error) {
	r, err := newResource(routing.KindImageMirror, &obj.ObjectMeta, obj.Spec.RewritePolicy, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	d := &obj.Spec.Destination
	e := Entry{Field: "spec.destination", Path: routing.MirrorAuthPath(d), form: formMirror}
	if d.Pull != nil {
		e.Auth = d.Pull.Auth
		e.Injects = d.Pull.Auth.Injects()
	}
	if e.name, err = routing.NormalizeDestination(d.Path); err != nil {
		return nil, fmt.Errorf("%w: %s %q: spec.destination.path: %w", ErrInvalidResource, r.Kind, r.Name, err)
	}
	e.Key = authsKey(e.Path)
	r.Entries = []Entry{e}
	return r, nil
}

// authsKey is the auths key of an entry path: as written when the kubelet reads it as the same
// registry path, the normalized path otherwise (the kubelet takes the first segment of a key
// for a host, so the key acme/foo would never match the image docker.io/acme/foo).
func authsKey(path string) string {
	normalized, err := credentials.NormalizePath(path)
	if err != nil {
		return path
	}
	if strings.TrimSuffix(normalized, "/") == strings.TrimSuffix(path, "/") {
		return path
	}
	return normalized
}

// servedBy returns the entries of the resource that an image (a container's current, rewritten
// image) is pulled from, matching structurally by path segment: a repository entry is the
// image's repository, a group entry its parent, a mirror's destination one of its ancestors.
// Usually one entry; several when entries share a path.
func (r *Resource) servedBy(image string) []*Entry {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	name := named.Name()
	parent := name[:max(strings.LastIndexByte(name, '/'), 0)]
	var out []*Entry
	for i := range r.Entries {
		e := &r.Entries[i]
		var match bool
		switch e.form {
		case formRepository:
			match = name == e.name
		case formGroup:
			match = parent == e.name
		case formMirror:
			match = strings.HasPrefix(name, e.name) && len(name) > len(e.name) && name[len(e.name)] == '/'
		}
		if match {
			out = append(out, e)
		}
	}
	return out
}
