package syncer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Live fallbacks: what a routing resource routes live pods to now (status.activeFallbacks,
// status.fallbacks, status.fallbackPods and the kuik_secret_syncer_fallback_pods gauge). This
// file decides them (pure); fallbacks_controller.go keeps them written.

// MaxActiveFallbacks is the CRD's bound on status.activeFallbacks.
const MaxActiveFallbacks = 32

// maxFallbackRepository is the CRD's bound on original and routedTo. A repository the reference
// grammar accepts is far shorter; a longer one is left out rather than refused by the API server.
const maxFallbackRepository = 512

// FallbackPod is a rewritten pod with its creation time, which dates a fallback.
type FallbackPod struct {
	Pod
	// Created is the pod's metadata.creationTimestamp.
	Created metav1.Time
}

// Fallbacks is a resource's live fallbacks, as its status holds them.
type Fallbacks struct {
	// Active are the (original, routedTo) repository pairs, the most pods first, then by
	// original and routedTo; at most MaxActiveFallbacks.
	Active []v1alpha1.ActiveFallback
	// Total is the number of pairs, Active's length before the cut.
	Total int32
	// Pods is the number of distinct live pods with at least one container routed by the
	// resource.
	Pods int32
	// Ahead are the candidates ahead of where the pods of each pair were routed (the
	// original, and the resource's candidates before the one they got), one per repository,
	// at most MaxUnavailable: what the background checks watch (availability.go).
	Ahead []CheckTarget
}

// DecideFallbacks computes a resource's live fallbacks from its rewritten pods. A container
// counts when its pod is live (not terminating, not Succeeded nor Failed), the rewritten-by
// annotation names r for it, and the record is one the webhook could have written for r
// (routing.Index.Recorded, the check [UsedEntries] makes, but for every entry, injecting or
// not): r selects the pod and its namespace, and has, for the recorded original image, a
// candidate in the repository of the container's current image. A pod whose namespace is
// unknown (namespaceLabels reports false) does not count. Original and routedTo are
// repositories, without tag or digest, so a pod pinned by digest and one on a tag count in
// the same pair; since is the creation time of the oldest pod of a pair.
//
// A dry-run resource and a resource with policy None route no pod: they have none, whatever
// the pods' annotations claim.
func DecideFallbacks(r *Resource, pods []FallbackPod, namespaceLabels func(namespace string) (labels.Set, bool)) Fallbacks {
	if r == nil || r.index == nil || r.DryRun || r.Policy == v1alpha1.RewritePolicyNone {
		return Fallbacks{}
	}
	type pairKey struct{ original, routedTo string }
	type tally struct {
		pods  int32
		since metav1.Time
		last  int // the last pod counted, so that two containers of a pod count it once
		ahead []CheckTarget
		// namespaces are those of its pods: what ranks the pairs' ahead.
		namespaces map[string]struct{}
	}
	tallies := map[pairKey]*tally{}
	// repositories memoizes the parse of each distinct image of this computation.
	repositories := map[string]string{}
	repository := func(image string) string {
		if repo, ok := repositories[image]; ok {
			return repo
		}
		repo, err := routing.Repository(image)
		if err != nil || len(repo) > maxFallbackRepository {
			repo = ""
		}
		repositories[image] = repo
		return repo
	}
	src := r.Source()
	var total Fallbacks
	for i := range pods {
		p := &pods[i]
		if !p.Live || len(p.RewrittenBy) == 0 {
			continue
		}
		nsLabels, ok := namespaceLabels(p.Namespace)
		if !ok {
			continue
		}
		counted := false
		// The pod's containers, not the annotation's keys: a record naming no container counts
		// for nothing and costs nothing.
		for container, current := range p.Images {
			if p.RewrittenBy[container] != src {
				continue
			}
			original := p.Originals[container]
			if len(r.index.Recorded(original, current, src, p.Labels, nsLabels)) == 0 {
				continue
			}
			k := pairKey{original: repository(original), routedTo: repository(current)}
			if k.original == "" || k.routedTo == "" {
				continue
			}
			t := tallies[k]
			if t == nil {
				t = &tally{last: -1, namespaces: map[string]struct{}{}}
				tallies[k] = t
				t.ahead = ahead(r.index, original, current, p.Labels, nsLabels)
			}
			counted = true
			if t.last == i {
				continue
			}
			t.last = i
			t.pods++
			t.namespaces[p.Namespace] = struct{}{}
			if t.pods == 1 || p.Created.Before(&t.since) {
				t.since = p.Created
			}
		}
		if counted {
			total.Pods++
		}
	}
	if len(tallies) == 0 {
		return total
	}
	all := make([]v1alpha1.ActiveFallback, 0, len(tallies))
	for k, t := range tallies {
		all = append(all, v1alpha1.ActiveFallback{Original: k.original, RoutedTo: k.routedTo, Pods: t.pods, Since: t.since.Rfc3339Copy()})
	}
	slices.SortFunc(all, func(a, b v1alpha1.ActiveFallback) int {
		return cmp.Or(cmp.Compare(b.Pods, a.Pods), cmp.Compare(a.Original, b.Original), cmp.Compare(a.RoutedTo, b.RoutedTo))
	})
	// What is ahead, the pairs of the most namespaces first, then of the most pods: the
	// records one namespace forges cannot crowd out what the pods of several wait on.
	ranked := slices.Collect(maps.Keys(tallies))
	slices.SortFunc(ranked, func(a, b pairKey) int {
		ta, tb := tallies[a], tallies[b]
		return cmp.Or(cmp.Compare(len(tb.namespaces), len(ta.namespaces)), cmp.Compare(tb.pods, ta.pods),
			cmp.Compare(a.original, b.original), cmp.Compare(a.routedTo, b.routedTo))
	})
	seen := map[string]struct{}{}
	for i := 0; i < len(ranked) && len(total.Ahead) < MaxUnavailable; i++ {
		for _, c := range tallies[ranked[i]].ahead {
			if _, dup := seen[c.Repository]; dup || len(total.Ahead) >= MaxUnavailable {
				continue
			}
			seen[c.Repository] = struct{}{}
			total.Ahead = append(total.Ahead, c)
		}
	}
	slices.SortFunc(total.Ahead, func(a, b CheckTarget) int { return cmp.Compare(a.Repository, b.Repository) })
	total.Total = int32(len(all)) //nolint:gosec // at most one pair per container of the cached pods
	total.Active = slices.Clip(all[:min(len(all), MaxActiveFallbacks)])
	return total
}

// Holds reports whether a status already says exactly this.
func (f *Fallbacks) Holds(s *v1alpha1.RoutingStatus) bool {
	if s.Fallbacks != f.Total || s.FallbackPods != f.Pods || len(s.ActiveFallbacks) != len(f.Active) {
		return false
	}
	for i := range f.Active {
		a, b := &f.Active[i], &s.ActiveFallbacks[i]
		if a.Original != b.Original || a.RoutedTo != b.RoutedTo || a.Pods != b.Pods || !a.Since.Equal(&b.Since) {
			return false
		}
	}
	return true
}

// MergePatch is the JSON merge patch of the status subresource that writes these fallbacks and
// touches nothing else: the three fields, each removed (null) when empty, as omitempty leaves
// them.
func (f *Fallbacks) MergePatch() ([]byte, error) {
	status := map[string]any{"activeFallbacks": nil, "fallbacks": nil, "fallbackPods": nil}
	if len(f.Active) > 0 {
		status["activeFallbacks"] = f.Active
	}
	if f.Total > 0 {
		status["fallbacks"] = f.Total
	}
	if f.Pods > 0 {
		status["fallbackPods"] = f.Pods
	}
	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("encoding the fallbacks patch: %w", err)
	}
	return b, nil
}

// ahead lists the candidates of original, for a pod with these labels, before the first that
// explains current.
func ahead(ix *routing.Index, original, current string, podLabels, nsLabels labels.Set) []CheckTarget {
	cands, err := ix.Candidates(original, podLabels, nsLabels)
	if err != nil {
		return nil
	}
	var out []CheckTarget
	for i := range cands {
		c := &cands[i]
		if c.Explains(current) {
			break
		}
		repo := probe.RepositoryOf(c.Reference)
		if len(repo) > maxFallbackRepository {
			continue
		}
		out = append(out, CheckTarget{Repository: repo, Reference: c.Reference, Insecure: c.Insecure, Host: probe.Registry(c.Reference)})
	}
	return out
}
