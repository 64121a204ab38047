package keep

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Priority orders the copies: the higher first.
type Priority int

const (
	// PriorityTemplate: an image only a workload template names, or a retained tag.
	PriorityTemplate Priority = iota + 1
	// PriorityLive: an image a live pod runs from elsewhere (a first copy).
	PriorityLive
	// PriorityRouted: an image pods are routed to on this mirror now (a re-copy).
	PriorityRouted
)

func (p Priority) String() string {
	switch p {
	case PriorityTemplate:
		return "Template"
	case PriorityLive:
		return "Live"
	case PriorityRouted:
		return "Routed"
	}
	return "Unknown"
}

// Reason says why an image is not kept.
type Reason string

const (
	// ReasonNotCovered: the mirror offers no candidate for the image for this pod (selectors,
	// excludeImages, dry run, rewritePolicy None, or a name too long).
	ReasonNotCovered Reason = "NotCovered"
	// ReasonOwnDestination: the image is under the mirror's own destination (no loops).
	ReasonOwnDestination Reason = "OwnDestination"
	// ReasonUnnameable: the mirror cannot name the image (a registry host with a port, or a tag
	// too long for the cluster ID's suffix).
	ReasonUnnameable Reason = "Unnameable"
	// ReasonUnverifiedRecord: the container's original-images record is one kuik could not
	// have written (forged, or the resources changed); nothing is kept for it.
	ReasonUnverifiedRecord Reason = "UnverifiedRecord"
	// ReasonPrivateSource: the source needs a credential and the mirror denies private sources.
	ReasonPrivateSource Reason = "PrivateSource"
	// ReasonInvalidImage: the image does not parse.
	ReasonInvalidImage Reason = "InvalidImage"
)

// Want is an image a mirror must hold.
type Want struct {
	Mirror string
	// Origin is the image the pod or template names, normalized: the pod's spec image, or a
	// routed container's verified original.
	Origin string
	// Digest is the digest to keep: the one the node runs (imageID) or the origin pins; empty
	// when unknown, to be resolved by tag.
	Digest string
	// OtherDigests are the other digests seen under Destination, sorted: nodes that ran the tag
	// before and after it moved.
	OtherDigests []string
	// Destination is the routing core's candidate reference for Origin on this mirror: what
	// the webhook routes a pod to.
	Destination string
	Priority    Priority
	// Why is the first use at Priority, e.g. "Pod ns/name container app".
	Why string
	// SourceAuth is the credential the routing core lends the original (an entry equal to it);
	// nil means anonymous. Never a pod's imagePullSecrets. Shared with the Index: read only.
	SourceAuth *v1alpha1.Auth
}

// Skip is an image that is not kept, and why.
type Skip struct {
	// Mirror is empty when the reason holds for every mirror (an unverified record, an
	// invalid image).
	Mirror string
	Image  string
	Reason Reason
	// Why is the first use of the image, e.g. "Pod ns/name container app".
	Why string
}

// Plan is what the mirrors must hold, and what must not be deleted.
type Plan struct {
	// Keep is sorted by Priority (highest first), then Mirror and Destination.
	Keep []Want
	// Skipped is sorted by Mirror, Image and Reason; one per (mirror, image, reason).
	Skipped []Skip
	// Used is what garbage collection must never delete.
	Used Used
}

// Used holds the references garbage collection must not delete, as "repository:tag" and
// "repository@digest" keys (see [Used.Has]).
type Used struct {
	// running: every live pod's spec images, whatever their records say, and the digests
	// their nodes run.
	running map[string]struct{}
	// templates: the images templates name, counted only for a mirror with CountTemplates.
	templates map[string]struct{}
	// wanted: the destinations of Keep.
	wanted map[string]struct{}
}

// Has reports whether the tag (and, when known, the digest under it) of repository is in use;
// countTemplates says whether the images templates name directly count.
func (u *Used) Has(repository, tag, digest string, countTemplates bool) bool {
	if u.has(repository+":"+tag, countTemplates) {
		return true
	}
	return digest != "" && u.has(repository+"@"+digest, countTemplates)
}

