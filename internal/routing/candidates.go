package routing

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Candidate is one image a container may be pulled from.
type Candidate struct {
	// Reference is fully normalized, e.g. docker.io/library/nginx:latest; the tag and the digest
	// of the pod's image are both kept when both are given.
	Reference string
	Source    Source
	// Policy is the band the candidate came from; empty for the original.
	Policy v1alpha1.RewritePolicy
	// Entry is the index in spec.alternatives (0 for a mirror); -1 for the original, unless the
	// original equals an entry, whose index it then carries.
	Entry int
	// AuthPath is the auths key of the entry: repository or repositoryGroup as written, or the
	// mirror's destination.path without its trailing '/'; empty for an original with no entry.
	AuthPath string
	// LookupPath is the path whose credential the entry's secretRef Secret gives
	// (AlternativeLookupPath, MirrorLookupPath): the webhook probes with it and the syncer
	// writes it under AuthPath, so a probe uses exactly what the pod will pull with.
	LookupPath string
	Insecure   bool
	// Auth is the entry's credential, shared with the Index: read it, never write it. nil means
	// anonymous.
	Auth *v1alpha1.Auth
	// Inject: the pod gets PullSecretName(Source) when this candidate wins. Always false for the
	// original, which the pod already pulls on its own terms.
	Inject bool
	// DryRun: the candidate comes from a resource with spec.dryRun (only in the lists of
	// [Index.WithDryRun]).
	DryRun bool
	// PinDigest: the resource has spec.pinDigest; a container routed to this candidate is
	// rewritten to the digest the probe saw. Always false for the original.
	PinDigest bool
	// Trial: the candidate is in a list of [Index.WithDryRun], the original included: it is
	// probed only to tell what the dry runs would do, within a probe bound of its own.
	Trial bool
}

// Candidates returns the ordered list of images a container running image may be pulled from,
// the original included (see the package documentation for the order). When no resource
// applies, the list holds just the original and callers need not probe anything; when the
// original sits on an unavailable entry and nothing else is left, the list is empty. The only
// error is an image that does not parse.
func (ix *Index) Candidates(image string, podLabels, namespaceLabels labels.Set) ([]Candidate, error) {
	img, err := ix.parse(image)
	if err != nil {
		return nil, err
	}
	original := Candidate{Reference: img.full, Entry: -1}
	if ix.Len() == 0 {
		return []Candidate{original}, nil
	}
	original.Trial = ix.trial

	var hitBuf [8]alternativeHit
	hits := ix.matchAlternatives(&img, hitBuf[:0], podLabels, namespaceLabels)
	var mirrorBuf [8]*mirrorResource
	mirrors := ix.matchMirrors(&img, mirrorBuf[:0], podLabels, namespaceLabels)
	if len(hits) == 0 && len(mirrors) == 0 {
		return []Candidate{original}, nil
	}

	// The original stands for the entries it equals: the first available one lends it its
	// credential so the probe uses what the resource says this repository needs, and any
	// unavailable one removes it, since the operator declared it unusable.
	keepOriginal, lent := true, false
	size := 1 + len(mirrors)
	for i := range hits {
		h := &hits[i]
		size += len(h.res.entries)
		for j := range h.res.entries {
			if h.matched&(1<<j) == 0 {
				continue
			}
			e := &h.res.entries[j]
			switch {
			case e.unavailable:
				keepOriginal = false
			case !lent:
				original.Entry, original.AuthPath, original.LookupPath, original.Insecure, original.Auth = j, e.authPath, e.lookupPath, e.insecure, e.auth
				lent = true
			}
		}
	}

	b := listBuilder{out: make([]Candidate, 0, size), trial: ix.trial}
	for _, m := range mirrors {
		if m.band == bandAlways {
			b.addMirror(m, &img, ix.clusterID)
		}
	}
	for i := range hits {
		if hits[i].res.band == bandAlways {
			b.addAlternative(&hits[i], &img)
		}
	}
	if keepOriginal {
		b.add(original, credentialOf(original.Auth))
	}
	for i := range hits {
		if hits[i].res.band == bandOnFailure {
			b.addAlternative(&hits[i], &img)
		}
	}
	for _, m := range mirrors {
		if m.band == bandOnFailure {
			b.addMirror(m, &img, ix.clusterID)
		}
	}
	return b.out, nil
}

