package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	distref "github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Chooser returns, for each container's candidate list, its first available candidate in
// list order (Index -1 for none). All lists are resolved together, so a pod's containers share
// one probe timeout. ownPullSecrets says whether the pod brings pull secrets of its own (which
// kuik cannot read).
type Chooser func(ctx context.Context, lists [][]routing.Candidate, ownPullSecrets bool) []Choice

// Choice is a Chooser's answer for one list: the index of the chosen candidate (-1 for none)
// and the manifest digest its probe saw ("" when unknown). It is the prober's own, so that
// ProbeChooser hands it on without a copy.
type Choice = probe.Choice

// Decision is what Route did to one container.
type Decision struct {
	Container string
	// Path is the JSON pointer of the container's image field, e.g. /spec/containers/0/image.
	Path string
	// Original is the image before, Image after (equal when untouched).
	Original, Image string
	Source          routing.Source
	Reason          string
	PullSecret      string
	Candidates      int
	// Pinned: Image is the winning candidate's repository at the digest its probe saw.
	Pinned bool
	// Unpinned: a pinDigest candidate was available but its probe gave no digest, so it was
	// passed over.
	Unpinned bool
	// DryRun is what the dry-run resources would change, nil when nothing.
	DryRun *DryRunDecision
}

// ReasonKeepOriginal is the dry-run reason of a container that would keep its original image
// where the enforcing resources route it away (a dry-run resource lends the original another
// credential).
const ReasonKeepOriginal = "Original"

// DryRunDecision is what a container would get if the dry-run resources enforced: recorded in
// the pod's kuik.enix.io/dry-run annotation, it differs from what the container got.
type DryRunDecision struct {
	// Image is the image it would run; the original when no candidate would be available.
	Image string `json:"image"`
	// By is "<Kind>/<name>" of the resource whose candidate it would run, or of the dry-run
	// resource that would leave it with none.
	By string `json:"by"`
	// Reason is Always, OnFailure or NoAlternatives.
	Reason string `json:"reason"`
	// resource is the dry-run resource that makes the difference, for the metric.
	resource routing.Source
}

// Scope says which containers of a pod Route may change and what else it may touch.
type Scope struct {
	// EphemeralOnly routes only ephemeral containers absent from Previous: the
	// pods/ephemeralcontainers subresource lets nothing but spec.ephemeralContainers change, so
	// neither annotations nor imagePullSecrets can be written. A candidate whose credential
	// would have to be injected can win only if the pod already references the resource's
	// Secret and that Secret already holds the entry (Always, or an entry a true record of the
	// pod shows in use: see verify).
	EphemeralOnly bool
	Previous      *corev1.Pod
}

// container is one image field of the pod.
type container struct {
	name, path string
	image      *string
}

func containersOf(pod *corev1.Pod) []container {
	out := make([]container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)+len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.InitContainers {
		out = append(out, container{pod.Spec.InitContainers[i].Name, "/spec/initContainers/" + strconv.Itoa(i) + "/image", &pod.Spec.InitContainers[i].Image})
	}
	for i := range pod.Spec.Containers {
		out = append(out, container{pod.Spec.Containers[i].Name, "/spec/containers/" + strconv.Itoa(i) + "/image", &pod.Spec.Containers[i].Image})
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, container{pod.Spec.EphemeralContainers[i].Name, "/spec/ephemeralContainers/" + strconv.Itoa(i) + "/image", &pod.Spec.EphemeralContainers[i].Image})
	}
	return out
}

// records are kuik's annotations on a pod, by container.
type records struct {
	originals, rewrittenBy, reasons map[string]string
	// dryRun is kuik.enix.io/dry-run, kept as raw JSON values by container.
	dryRun map[string]json.RawMessage
}

