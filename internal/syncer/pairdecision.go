package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

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