// alternativeHit is an ImageAlternative that applies to the image.
type alternativeHit struct {
	index int
	res   *alternativeResource
	// matched has bit j set when entry j equals the image (at most 32 entries).
	matched uint64
	// last is the image's last path segment, carried over by the group form.
	last string
}

// matchAlternatives walks the trie along the image's path segments: the node of the image's
// parent holds the groups that match, the node of the image itself the exact repositories.
func (ix *Index) matchAlternatives(img *imageRef, hits []alternativeHit, podLabels, namespaceLabels labels.Set) []alternativeHit {
	n := &ix.root
	rest := img.name
	for {
		seg, after, more := strings.Cut(rest, "/")
		if !more {
			hits = ix.collect(hits, n.group, seg, podLabels, namespaceLabels)
			if child := n.children[seg]; child != nil {
				hits = ix.collect(hits, child.exact, seg, podLabels, namespaceLabels)
			}
			break
		}
		if n = n.children[seg]; n == nil {
			break
		}
		rest = after
	}
	slices.SortFunc(hits, func(a, b alternativeHit) int {
		return cmp.Or(cmp.Compare(a.res.band, b.res.band), cmp.Compare(a.index, b.index))
	})
	return hits
}

// collect relies on the entries of one resource being contiguous in a node, since NewIndex
// adds resources one at a time, and on one resource never sitting in both lists of a node
// (a list has a single form).
func (ix *Index) collect(hits []alternativeHit, refs []entryRef, last string, podLabels, namespaceLabels labels.Set) []alternativeHit {
	skip := -1
	for _, r := range refs {
		if r.alternative == skip {
			continue
		}
		if k := len(hits) - 1; k >= 0 && hits[k].index == r.alternative {
			hits[k].matched |= 1 << r.entry
			continue
		}
		res := ix.alternatives[r.alternative]
		if !res.scope.selects(podLabels, namespaceLabels) {
			skip = r.alternative
			continue
		}
		hits = append(hits, alternativeHit{index: r.alternative, res: res, matched: 1 << r.entry, last: last})
	}
	return hits
}

func (ix *Index) matchMirrors(img *imageRef, out []*mirrorResource, podLabels, namespaceLabels labels.Set) []*mirrorResource {
	for _, m := range ix.mirrors {
		if !m.scope.selects(podLabels, namespaceLabels) || cannotName(m.dest, m.hostLen, img, ix.clusterID) != nil {
			continue
		}
		excluded := false
		for i := range m.excludes {
			if m.excludes[i].matches(img) {
				excluded = true
				break
			}
		}
		if !excluded {
			out = append(out, m)
		}
	}
	return out
}

// Why a mirror cannot name an image ([MirrorReference]); also [ErrClusterTagTooLong].
var (
	// ErrHostNotPathComponent: the image's registry host has a port, is an IPv6 address or
	// holds an upper-case letter, so it cannot be a path segment under the mirror.
	ErrHostNotPathComponent = errors.New("the image's registry host cannot be a path segment under a mirror (a port, an IPv6 address or an upper-case letter)")
	// ErrUnderMirror: the image lives under the mirror's own destination; mirroring it would
	// nest the mirror inside itself. It is the mirror's own image, not a failure.
	ErrUnderMirror = errors.New("the image lives under the mirror's own destination")
	// ErrMirrorNameTooLong: the repository name under the mirror would be over the reference
	// grammar's limit of 255 characters after the host.
	ErrMirrorNameTooLong = errors.New("the repository name under the mirror would be longer than 255 characters after the host")
)

// MirrorReference is MirrorReferenceFor without a cluster ID.
func MirrorReference(destinationPath, image string) (string, error) {
	return MirrorReferenceFor(destinationPath, image, "")
}

// MirrorReferenceFor returns where a mirror whose spec.destination.path is destinationPath
// holds image for the cluster clusterID: the Reference of the mirror's candidate in
// [Index.Candidates] of an index [Index.WithClusterID] (clusterID), built by the same code. With
// a cluster ID the tag is [ClusterTag]'s; an image without a tag keeps none (shared by every
// cluster). The error is one of ErrHostNotPathComponent, ErrUnderMirror, ErrMirrorNameTooLong
// and ErrClusterTagTooLong when the mirror cannot name the image (the webhook then offers no
// candidate of this mirror for it), or says that destinationPath, image or clusterID is not
// valid.
func MirrorReferenceFor(destinationPath, image, clusterID string) (string, error) {
	if clusterID != "" {
		if err := ValidateClusterID(clusterID); err != nil {
			return "", fmt.Errorf("cluster ID: %w", err)
		}
	}
	dest, err := destinationKind.parse(destinationPath)
	if err != nil {
		return "", fmt.Errorf("destination.path %q: %w", destinationPath, err)
	}
	img, err := parseImage(image)
	if err != nil {
		return "", err
	}
	return mirrorReference(dest, domainLen(dest), &img, clusterID)
}