// Route routes every container of pod not routed before and modifies pod in place. It returns
// the decisions for the containers it looked at; the pod changed when any decision has
// Image != Original or a reason was recorded.
//
// kuik's annotations on the pod are only trusted where they are true: a container counts as
// routed before only if its record is one kuik could have written, i.e. a resource that
// selects this pod in this namespace has a candidate for its recorded original in the
// repository of the container's current image (routing.Index.Recorded). Other records (a pod author's forgeries,
// or records of containers that do not exist) are dropped, the container is routed from its
// current image, and the kuik.enix.io/rewritten label is kept only when a true record remains.
//
// A pod whose labels are over routing.LabelsWithinBounds is left as it is, with no decision:
// the secret-syncer keeps nothing of such a pod, so a credential it would need would never be
// written.
func Route(ctx context.Context, pod *corev1.Pod, namespaceLabels labels.Set, ix *routing.Index, choose Chooser, scope Scope) ([]Decision, error) {
	if !routing.LabelsWithinBounds(pod.Labels) {
		return nil, nil
	}
	rec := records{
		originals:   readMap(pod.Annotations, v1alpha1.AnnotationOriginalImages),
		rewrittenBy: readMap(pod.Annotations, v1alpha1.AnnotationRewrittenBy),
		reasons:     readMap(pod.Annotations, v1alpha1.AnnotationReason),
		dryRun:      readRawMap(pod.Annotations, v1alpha1.AnnotationDryRun),
	}
	podLabels := labels.Set(pod.Labels)
	all := containersOf(pod)
	done, used := verify(&rec, all, ix, podLabels, namespaceLabels)
	// A dry-run record is kuik's only for a container it routed before (a reinvocation
	// skips it); every other container's is decided again below, or dropped.
	for name := range rec.dryRun {
		if !done[name] {
			delete(rec.dryRun, name)
		}
	}

	// Gather every container to route with its candidates, then resolve them all at once.
	var todo []container
	var lists, dryLists [][]routing.Candidate
	dry := ix.WithDryRun()
	if scope.EphemeralOnly {
		dry = nil // no annotation can be written
	}
	var previous map[string]bool
	if scope.EphemeralOnly {
		previous = map[string]bool{}
		if scope.Previous != nil {
			for _, c := range scope.Previous.Spec.EphemeralContainers {
				previous[c.Name] = true
			}
		}
	}
	for i, c := range all {
		if scope.EphemeralOnly && (i < len(pod.Spec.InitContainers)+len(pod.Spec.Containers) || previous[c.name]) {
			continue
		}
		if done[c.name] {
			continue // routed by an earlier invocation
		}
		cands, err := ix.Candidates(*c.image, podLabels, namespaceLabels)
		if err != nil {
			continue // unparsable images are the API server's and the kubelet's business
		}
		var dryCands []routing.Candidate
		if dry != nil {
			if dryCands, _ = dry.Candidates(*c.image, podLabels, namespaceLabels); sameList(dryCands, cands) {
				dryCands = nil // no dry-run resource applies to this container
			} else if dryCands == nil {
				dryCands = []routing.Candidate{} // they would leave it nothing: still a list
			}
		}
		if trivial(cands) && dryCands == nil {
			continue // images no resource covers are never probed
		}
		if scope.EphemeralOnly {
			cands = slices.DeleteFunc(slices.Clone(cands), func(c routing.Candidate) bool {
				if !c.Inject {
					return false
				}
				inSecret := c.Policy == v1alpha1.RewritePolicyAlways || used[usedEntry{c.Source, c.AuthPath}]
				return !inSecret || !hasPullSecret(pod, routing.PullSecretName(c.Source.Kind, c.Source.Name))
			})
		}
		todo = append(todo, c)
		lists = append(lists, cands)
		if dry != nil {
			dryLists = append(dryLists, dryCands)
		}
	}
	var chosen []Choice
	if len(lists) > 0 {
		// The dry-run lists are resolved with the enforcing ones: one probe timeout for all,
		// identical candidates probed once.
		all := lists
		if dry != nil {
			all = make([][]routing.Candidate, 0, 2*len(lists))
			for _, cands := range lists {
				if trivial(cands) {
					cands = nil // nothing to decide: only its dry run needs probes
				}
				all = append(all, cands)
			}
			all = append(all, dryLists...)
		}
		chosen = choose(ctx, all, len(pod.Spec.ImagePullSecrets) > 0)
	}

	decisions := make([]Decision, 0, len(todo))
	for k, c := range todo {
		cands := lists[k]
		d := Decision{Container: c.name, Path: c.path, Original: *c.image, Image: *c.image, Candidates: len(cands)}
		if !trivial(cands) {
			decide(&d, cands, chosen[k])
		}
		if dry != nil && dryLists[k] != nil {
			would := Decision{Original: *c.image, Image: *c.image}
			decide(&would, dryLists[k], chosen[len(lists)+k])
			d.DryRun = dryRunOf(&d, &would, dryLists[k])
			if d.DryRun != nil && d.DryRun.resource == (routing.Source{}) {
				// No candidate of a dry-run resource in the list: one retired the original
				// or lent it a credential.
				if src, ok := dry.DryRunSource(d.Original, podLabels, namespaceLabels); ok {
					d.DryRun.resource = src
					if would.Source.IsOriginal() {
						d.DryRun.By = src.String()
					}
				}
			}
		}
		*c.image = d.Image
		decisions = append(decisions, d)
	}
	if scope.EphemeralOnly {
		return decisions, nil
	}

	for _, d := range decisions {
		delete(rec.dryRun, d.Container)
		if d.DryRun != nil {
			b, err := json.Marshal(d.DryRun)
			if err != nil {
				return decisions, fmt.Errorf("encoding %s: %w", v1alpha1.AnnotationDryRun, err)
			}
			if rec.dryRun == nil {
				rec.dryRun = map[string]json.RawMessage{}
			}
			rec.dryRun[d.Container] = b
		}
		delete(rec.reasons, d.Container)
		if d.Reason == "" {
			continue
		}
		rec.reasons[d.Container] = d.Reason
		if d.Image == d.Original {
			continue
		}
		rec.originals[d.Container] = d.Original
		rec.rewrittenBy[d.Container] = d.Source.String()
		if d.PullSecret != "" && !hasPullSecret(pod, d.PullSecret) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: d.PullSecret})
		}
	}
	return decisions, rec.write(pod)
}

