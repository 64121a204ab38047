package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Pod is what the syncer reads of a rewritten pod. Its labels and kuik's annotations are the pod
// author's to write (at creation and at any later update, which the webhook never sees): they
// are claims, which [UsedEntries] checks against the routing core before they count.
type Pod struct {
	Namespace string
	Name      string
	// Labels are the pod's labels, for the resources' podSelector.
	Labels labels.Set
	// Live: not terminating and not finished, so its containers may still pull.
	Live bool
	// Images maps every container (init, regular, ephemeral) to its current image.
	Images map[string]string
	// Originals maps a rewritten container to the image it was rewritten from
	// (kuik.enix.io/original-images).
	Originals map[string]string
	// RewrittenBy maps a rewritten container to the resource whose entry it was rewritten to
	// (kuik.enix.io/rewritten-by).
	RewrittenBy map[string]routing.Source
}

// PodFromObject reads a pod. An annotation that does not parse counts as no rewrite: the webhook
// writes valid JSON, so only someone else's edit yields one.
func PodFromObject(p *corev1.Pod) Pod {
	out := Pod{
		Namespace: p.Namespace,
		Name:      p.Name,
		Labels:    p.Labels,
		Live: p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed,
		Images: make(map[string]string, len(p.Spec.InitContainers)+len(p.Spec.Containers)+len(p.Spec.EphemeralContainers)),
	}
	for i := range p.Spec.InitContainers {
		out.Images[p.Spec.InitContainers[i].Name] = p.Spec.InitContainers[i].Image
	}
	for i := range p.Spec.Containers {
		out.Images[p.Spec.Containers[i].Name] = p.Spec.Containers[i].Image
	}
	for i := range p.Spec.EphemeralContainers {
		out.Images[p.Spec.EphemeralContainers[i].Name] = p.Spec.EphemeralContainers[i].Image
	}
	out.Originals = annotationMap(p.Annotations, v1alpha1.AnnotationOriginalImages)
	out.RewrittenBy = rewrittenBy(p.Annotations)
	return out
}

// annotationMap reads one of kuik's JSON map annotations; nil when absent or not a JSON object of
// strings.
func annotationMap(annotations map[string]string, key string) map[string]string {
	raw, ok := annotations[key]
	if !ok {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil
	}
	return m
}

func rewrittenBy(annotations map[string]string) map[string]routing.Source {
	m := annotationMap(annotations, v1alpha1.AnnotationRewrittenBy)
	if m == nil {
		return nil
	}
	out := make(map[string]routing.Source, len(m))
	for container, s := range m {
		src, err := routing.ParseSource(s)
		if err != nil || src.IsOriginal() {
			continue
		}
		out[container] = src
	}
	return out
}

// Sources lists the resources that rewrote at least one container of the pod, sorted.
func PodSources(annotations map[string]string) []routing.Source {
	var out []routing.Source
	for _, s := range rewrittenBy(annotations) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b routing.Source) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// UsedEntries returns the auths keys of the injecting entries of r that serve live pods of a