// mirrorReference is MirrorReferenceFor for a normalized destination (without its trailing
// '/') whose host is hostLen bytes long, and a valid or empty clusterID.
func mirrorReference(dest string, hostLen int, img *imageRef, clusterID string) (string, error) {
	if err := cannotName(dest, hostLen, img, clusterID); err != nil {
		return "", err
	}
	if clusterID == "" || img.tag == "" {
		return dest + "/" + img.full, nil
	}
	ref := dest + "/" + img.name + ":" + img.tag + ClusterTagInfix + clusterID
	if img.digest != "" {
		ref += "@" + img.digest
	}
	return ref, nil
}

// cannotName says why a mirror on dest cannot name img for clusterID; nil when it can. It
// allocates nothing. The mirror's own images come first: one on a host with a port is still
// the mirror's own, not an image it fails to name.
func cannotName(dest string, hostLen int, img *imageRef, clusterID string) error {
	if rest, ok := strings.CutPrefix(img.name, dest); ok && (rest == "" || rest[0] == '/') {
		return ErrUnderMirror
	}
	if !hostIsPathComponent(img.domain) {
		return ErrHostNotPathComponent
	}
	if !fitsPathLimit(len(dest)+1+len(img.name), hostLen) {
		return ErrMirrorNameTooLong
	}
	if clusterID != "" && img.tag != "" && !clusterTagFits(img.tag, clusterID) {
		return ErrClusterTagTooLong
	}
	return nil
}

type candidateKey struct {
	reference string
	cred      credential
}

// linearDedupeMax bounds the list deduplicated by scanning; longer lists (many resources on
// one image) switch to a map.
const linearDedupeMax = 16

type listBuilder struct {
	trial bool
	out   []Candidate
	// keys are the first candidates' keys, in the builder itself (on the stack, most lists
	// being short); seen all of them past linearDedupeMax.
	keys  [linearDedupeMax + 1]candidateKey
	nkeys int
	seen  map[candidateKey]struct{}
}

func (b *listBuilder) add(c Candidate, cred credential) {
	k := candidateKey{reference: c.Reference, cred: cred}
	if b.seen != nil {
		if _, dup := b.seen[k]; dup {
			return
		}
		b.seen[k] = struct{}{}
	} else {
		if slices.Contains(b.keys[:b.nkeys], k) {
			return
		}
		b.keys[b.nkeys] = k
		b.nkeys++
		if b.nkeys > linearDedupeMax {
			b.seen = make(map[candidateKey]struct{}, 2*b.nkeys)
			for _, o := range b.keys[:b.nkeys] {
				b.seen[o] = struct{}{}
			}
		}
	}
	c.Trial = b.trial
	b.out = append(b.out, c)
}

func (b *listBuilder) addAlternative(h *alternativeHit, img *imageRef) {
	res := h.res
	source := Source{Kind: KindImageAlternative, Name: res.name}
	for j := range res.entries {
		e := &res.entries[j]
		if e.unavailable || h.matched&(1<<j) != 0 {
			continue
		}
		var ref string
		if res.group {
			if !fitsPathLimit(len(e.path)+1+len(h.last), e.hostLen) {
				continue
			}
			ref = e.path + "/" + h.last + img.suffix
		} else {
			ref = e.path + img.suffix
		}
		b.add(Candidate{
			Reference:  ref,
			Source:     source,
			Policy:     res.policy,
			Entry:      j,
			AuthPath:   e.authPath,
			LookupPath: e.lookupPath,
			Insecure:   e.insecure,
			Auth:       e.auth,
			Inject:     e.auth.Injects(),
			DryRun:     res.dryRun,
			PinDigest:  res.pin,
		}, e.cred)
	}
}

