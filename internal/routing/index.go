package routing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	// clusterID suffixes the tags of mirror candidates ([Index.WithClusterID]); empty for none.
	clusterID string

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

// WithClusterID is a copy of the index whose mirror candidates carry the tags of the cluster
// id ([ClusterTag], [MirrorReferenceFor]), and whose [Index.Recorded] verifies a mirror's record
// against them; its [Index.WithDryRun] too. The copy shares the compiled resources. id must be
// valid ([ValidateClusterID]) or empty: an empty id gives today's names.
func (ix *Index) WithClusterID(id string) *Index {
	if ix == nil {
		return nil
	}
	out := &Index{root: ix.root, alternatives: ix.alternatives, mirrors: ix.mirrors, trial: ix.trial, clusterID: id}
	if ix.withDryRun != nil {
		out.withDryRun = ix.withDryRun.WithClusterID(id)
	}
	return out
}

// ClusterID is the cluster ID of the index's mirror tags; empty for none.
func (ix *Index) ClusterID() string {
	if ix == nil {
		return ""
	}
	return ix.clusterID
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

// EffectivePolicy is a resource's rewritePolicy, OnFailure when unset (the CRD's default).