func (u *Used) has(key string, countTemplates bool) bool {
	if _, ok := u.running[key]; ok {
		return true
	}
	if _, ok := u.wanted[key]; ok {
		return true
	}
	_, ok := u.templates[key]
	return ok && countTemplates
}

func addRef(set map[string]struct{}, ref string) {
	t, d, _ := refKeys(ref)
	if t != "" {
		set[t] = struct{}{}
	}
	if d != "" {
		set[d] = struct{}{}
	}
}

// Desired computes what the mirrors must hold: for every container of every live pod, its
// origin on every mirror whose candidate the routing core gives for it, and, for a mirror with
// CountTemplates, every image a template names. ix is the index the webhook routes with.
func Desired(ix *routing.Index, mirrors []Mirror, snap *Snapshot) Plan {
	d := desired{
		ix:      ix,
		mirrors: mirrors,
		keep:    map[wantKey]*Want{},
		parsed:  map[string]parsedRef{},
		imageID: map[string]imageRef{},
		skipped: map[skipKey]string{},
		used: Used{
			running:   map[string]struct{}{},
			templates: map[string]struct{}{},
			wanted:    map[string]struct{}{},
		},
	}
	for i := range snap.Pods {
		d.pod(&snap.Pods[i], snap.Namespaces[snap.Pods[i].Namespace])
	}
	for i := range snap.Templates {
		d.template(&snap.Templates[i], snap.Namespaces[snap.Templates[i].Namespace])
	}
	return d.plan()
}

type wantKey struct{ mirror, destination string }

type skipKey struct {
	mirror, image string
	reason        Reason
}

type desired struct {
	ix      *routing.Index
	mirrors []Mirror
	keep    map[wantKey]*Want
	skipped map[skipKey]string // the first use by name
	used    Used
	// parsed memoizes what is read of each reference and imageID: pods share few images.
	parsed  map[string]parsedRef
	imageID map[string]imageRef
}

// parsedRef is what Desired reads of a reference, once.
type parsedRef struct {
	normalized, repository string
	tagKey, digestKey      string
	ok                     bool
}

func (d *desired) parse(ref string) *parsedRef {
	if p, ok := d.parsed[ref]; ok {
		return &p
	}
	var p parsedRef
	if n, err := routing.Normalize(ref); err == nil {
		p.normalized, p.ok = n, true
		p.repository, _ = routing.Repository(ref)
		p.tagKey, p.digestKey, _ = refKeys(ref)
	}
	d.parsed[ref] = p
	return &p
}

// imageRef is what an imageID names: a repository and a digest.
type imageRef struct{ repository, digest string }

// ran is the digest the node runs for the container, "" when unknown or not to be trusted:
// the status must be of the spec image (not of a container started before the spec image was
// changed in place), and the imageID must name the spec image's repository (a digest of
// another repository may be other bytes under the same tag).
func (d *desired) ran(c *Container, spec *parsedRef) string {
	if c.ImageID == "" || !spec.ok {
		return ""
	}
	if st := d.parse(c.StatusImage); !st.ok || st.normalized != spec.normalized {
		return ""
	}
	id, ok := d.imageID[c.ImageID]
	if !ok {
		id.digest, _ = DigestFromImageID(c.ImageID)
		id.repository, _ = routing.Repository(strings.TrimPrefix(c.ImageID, dockerPullable))
		d.imageID[c.ImageID] = id
	}
	if id.repository != spec.repository {
		return ""
	}
	return id.digest
}

// addKeys adds the keys of a parsed reference to a Used set.
func addKeys(set map[string]struct{}, p *parsedRef) {
	if p.tagKey != "" {
		set[p.tagKey] = struct{}{}
	}
	if p.digestKey != "" {
		set[p.digestKey] = struct{}{}
	}
}