// trivial reports whether a candidate list leaves nothing to decide: empty (the original sits
// on an unavailable entry and nothing else is left) or the original alone.
func trivial(cands []routing.Candidate) bool {
	return len(cands) == 0 || (len(cands) == 1 && cands[0].Source.IsOriginal())
}

// sameList reports whether two candidate lists would be probed and decided alike.
func sameList(a, b []routing.Candidate) bool {
	return slices.EqualFunc(a, b, func(x, y routing.Candidate) bool {
		return x.Reference == y.Reference && x.Source == y.Source && x.LookupPath == y.LookupPath &&
			x.Insecure == y.Insecure && x.Inject == y.Inject && x.Auth == y.Auth && x.PinDigest == y.PinDigest
	})
}

// decide fills d from the choice among cands. A pinDigest candidate is rewritten to its
// repository at the digest its probe saw. The prober gives a digest for every available
// candidate (a registry that answers a manifest HEAD without one is not available), so one
// without is not routed unpinned: the container is left as it is (NoAlternatives,
// d.Unpinned), since the candidates after it were not chosen over it.
func decide(d *Decision, cands []routing.Candidate, c Choice) {
	switch i := c.Index; {
	case i < 0 || i >= len(cands):
		d.Reason = v1alpha1.ReasonNoAlternatives
	case cands[i].Source.IsOriginal():
		// The original is available: nothing to do or record.
	default:
		w := cands[i]
		image := w.Reference
		if w.PinDigest {
			pinned, ok := pin(w.Reference, c.Digest)
			if !ok {
				d.Unpinned, d.Reason = true, v1alpha1.ReasonNoAlternatives
				return
			}
			image, d.Pinned = pinned, true
		}
		d.Image, d.Source, d.Reason = image, w.Source, string(w.Policy)
		if w.Inject {
			d.PullSecret = routing.PullSecretName(w.Source.Kind, w.Source.Name)
		}
	}
}

// pin is reference's repository at digest, which must be a valid sha256 digest: a reference
// already carrying a digest keeps it only if it is the same one (the probe asked for it by
// digest). The repository is spelled as kuik normalizes it (docker.io/…, never
// index.docker.io/…), so the pinned image names the candidate's repository as written.
func pin(reference, digest string) (string, bool) {
	named, err := distref.ParseNormalizedNamed(reference)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		return "", false
	}
	pinned, err := distref.ParseNormalizedNamed(distref.TrimNamed(named).String() + "@" + digest)
	if err != nil {
		return "", false
	}
	if had, ok := named.(distref.Digested); ok && had.Digest().String() != digest {
		return "", false
	}
	return pinned.String(), true
}

// dryRunOf is the dry-run record of a container: what it would get (would, decided on the
// list of every resource, dry-run ones included) when that differs from what it got (d). nil
// when the dry-run resources change nothing.
func dryRunOf(d, would *Decision, dryCands []routing.Candidate) *DryRunDecision {
	if would.Image == d.Image && would.Source == d.Source && would.Reason == d.Reason {
		return nil
	}
	out := &DryRunDecision{Image: would.Image, Reason: would.Reason}
	if out.Reason == "" {
		out.Reason = ReasonKeepOriginal
	}
	// The dry-run resource that makes the difference: the winner's when it is one, else the
	// first in the list (it removed the original, or filled the list with unavailable ones).
	i := slices.IndexFunc(dryCands, func(c routing.Candidate) bool { return c.DryRun && c.Source == would.Source })
	if i < 0 {
		i = slices.IndexFunc(dryCands, func(c routing.Candidate) bool { return c.DryRun })
	}
	if i >= 0 {
		out.resource = dryCands[i].Source
	}
	if !would.Source.IsOriginal() {
		out.By = would.Source.String()
	} else {
		out.By = out.resource.String()
	}
	return out
}

