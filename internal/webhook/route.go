package webhook

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

// Chooser returns the index of the first available candidate in list order, or -1 when none is.
// ownPullSecrets says whether the pod brings pull secrets of its own (which kuik cannot read).
type Chooser func(ctx context.Context, candidates []routing.Candidate, ownPullSecrets bool) int

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
}

// Scope says which containers of a pod Route may change and what else it may touch.
type Scope struct {
	// EphemeralOnly routes only ephemeral containers absent from Previous: the
	// pods/ephemeralcontainers subresource lets nothing but spec.ephemeralContainers change, so
	// neither annotations nor imagePullSecrets can be written, and a candidate whose credential
	// would have to be injected cannot win.
	EphemeralOnly bool
	Previous      *corev1.Pod
}

// Route routes every container of pod not routed before and modifies pod in place. It returns
// the decisions for the containers it looked at; the pod changed when any decision has
// Image != Original or a reason was recorded.
func Route(ctx context.Context, pod *corev1.Pod, namespaceLabels labels.Set, ix *routing.Index, choose Chooser, scope Scope) ([]Decision, error) {
	originals, err := readMap(pod.Annotations, v1alpha1.AnnotationOriginalImages)
	if err != nil {
		return nil, err
	}
	rewrittenBy, err := readMap(pod.Annotations, v1alpha1.AnnotationRewrittenBy)
	if err != nil {
		return nil, err
	}
	reasons, err := readMap(pod.Annotations, v1alpha1.AnnotationReason)
	if err != nil {
		return nil, err
	}

	podLabels := labels.Set(pod.Labels)
	var decisions []Decision
	route := func(name, path string, image *string) {
		if _, done := originals[name]; done {
			return // routed by an earlier invocation
		}
		cands, err := ix.Candidates(*image, podLabels, namespaceLabels)
		if err != nil || len(cands) == 0 || (len(cands) == 1 && cands[0].Source.IsOriginal()) {
			// Unparsable images are the API server's and the kubelet's business; images no
			// resource covers are never probed.
			return
		}
		if scope.EphemeralOnly {
			cands = slices.DeleteFunc(slices.Clone(cands), func(c routing.Candidate) bool {
				return c.Inject && !hasPullSecret(pod, routing.PullSecretName(c.Source.Kind, c.Source.Name))
			})
		}
		d := Decision{Container: name, Path: path, Original: *image, Image: *image, Candidates: len(cands)}
		i := choose(ctx, cands, len(pod.Spec.ImagePullSecrets) > 0)
		switch {
		case i < 0:
			d.Reason = v1alpha1.ReasonNoAlternatives
		case cands[i].Source.IsOriginal():
			// The original is available: nothing to do or record.
		default:
			w := cands[i]
			d.Image, d.Source, d.Reason = w.Reference, w.Source, string(w.Policy)
			if w.Inject {
				d.PullSecret = routing.PullSecretName(w.Source.Kind, w.Source.Name)
			}
		}
		*image = d.Image
		decisions = append(decisions, d)
	}

	if scope.EphemeralOnly {
		seen := map[string]bool{}
		if scope.Previous != nil {
			for _, c := range scope.Previous.Spec.EphemeralContainers {
				seen[c.Name] = true
			}
		}
		for i := range pod.Spec.EphemeralContainers {
			c := &pod.Spec.EphemeralContainers[i]
			if !seen[c.Name] {
				route(c.Name, "/spec/ephemeralContainers/"+strconv.Itoa(i)+"/image", &c.Image)
			}
		}
		return decisions, nil
	}

	for i := range pod.Spec.InitContainers {
		route(pod.Spec.InitContainers[i].Name, "/spec/initContainers/"+strconv.Itoa(i)+"/image", &pod.Spec.InitContainers[i].Image)
	}
	for i := range pod.Spec.Containers {
		route(pod.Spec.Containers[i].Name, "/spec/containers/"+strconv.Itoa(i)+"/image", &pod.Spec.Containers[i].Image)
	}
	for i := range pod.Spec.EphemeralContainers {
		route(pod.Spec.EphemeralContainers[i].Name, "/spec/ephemeralContainers/"+strconv.Itoa(i)+"/image", &pod.Spec.EphemeralContainers[i].Image)
	}

	rewritten := false
	for _, d := range decisions {
		if d.Reason == "" {
			continue
		}
		reasons[d.Container] = d.Reason
		if d.Image == d.Original {
			continue
		}
		rewritten = true
		originals[d.Container] = d.Original
		rewrittenBy[d.Container] = d.Source.String()
		if d.PullSecret != "" && !hasPullSecret(pod, d.PullSecret) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: d.PullSecret})
		}
	}
	if len(reasons) == 0 {
		return decisions, nil
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for key, m := range map[string]map[string]string{
		v1alpha1.AnnotationOriginalImages: originals,
		v1alpha1.AnnotationRewrittenBy:    rewrittenBy,
		v1alpha1.AnnotationReason:         reasons,
	} {
		if len(m) == 0 {
			continue
		}
		b, err := json.Marshal(m) // map keys are sorted: the annotation is deterministic
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", key, err)
		}
		pod.Annotations[key] = string(b)
	}
	if rewritten {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[v1alpha1.LabelRewritten] = "true"
	}
	return decisions, nil
}

func hasPullSecret(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name })
}

// readMap decodes a JSON map annotation; a malformed one is an error, so the pod is admitted
// unchanged rather than having someone else's annotation overwritten.
func readMap(annotations map[string]string, key string) (map[string]string, error) {
	m := map[string]string{}
	v, ok := annotations[key]
	if !ok || v == "" {
		return m, nil
	}
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON map of strings: %w", key, err)
	}
	return m, nil
}