// use is one image a pod container or a template names.
type use struct {
	origin string
	// routedBy is the resource a verified record names; zero when not routed.
	routedBy routing.Source
	// ranDigest is the digest the node runs, "" when unknown or not a pod.
	ranDigest string
	podLabels labels.Set
	priority  Priority // PriorityLive for a pod, PriorityTemplate for a template
	why       string
}

func (d *desired) pod(p *Pod, nsLabels labels.Set) {
	originals := route.OriginalImages(p.Annotations)
	by := route.RewrittenBy(p.Annotations)
	for i := range p.Containers {
		c := &p.Containers[i]
		why := "Pod " + p.Namespace + "/" + p.Name + " container " + c.Name
		img := d.parse(c.Image)
		addKeys(d.used.running, img)
		ran := d.ran(c, img)
		if ran != "" && img.ok {
			d.used.running[img.repository+"@"+ran] = struct{}{}
		}
		u := use{origin: c.Image, ranDigest: ran, podLabels: p.Labels, priority: PriorityLive, why: why}
		if original, recorded := originals[c.Name]; recorded {
			src, named := by[c.Name]
			if !named || len(d.ix.Recorded(original, c.Image, src, p.Labels, nsLabels)) == 0 {
				claimed := original
				if o := d.parse(original); o.ok {
					claimed = o.normalized
				}
				d.skip(Skip{Image: claimed, Reason: ReasonUnverifiedRecord, Why: why})
				continue
			}
			u.origin, u.routedBy = original, src
		}
		d.add(&u, nsLabels, func(*Mirror) bool { return true })
	}
}

func (d *desired) template(t *Template, nsLabels labels.Set) {
	why := string(t.Kind) + " " + t.Namespace + "/" + t.Name
	for _, image := range t.Images {
		addKeys(d.used.templates, d.parse(image))
		u := use{origin: image, podLabels: t.Labels, priority: PriorityTemplate, why: why}
		d.add(&u, nsLabels, func(m *Mirror) bool { return m.CountTemplates })
	}
}

// add keeps u's origin on every mirror counts accepts that has a candidate for it.
func (d *desired) add(u *use, nsLabels labels.Set, counts func(*Mirror) bool) {
	var cands []routing.Candidate
	var parsed *parsedRef
	for i := range d.mirrors {
		m := &d.mirrors[i]
		if !counts(m) {
			continue
		}
		if parsed == nil {
			if parsed = d.parse(u.origin); !parsed.ok {
				d.skip(Skip{Image: u.origin, Reason: ReasonInvalidImage, Why: u.why})
				return
			}
			// The only error is the image's, which parse has just accepted.
			cands, _ = d.ix.Candidates(u.origin, u.podLabels, nsLabels)
		}
		origin := parsed.normalized
		src := routing.Source{Kind: routing.KindImageMirror, Name: m.Name}
		var mine, original *routing.Candidate
		for j := range cands {
			switch c := &cands[j]; {
			case c.Source == src && mine == nil:
				mine = c
			case c.Source.IsOriginal():
				original = c
			}
		}
		if mine == nil {
			reason := ReasonNotCovered
			if m.Selects == nil || m.Selects(u.podLabels, nsLabels) {
				reason = notCovered(m, origin, d.ix.ClusterID())
			}
			d.skip(Skip{Mirror: m.Name, Image: origin, Reason: reason, Why: u.why})
			continue
		}
		if original != nil && original.Auth != nil && !m.AllowPrivateSources {
			d.skip(Skip{Mirror: m.Name, Image: origin, Reason: ReasonPrivateSource, Why: u.why})
			continue
		}
		w := Want{
			Mirror:      m.Name,
			Origin:      origin,
			Digest:      digestOfKey(parsed.digestKey),
			Destination: mine.Reference,
			Priority:    u.priority,
			Why:         u.why,
		}
		if original != nil {
			w.SourceAuth = original.Auth
		}
		// The node's digest is the origin's only when it pulled the origin itself, or this
		// mirror's verbatim copy; another resource's repository may hold other bytes.
		if u.ranDigest != "" && w.Digest == "" && (u.routedBy.IsOriginal() || u.routedBy == src) {
			w.Digest = u.ranDigest
		}
		if u.routedBy == src {
			w.Priority = PriorityRouted
		}
		d.merge(&w)
	}
}

