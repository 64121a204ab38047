package route

import (
	"context"
	"slices"
	"strings"

	distref "github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"

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
	// Resource is the dry-run resource that makes the difference, for the metric; not recorded.
	Resource routing.Source `json:"-"`
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

// sameList reports whether two candidate lists would be probed and decided alike.
//
// It compares whole Candidates with ==, after clearing the fields that do not change a probe
// or a decision, so a field added to routing.Candidate is compared unless listed here (and a
// field that is not comparable fails to compile). A hand-written list of compared fields
// would silently ignore a new field that matters; TestSameListComparesEveryCandidateField
// checks the fields ignored here, one by one.
func sameList(a, b []routing.Candidate) bool {
	return slices.EqualFunc(a, b, func(x, y routing.Candidate) bool { return decisive(x) == decisive(y) })
}

// decisive is c without the fields sameList ignores (the ones it always ignored).
func decisive(c routing.Candidate) routing.Candidate {
	c.Trial = false  // every candidate of a dry-run list is a trial
	c.DryRun = false // a dry-run resource's candidate already differs by Source
	c.Policy = ""    // one per resource: given by Source
	// Where the entry sits: a probe and a decision use Reference, Auth and LookupPath.
	c.Entry, c.AuthPath = 0, ""
	return c
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
		out.Resource = dryCands[i].Source
	}
	if !would.Source.IsOriginal() {
		out.By = would.Source.String()
	} else {
		out.By = out.Resource.String()
	}
	return out
}
