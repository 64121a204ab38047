package webhook

import (
	"maps"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/route"
)

// before is what a patch is computed against: the parts of the pod route.Route may change.
type before struct {
	annotations, labels map[string]string
	hadAnnotations      bool
	hadLabels           bool
	pullSecrets         int
	hadPullSecrets      bool
}

func snapshot(pod *corev1.Pod) before {
	return before{
		annotations:    maps.Clone(pod.Annotations),
		labels:         maps.Clone(pod.Labels),
		hadAnnotations: pod.Annotations != nil,
		hadLabels:      pod.Labels != nil,
		pullSecrets:    len(pod.Spec.ImagePullSecrets),
		hadPullSecrets: pod.Spec.ImagePullSecrets != nil,
	}
}

// patch is the JSON patch from the snapshot to the routed pod. route.Route knows exactly what it
// changed, so the patch is written directly rather than diffed from two serializations, which
// would cost more than the routing itself.
func patch(b before, pod *corev1.Pod, decisions []route.Decision) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	for _, d := range decisions {
		if d.Image != d.Original {
			ops = append(ops, jsonpatch.NewOperation("replace", d.Path, d.Image))
		}
	}
	ops = append(ops, mapOps("/metadata/annotations", b.hadAnnotations, b.annotations, pod.Annotations)...)
	ops = append(ops, mapOps("/metadata/labels", b.hadLabels, b.labels, pod.Labels)...)
	if added := pod.Spec.ImagePullSecrets[min(b.pullSecrets, len(pod.Spec.ImagePullSecrets)):]; len(added) > 0 {
		if !b.hadPullSecrets {
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/imagePullSecrets", refs(added)))
		} else {
			for _, r := range added {
				ops = append(ops, jsonpatch.NewOperation("add", "/spec/imagePullSecrets/-", map[string]any{"name": r.Name}))
			}
		}
	}
	return ops
}

func mapOps(path string, existed bool, old, cur map[string]string) []jsonpatch.Operation {
	var changed, removed []string
	for k, v := range cur {
		if ov, ok := old[k]; !ok || ov != v {
			changed = append(changed, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			removed = append(removed, k)
		}
	}
	if len(changed) == 0 && len(removed) == 0 {
		return nil
	}
	if !existed {
		whole := make(map[string]any, len(cur))
		for k, v := range cur {
			whole[k] = v
		}
		return []jsonpatch.Operation{jsonpatch.NewOperation("add", path, whole)}
	}
	slices.Sort(changed)
	slices.Sort(removed)
	ops := make([]jsonpatch.Operation, 0, len(changed)+len(removed))
	for _, k := range removed {
		ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escape(k), nil))
	}
	for _, k := range changed {
		// "add" on an existing member replaces it (RFC 6902 §4.1).
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escape(k), cur[k]))
	}
	return ops
}

func refs(rs []corev1.LocalObjectReference) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		out[i] = map[string]any{"name": r.Name}
	}
	return out
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escape makes a map key a JSON pointer token (RFC 6901).
func escape(s string) string { return pointerEscaper.Replace(s) }