// merge adds w, or folds it into the Want of the same destination: the highest priority wins,
// then the first use by name; the digest of the winner is kept, the others listed.
func (d *desired) merge(w *Want) {
	k := wantKey{w.Mirror, w.Destination}
	old, ok := d.keep[k]
	if !ok {
		d.keep[k] = w
		return
	}
	digests := append(slices.Clone(old.OtherDigests), old.Digest, w.Digest)
	if better(w, old) {
		old.Priority, old.Why, old.SourceAuth = w.Priority, w.Why, w.SourceAuth
		if w.Digest != "" {
			old.Digest = w.Digest
		}
	} else if old.Digest == "" {
		old.Digest = w.Digest
	}
	old.OtherDigests = nil
	for _, dg := range digests {
		if dg != "" && dg != old.Digest && !slices.Contains(old.OtherDigests, dg) {
			old.OtherDigests = append(old.OtherDigests, dg)
		}
	}
	slices.Sort(old.OtherDigests)
}

// better reports whether w wins over old: a higher priority, else a known digest over none,
// else the smaller use.
func better(w, old *Want) bool {
	if w.Priority != old.Priority {
		return w.Priority > old.Priority
	}
	if (w.Digest != "") != (old.Digest != "") {
		return w.Digest != ""
	}
	return w.Why < old.Why
}

func (d *desired) skip(s Skip) {
	k := skipKey{s.Mirror, s.Image, s.Reason}
	if why, ok := d.skipped[k]; !ok || s.Why < why {
		d.skipped[k] = s.Why
	}
}

func (d *desired) plan() Plan {
	p := Plan{Used: d.used}
	for _, w := range d.keep {
		p.Keep = append(p.Keep, *w)
		addRef(p.Used.wanted, w.Destination)
	}
	slices.SortFunc(p.Keep, func(a, b Want) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), strings.Compare(a.Mirror, b.Mirror), strings.Compare(a.Destination, b.Destination))
	})
	for k, why := range d.skipped {
		p.Skipped = append(p.Skipped, Skip{Mirror: k.mirror, Image: k.image, Reason: k.reason, Why: why})
	}
	slices.SortFunc(p.Skipped, func(a, b Skip) int {
		return cmp.Or(strings.Compare(a.Mirror, b.Mirror), strings.Compare(a.Image, b.Image), strings.Compare(string(a.Reason), string(b.Reason)))
	})
	return p
}

// notCovered names why the routing core gives m no candidate for origin under clusterID. It
// only labels the report: the decision is Candidates'.
func notCovered(m *Mirror, origin, clusterID string) Reason {
	named, err := reference.ParseNormalizedNamed(origin)
	if err != nil {
		return ReasonInvalidImage
	}
	if _, err := routing.MirrorReferenceFor(m.Destination, origin, clusterID); errors.Is(err, routing.ErrClusterTagTooLong) {
		return ReasonUnnameable
	}
	if dest := destinationName(m.Destination); dest != "" {
		if rest, ok := strings.CutPrefix(named.Name(), dest); ok && (rest == "" || rest[0] == '/') {
			return ReasonOwnDestination
		}
	}
	if host := reference.Domain(named); strings.ContainsAny(host, ":[]") || strings.ToLower(host) != host {
		return ReasonUnnameable
	}
	return ReasonNotCovered
}

// destinationName is a destination.path as a normalized repository prefix (library/ is
// docker.io/library), "" when it does not parse.
func destinationName(path string) string {
	p := strings.TrimSuffix(path, "/")
	if p == "" {
		return ""
	}
	repo, err := routing.Repository(p + "/x")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(repo, "/x")
}
