package syncer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

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
	// DryRun is spec.dryRun: the webhook routes no pod to the resource, so it wants no Secret.
	// Its provider credentials are still obtained: the webhook probes with them.
	DryRun bool
	// Entries are every entry in declared order (one for a mirror), injecting or not: the
	// non-injecting ones still tell which entry served a container.
	Entries []Entry

	namespaces labels.Selector // nil selects every namespace
	// index is the resource alone compiled by the routing core, which tells whether a pod's
	// record is one the webhook could have written for this resource ([UsedEntries]).
	index *routing.Index
}

// Source is the value of the kuik.enix.io/rewritten-by annotation naming this resource.
func (r *Resource) Source() routing.Source { return routing.Source{Kind: r.Kind, Name: r.Name} }

// Key identifies the resource among both kinds.
func (r *Resource) Key() ResourceKey { return ResourceKey{Kind: r.Kind, Name: r.Name} }

// SecretName is the name of the resource's pull Secret in every namespace.
func (r *Resource) SecretName() string { return routing.PullSecretName(r.Kind, r.Name) }

// Injecting reports whether at least one entry's credential is to be injected: a resource none
// of whose entries injects writes no Secret, and neither does an ImageMirror whose policy is
// None nor a dry-run resource (whose Secrets, if it enforced before, go as for None).
func (r *Resource) Injecting() bool {
	if r.Policy == v1alpha1.RewritePolicyNone || r.DryRun {
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
	// LookupPath is the path whose credential is read from the secretRef Secret
	// (routing.AlternativeLookupPath, routing.MirrorLookupPath): the same path the webhook
	// probes the entry's candidates with.
	LookupPath string
	// Auth is the entry's credential; nil for anonymous.
	Auth *v1alpha1.Auth
	// Injects is Auth.Injects().
	Injects bool
}

// ErrInvalidResource is wrapped by FromImageAlternative and FromImageMirror for a resource whose
// entries or selectors do not parse; the API server's validation normally keeps them out.
var ErrInvalidResource = errors.New("invalid routing resource")

// newResource reads what both kinds share: identity, policy and namespaceSelector.
func newResource(kind routing.Kind, meta *metav1.ObjectMeta, policy v1alpha1.RewritePolicy, dryRun bool, namespaces *metav1.LabelSelector) (*Resource, error) {
	r := &Resource{
		Kind:       kind,
		Name:       meta.Name,
		UID:        meta.UID,
		Generation: meta.Generation,
		Policy:     routing.EffectivePolicy(policy),
		DryRun:     dryRun,
	}
	var err error
	if r.namespaces, err = routing.CompileSelector(namespaces); err != nil {
		return nil, fmt.Errorf("%w: %s %q: spec.namespaceSelector: %w", ErrInvalidResource, r.Kind, r.Name, err)
	}
	return r, nil
}

// FromImageAlternative reads an ImageAlternative.
func FromImageAlternative(obj *v1alpha1.ImageAlternative) (*Resource, error) {
	r, err := newResource(routing.KindImageAlternative, &obj.ObjectMeta, obj.Spec.RewritePolicy, obj.Spec.DryRun, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	r.Entries = make([]Entry, 0, len(obj.Spec.Alternatives))
	for i := range obj.Spec.Alternatives {
		a := &obj.Spec.Alternatives[i]
		e := Entry{Index: i, Field: fmt.Sprintf("spec.alternatives[%d]", i), Path: routing.AlternativeAuthPath(a), LookupPath: routing.AlternativeLookupPath(a), Auth: a.Auth, Injects: a.Auth.Injects()}
		e.Key = authsKey(e.Path)
		r.Entries = append(r.Entries, e)
	}
	return r, r.compile([]v1alpha1.ImageAlternative{*obj}, nil)
}

// FromImageMirror reads an ImageMirror for the cluster clusterID (valid or empty,
// routing.ValidateClusterID): a record counts only with the mirror tag the webhook of that
// cluster writes (routing.Index.WithClusterID).
func FromImageMirror(obj *v1alpha1.ImageMirror, clusterID string) (*Resource, error) {
	r, err := newResource(routing.KindImageMirror, &obj.ObjectMeta, obj.Spec.RewritePolicy, obj.Spec.DryRun, obj.Spec.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	d := &obj.Spec.Destination
	e := Entry{Field: "spec.destination", Path: routing.MirrorAuthPath(d), LookupPath: routing.MirrorLookupPath(d)}
	if d.Pull != nil {
		e.Auth = d.Pull.Auth
		e.Injects = d.Pull.Auth.Injects()
	}
	e.Key = authsKey(e.Path)
	r.Entries = []Entry{e}
	if err := r.compile(nil, []v1alpha1.ImageMirror{*obj}); err != nil {
		return r, err
	}
	if clusterID != "" {
		r.index = r.index.WithClusterID(clusterID)
	}
	return r, nil
}

// compile builds the resource's routing index, refusing a resource the routing core refuses
// (the webhook routes nothing to it).
func (r *Resource) compile(alternatives []v1alpha1.ImageAlternative, mirrors []v1alpha1.ImageMirror) error {
	ix, errs := routing.NewIndex(alternatives, mirrors)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidResource, errors.Join(errs...))
	}
	r.index = ix
	return nil
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

// recordedKeys returns the auths keys of the injecting entries that explain a container's
// record: the candidates of this resource, for the recorded original image and the pod's and
// namespace's labels, that explain the container's current image (routing.Index.Recorded, the
// webhook's check too: same repository, whatever tag or digest a later webhook pinned;
// several when entries share a path with different credentials). None for a record the webhook could not have
// written for this resource: a namespace or pod it does not select, an image that is no
// candidate of it for that original (the original itself included), a container that does not
// exist, an image that does not parse.
func (r *Resource) recordedKeys(original, current string, podLabels, namespaceLabels labels.Set) []string {
	if r.index == nil || original == "" || current == "" {
		return nil
	}
	var keys []string
	for _, c := range r.index.Recorded(original, current, r.Source(), podLabels, namespaceLabels) {
		if !c.Inject || c.Entry < 0 || c.Entry >= len(r.Entries) {
			continue
		}
		if k := r.Entries[c.Entry].Key; !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}
