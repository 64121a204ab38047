package route

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

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
	rec := readRecords(pod.Annotations)
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
		d := Decision{Container: c.name, Path: c.path(), Original: *c.image, Image: *c.image, Candidates: len(cands)}
		if !trivial(cands) {
			decide(&d, cands, chosen[k])
		}
		if dry != nil && dryLists[k] != nil {
			would := Decision{Original: *c.image, Image: *c.image}
			decide(&would, dryLists[k], chosen[len(lists)+k])
			d.DryRun = dryRunOf(&d, &would, dryLists[k])
			if d.DryRun != nil && d.DryRun.Resource == (routing.Source{}) {
				// No candidate of a dry-run resource in the list: one retired the original
				// or lent it a credential.
				if src, ok := dry.DryRunSource(d.Original, podLabels, namespaceLabels); ok {
					d.DryRun.Resource = src
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

	if rec.originals == nil && rec.rewrittenBy == nil && rec.reasons == nil {
		// A pod without records yet (most): its three records in one allocation.
		n := 0
		for _, d := range decisions {
			if d.Reason != "" {
				n++
			}
		}
		if n > 0 {
			buf := make(entries, 3*n)
			rec.originals, rec.rewrittenBy, rec.reasons = buf[:0:n], buf[n:n:2*n], buf[2*n:2*n]
		}
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
		rec.reasons.delete(d.Container)
		if d.Reason == "" {
			continue
		}
		rec.reasons.set(d.Container, d.Reason)
		if d.Image == d.Original {
			continue
		}
		rec.originals.set(d.Container, d.Original)
		rec.rewrittenBy.set(d.Container, d.Source.String())
		if d.PullSecret != "" && !hasPullSecret(pod, d.PullSecret) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: d.PullSecret})
		}
	}
	return decisions, rec.write(pod)
}

// container is one image field of the pod: the index-th of list (initContainers, containers
// or ephemeralContainers).
type container struct {
	name, list string
	index      int
	image      *string
}

// path is the JSON pointer of the container's image field, e.g. /spec/containers/0/image.
func (c container) path() string {
	return "/spec/" + c.list + "/" + strconv.Itoa(c.index) + "/image"
}

func containersOf(pod *corev1.Pod) []container {
	out := make([]container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers)+len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.InitContainers {
		out = append(out, container{pod.Spec.InitContainers[i].Name, "initContainers", i, &pod.Spec.InitContainers[i].Image})
	}
	for i := range pod.Spec.Containers {
		out = append(out, container{pod.Spec.Containers[i].Name, "containers", i, &pod.Spec.Containers[i].Image})
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, container{pod.Spec.EphemeralContainers[i].Name, "ephemeralContainers", i, &pod.Spec.EphemeralContainers[i].Image})
	}
	return out
}

// trivial reports whether a candidate list leaves nothing to decide: empty (the original sits
// on an unavailable entry and nothing else is left) or the original alone.
func trivial(cands []routing.Candidate) bool {
	return len(cands) == 0 || (len(cands) == 1 && cands[0].Source.IsOriginal())
}

func hasPullSecret(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name })
}