// usedEntry is an entry of a resource that a true record shows the pod already pulls from.
type usedEntry struct {
	source   routing.Source
	authPath string
}

// verify drops the records kuik could not have written and returns the containers whose record
// is true (routed before) and the entries those containers pull from.
func verify(rec *records, all []container, ix *routing.Index, podLabels, namespaceLabels labels.Set) (map[string]bool, map[usedEntry]bool) {
	images := make(map[string]string, len(all))
	for _, c := range all {
		images[c.name] = *c.image
	}
	done := map[string]bool{}
	used := map[usedEntry]bool{}
	for name, original := range rec.originals {
		current, exists := images[name]
		src, err := routing.ParseSource(rec.rewrittenBy[name])
		if exists && err == nil {
			if cands := ix.Recorded(original, current, src, podLabels, namespaceLabels); len(cands) > 0 {
				done[name] = true
				for _, c := range cands {
					if c.Inject {
						used[usedEntry{c.Source, c.AuthPath}] = true
					}
				}
				continue
			}
		}
		delete(rec.originals, name)
		delete(rec.rewrittenBy, name)
		delete(rec.reasons, name)
	}
	for name := range rec.rewrittenBy {
		if !done[name] {
			delete(rec.rewrittenBy, name)
		}
	}
	for name, reason := range rec.reasons {
		if _, exists := images[name]; !exists || (!done[name] && reason != v1alpha1.ReasonNoAlternatives) {
			delete(rec.reasons, name)
		}
	}
	return done, used
}

// write puts the records back on the pod: each annotation as a JSON map, or removed when empty,
// and the kuik.enix.io/rewritten label exactly when a container is recorded as rewritten.
func (rec *records) write(pod *corev1.Pod) error {
	for key, m := range map[string]map[string]string{
		v1alpha1.AnnotationOriginalImages: rec.originals,
		v1alpha1.AnnotationRewrittenBy:    rec.rewrittenBy,
		v1alpha1.AnnotationReason:         rec.reasons,
	} {
		if len(m) == 0 {
			delete(pod.Annotations, key)
			continue
		}
		b, err := encodeMap(m) // map keys are sorted: the annotation is deterministic
		if err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[key] = string(b)
	}
	if len(rec.dryRun) == 0 {
		delete(pod.Annotations, v1alpha1.AnnotationDryRun)
	} else {
		b, err := json.Marshal(rec.dryRun) // sorted keys
		if err != nil {
			return fmt.Errorf("encoding %s: %w", v1alpha1.AnnotationDryRun, err)
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[v1alpha1.AnnotationDryRun] = string(b)
	}
	if len(rec.originals) > 0 {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[v1alpha1.LabelRewritten] = "true"
	} else {
		delete(pod.Labels, v1alpha1.LabelRewritten)
	}
	return nil
}

// encodeMap is json.Marshal(m), byte for byte, written directly when every key and value is
// printable ASCII that json.Marshal copies as it is (no quote, backslash or HTML character to
// escape): the common case, at a fraction of the reflection's cost.
func encodeMap(m map[string]string) ([]byte, error) {
	keys := make([]string, 0, len(m))
	size := 2
	for k, v := range m {
		if !plainJSON(k) || !plainJSON(v) {
			return json.Marshal(m)
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':', '"')
		b = append(b, m[k]...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// plainJSON reports whether json.Marshal writes s between quotes unchanged.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func hasPullSecret(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name })
}

// readRawMap decodes kuik.enix.io/dry-run the way readMap decodes the others, nil when absent
// (most pods: no allocation).
func readRawMap(annotations map[string]string, key string) map[string]json.RawMessage {
	v, ok := annotations[key]
	if !ok || v == "" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil
	}
	return m
}

// readMap decodes one of kuik's JSON map annotations. kuik never writes a malformed one, so a
// malformed value (or JSON null) is someone else's and reads as empty: the record is dropped
// and rewritten rather than shielding the pod's other records from verification.
func readMap(annotations map[string]string, key string) map[string]string {
	m := map[string]string{}
	v, ok := annotations[key]
	if !ok || v == "" {
		return m
	}
	if err := json.Unmarshal([]byte(v), &m); err != nil || m == nil {
		return map[string]string{}
	}
	return m
}