func (b *listBuilder) addMirror(m *mirrorResource, img *imageRef, clusterID string) {
	ref, err := mirrorReference(m.dest, m.hostLen, img, clusterID)
	if err != nil {
		return // matchMirrors left it out already
	}
	b.add(Candidate{
		Reference:  ref,
		Source:     Source{Kind: KindImageMirror, Name: m.name},
		Policy:     m.policy,
		Entry:      0,
		AuthPath:   m.authPath,
		LookupPath: m.lookupPath,
		Insecure:   m.insecure,
		Auth:       m.auth,
		Inject:     m.auth.Injects(),
		DryRun:     m.dryRun,
		PinDigest:  m.pin,
	}, m.cred)
}

// Recorded returns the candidates that explain a recorded rewrite, in list order: the
// candidates of source, for a container whose original image was original, that explain its
// current image (see [Candidate.Explains]), given the pod's and namespace's labels; several when
// entries share a path. It is how kuik tells its own records (kuik.enix.io/original-images,
// rewritten-by) from forged ones: a pod author can write any annotation, but a record only
// counts if the resource, selecting this pod in this namespace, could have routed original to
// current. The webhook and the secret-syncer both decide with it.
//
// On an index [Index.WithClusterID], a mirror's candidate explains a current image with a tag
// only when it is this cluster's tag of original ([ClusterTag]): another cluster's record does
// not verify. A current image without a tag (pinned to a digest) is checked by repository.
func (ix *Index) Recorded(original, current string, source Source, podLabels, namespaceLabels labels.Set) []Candidate {
	if source.IsOriginal() {
		return nil
	}
	cur, err := ix.parse(current)
	if err != nil {
		return nil
	}
	cands, err := ix.Candidates(original, podLabels, namespaceLabels)
	if err != nil {
		return nil
	}
	var out []Candidate
	for _, c := range cands {
		if c.Source == source && c.explains(&cur) && ix.clusterTagged(&c, original, &cur) {
			out = append(out, c)
		}
	}
	return out
}

// clusterTagged reports whether cur carries this index's cluster tag of original when c is a
// mirror's candidate on an index with a cluster ID; true otherwise.
func (ix *Index) clusterTagged(c *Candidate, original string, cur *imageRef) bool {
	if ix.clusterID == "" || c.Source.Kind != KindImageMirror || cur.tag == "" {
		return true
	}
	orig, err := ix.parse(original) // cached by Candidates
	if err != nil || orig.tag == "" {
		return false
	}
	rest, ok := strings.CutPrefix(cur.tag, orig.tag)
	return ok && len(rest) == len(ClusterTagInfix)+len(ix.clusterID) &&
		strings.HasPrefix(rest, ClusterTagInfix) && strings.HasSuffix(rest, ix.clusterID)
}

// Explains reports whether a container now running image current is pulled from this
// candidate: the same repository, whatever the tag and digest. A later mutating webhook may pin
// a digest (alt:v1 becomes alt:v1@sha256:…) between kuik's invocations, and the credential the
// entry needs does not depend on the tag.
func (c *Candidate) Explains(current string) bool {
	cur, err := parseImage(current)
	if err != nil {
		return false
	}
	return c.explains(&cur)
}

func (c *Candidate) explains(cur *imageRef) bool {
	name, ok := strings.CutPrefix(c.Reference, cur.name)
	return ok && (name == "" || name[0] == ':' || name[0] == '@')
}

// DryRunSource names a resource with spec.dryRun that applies to image for this pod, for a
// list it changes without a candidate of its own (it retires the original or lends it its
// credential, its other candidates already offered): the first ImageAlternative in list
// order, else the first ImageMirror; false when none applies. Only an index from
// [Index.WithDryRun] holds such resources.
func (ix *Index) DryRunSource(image string, podLabels, namespaceLabels labels.Set) (Source, bool) {
	if ix == nil || !ix.trial {
		return Source{}, false
	}
	img, err := ix.parse(image)
	if err != nil {
		return Source{}, false
	}
	var hitBuf [8]alternativeHit
	for _, h := range ix.matchAlternatives(&img, hitBuf[:0], podLabels, namespaceLabels) {
		if h.res.dryRun {
			return Source{Kind: KindImageAlternative, Name: h.res.name}, true
		}
	}
	var mirrorBuf [8]*mirrorResource
	for _, m := range ix.matchMirrors(&img, mirrorBuf[:0], podLabels, namespaceLabels) {
		if m.dryRun {
			return Source{Kind: KindImageMirror, Name: m.name}, true
		}
	}
	return Source{}, false
}