// namespace with these labels, counting only the records the webhook could have written: for
// each container the pod's rewritten-by annotation attributes to r, r must select the pod and
// the namespace and have, for the container's recorded original image, an injecting candidate
// whose reference is the container's current image — the routing core's own matching, selectors
// and order decide (routing.Index.Candidates). A forged record (any pod author can label a pod
// kuik.enix.io/rewritten=true and write kuik's annotations, at creation or later) counts for
// nothing, so it cannot bring a credential into a namespace or for a pod the resource does not
// route, nor one of an entry the pod's image could not have been routed to. Sorted, without
// duplicates.
func UsedEntries(r *Resource, pods []Pod, namespaceLabels labels.Set) []string {
	src := r.Source()
	var keys []string
	for i := range pods {
		p := &pods[i]
		if !p.Live {
			continue
		}
		for container, s := range p.RewrittenBy {
			if s != src {
				continue
			}
			for _, k := range r.recordedKeys(p.Originals[container], p.Images[container], p.Labels, namespaceLabels) {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// EntryUse is when an entry was last used in one namespace.
type EntryUse struct {
	// Live: a live pod used the entry at the last decision.
	Live bool
	// LastUsed is the last time the entry was seen in use.
	LastUsed time.Time
}

// Usage is the entries' use in one namespace, by auths key.
type Usage map[string]EntryUse

// Retain decides which entries an OnFailure Secret keeps: those live pods use now, and those
// used within the retention, so that the pods of a rollout or a scale-up during an outage find
// them. An entry that was live at the previous decision and is not any more was last used now
// (its pods went away between the two). It returns the keys kept (sorted), the usage to keep
// for the next decision, and the earliest time a retained entry expires (zero if none).
func Retain(now time.Time, retention time.Duration, live []string, prev Usage) (keep []string, next Usage, expiry time.Time) {
	next = make(Usage, len(live)+len(prev))
	for _, k := range live {
		next[k] = EntryUse{Live: true, LastUsed: now}
		keep = append(keep, k)
	}
	for k, u := range prev {
		if _, ok := next[k]; ok {
			continue
		}
		last := u.LastUsed
		if u.Live || last.After(now) {
			// A use in the future (a restored record someone edited, or a leader's clock
			// ahead) counts as a use now: no entry outlasts the retention.
			last = now
		}
		until := last.Add(retention)
		if !now.Before(until) {
			continue
		}
		next[k] = EntryUse{LastUsed: last}
		keep = append(keep, k)
		if expiry.IsZero() || until.Before(expiry) {
			expiry = until
		}
	}
	slices.Sort(keep)
	return keep, next, expiry
}

// PairInput is everything the Secret of one (resource, namespace) pair depends on.
type PairInput struct {
	Resource   *Resource
	Resolution *Resolution
	Namespace  string
	// NamespaceLabels are the namespace's labels, for the resource's namespaceSelector.
	NamespaceLabels labels.Set
	// Pods are the rewritten pods of the namespace (any resource, any state).
	Pods []Pod
	// Usage is what the previous decision for the pair returned; nil at first.
	Usage     Usage
	Now       time.Time
	Retention time.Duration
}

// PairDecision is the Secret one pair needs.
type PairDecision struct {
	// Needed: the resource wants its Secret in the namespace. When false, the Secret holds no
	// entry: write it only if it was written before (never delete it).
	Needed bool
	// Keys are the auths keys wanted, resolved or not; the Secret holds those that resolved.
	Keys []string
	// Secret is the desired Secret, with {"auths":{}} when nothing is wanted.
	Secret *corev1.Secret
	// Usage is to be passed back as PairInput.Usage next time (OnFailure).
	Usage Usage
	// Expiry is when a retained entry expires and the pair must be decided again; zero if none.
	Expiry time.Time
}

// DecidePair decides the Secret of one pair:
//
//   - Always: in every namespace the namespaceSelector selects, every injecting entry;
//   - OnFailure: in a namespace the namespaceSelector selects, the entries that serve live pods
//     the resource really rewrote ([UsedEntries]), plus those used within the retention; a
//     namespace out of scope gets none, retained ones included (the usage is dropped);
//   - a resource none of whose entries injects, or an ImageMirror with policy None, wants none.
func DecidePair(in PairInput) (PairDecision, error) {
	r := in.Resource
	var d PairDecision
	if r.Injecting() {
		switch r.Policy {
		case v1alpha1.RewritePolicyAlways:
			if r.SelectsNamespace(in.NamespaceLabels) {
				for i := range r.Entries {
					if e := &r.Entries[i]; e.Injects && !slices.Contains(d.Keys, e.Key) {
						d.Keys = append(d.Keys, e.Key)
					}
				}
				slices.Sort(d.Keys)
			}
		case v1alpha1.RewritePolicyOnFailure:
			if !r.SelectsNamespace(in.NamespaceLabels) {
				break
			}
			prev := make(Usage, len(in.Usage))
			for k, u := range in.Usage {
				if r.injectsKey(k) {
					prev[k] = u
				}
			}
			d.Keys, d.Usage, d.Expiry = Retain(in.Now, in.Retention, UsedEntries(r, in.Pods, in.NamespaceLabels), prev)
		}
	}
	d.Needed = len(d.Keys) > 0
	data, err := in.Resolution.Data(d.Keys)
	if err != nil {
		return d, fmt.Errorf("%s in namespace %s: %w", r.Key(), in.Namespace, err)
	}
	d.Secret = DesiredSecret(r, in.Namespace, data)
	return d, nil
}

func (r *Resource) injectsKey(key string) bool {
	for i := range r.Entries {
		if r.Entries[i].Injects && r.Entries[i].Key == key {
			return true
		}
	}
	return false
}

// DesiredSecret is the pull Secret of a resource in a namespace, holding data as its
// .dockerconfigjson.
func DesiredSecret(r *Resource, namespace string, data []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      r.SecretName(),
			Namespace: namespace,
			Labels:    map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(),
				Kind:       string(r.Kind),
				Name:       r.Name,
				UID:        r.UID,
				Controller: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
}

// ApplyConfiguration is the server-side apply request for a desired Secret: exactly the fields
// the syncer owns.
func ApplyConfiguration(s *corev1.Secret) *corev1ac.SecretApplyConfiguration {
	ac := corev1ac.Secret(s.Name, s.Namespace).
		WithLabels(s.Labels).
		WithType(s.Type).
		WithData(s.Data)
	for _, o := range s.OwnerReferences {
		ac.WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(o.APIVersion).WithKind(o.Kind).WithName(o.Name).WithUID(o.UID).
			WithController(ptr.Deref(o.Controller, false)))
	}
	return ac
}

// Hash identifies the content of an apply request, to skip one that would change nothing.
func Hash(ac *corev1ac.SecretApplyConfiguration) (string, error) {
	b, err := json.Marshal(ac)
	if err != nil {
		return "", fmt.Errorf("hashing apply configuration: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// maxConditionMessage is the API's bound on a condition message.
const maxConditionMessage = 32768

func joinLeftOut(list []LeftOut) string {
	msgs := make([]string, len(list))
	for i, l := range list {
		msgs[i] = fmt.Sprintf("%s (%s): %s: %s", l.Entry, l.Path, l.Reason, l.Message)
	}
	return strings.Join(msgs, "; ")
}

// DesiredStatus is the status of a resource: its Ready condition from the resolution of its
// entries, the generation acted on, the number of entries and of namespaces holding its Secret.
// It reports whether it differs from current; an unchanged condition keeps its transition time.
func DesiredStatus(r *Resource, res *Resolution, namespaces int32, current *v1alpha1.RoutingStatus, now metav1.Time) (v1alpha1.RoutingStatus, bool) {
	next := *current.DeepCopy()
	next.ObservedGeneration = r.Generation
	next.Entries = int32(len(r.Entries)) //nolint:gosec // at most 32 entries, bounded by the CRD
	next.Namespaces = namespaces
	cond := metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		ObservedGeneration: r.Generation,
		LastTransitionTime: now,
	}
	switch {
	case r.DryRun:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonDryRun, "dry run: no pod is routed and no pull secret is written; pods show what would be done in their kuik.enix.io/dry-run annotation"
	case !r.Injecting() && len(res.Warnings) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, res.Warnings[0].Reason
		cond.Message = "no entry injects a pull secret; " + joinLeftOut(res.Warnings)
	case !r.Injecting():
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonNothingToInject, "no entry injects a pull secret"
	case len(res.LeftOut) == 0 && len(res.Warnings) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, res.Warnings[0].Reason
		cond.Message = fmt.Sprintf("the credentials of %d injecting entries resolved; %s", res.Injecting, joinLeftOut(res.Warnings))
	case len(res.LeftOut) == 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonSynced
		cond.Message = fmt.Sprintf("the credentials of %d injecting entries resolved", res.Injecting)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, res.LeftOut[0].Reason
		cond.Message = joinLeftOut(res.LeftOut)
	}
	if len(cond.Message) > maxConditionMessage {
		cond.Message = cond.Message[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&next.Conditions, cond)
	return next, !equality.Semantic.DeepEqual(*current, next)
}
