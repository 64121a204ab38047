package syncer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The retention record of an OnFailure resource keeps its entries' use across restarts and
// leader changes: a ConfigMap kuik-retain-<kind>-<name> in the cluster resource namespace,
// labelled like the pull Secrets and owned by the resource (garbage-collected with it), whose
// data maps each namespace holding the resource's Secret to the use of its entries:
//
//	data:
//	  team-a: '{"quay.io/acme/bar":{"lastUsed":"2026-11-01T12:00:00Z"},"quay.io/acme/foo":{"live":true}}'
//
// An entry live pods use is kept as live, without a time, so a rollout or a resync writes nothing:
// the retention record changes only when an entry starts or stops being used, or expires. After a
// restart, an entry kept as live counts as used at the restart (its pods may have gone while no
// syncer ran), a retained one keeps its time. The syncer never reads Secrets outside the cluster
// resource namespace, so this is what it knows of the Secrets it wrote.

// retentionPrefix starts the name of every retention record; as long as the pull Secrets' prefix,
// so a retention record's name is its resource's pull Secret name with the prefix swapped.
const retentionPrefix = "kuik-retain-"

// RetentionName is the name of the retention record of a resource.
func RetentionName(kind routing.Kind, name string) string {
	return retentionPrefix + strings.TrimPrefix(routing.PullSecretName(kind, name), v1alpha1.PullSecretPrefix)
}

// retainedUse is the use of one entry as a retention record keeps it.
type retainedUse struct {
	Live     bool      `json:"live,omitempty"`
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// retainedUses is what a retention record keeps of a pair's usage: live entries without
// their time.
func retainedUses(u Usage) map[string]retainedUse {
	if len(u) == 0 {
		return nil
	}
	out := make(map[string]retainedUse, len(u))
	for k, e := range u {
		if e.Live {
			out[k] = retainedUse{Live: true}
		} else {
			out[k] = retainedUse{LastUsed: e.LastUsed.UTC()}
		}
	}
	return out
}

// sameRetention reports whether two usages are kept alike, i.e. whether going from one to the
// other needs no write of the retention record.
func sameRetention(a, b Usage) bool {
	return maps.Equal(retainedUses(a), retainedUses(b))
}

// Record is a resource's retention record, read back.
type Retention struct {
	Resource ResourceKey
	// UID is the resource's when the retention record was written: a resource recreated under the same
	// name starts afresh.
	UID types.UID
	// Usage by namespace, as [Retain] takes it: a live entry has no time, so it counts as used
	// at the next decision.
	Usage map[string]Usage
}

// RetentionApplyConfiguration is the server-side apply request of a resource's retention record
// holding the usage of its pairs (namespace -> usage; empty usages are left out) in namespace,
// the cluster resource namespace.
func RetentionApplyConfiguration(r *Resource, namespace string, usage map[string]Usage) (*corev1ac.ConfigMapApplyConfiguration, error) {
	data := map[string]string{}
	for ns, u := range usage {
		rec := retainedUses(u)
		if len(rec) == 0 {
			continue
		}
		b, err := json.Marshal(rec) // sorted keys: the retention record is deterministic
		if err != nil {
			return nil, fmt.Errorf("encoding the retention record of %s: %w", r.Key(), err)
		}
		data[ns] = string(b)
	}
	return corev1ac.ConfigMap(RetentionName(r.Kind, r.Name), namespace).
		WithLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind(string(r.Kind)).WithName(r.Name).WithUID(r.UID).
			WithController(true)).
		WithData(data), nil
}

// RetentionHash identifies the content of a retention record's apply request, to skip one that
// would change nothing.
func RetentionHash(ac *corev1ac.ConfigMapApplyConfiguration) (string, error) {
	b, err := json.Marshal(ac)
	if err != nil {
		return "", fmt.Errorf("hashing retention record: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ErrInvalidRetention is wrapped by ParseRetention for a ConfigMap that is not a retention record,
// or a namespace of one that does not parse.
var ErrInvalidRetention = errors.New("invalid retention record")

// ParseRetention reads a retention record. A namespace whose value does not parse is left out and
// reported; a ConfigMap that is not the retention record of the routing resource controlling it is
// refused (the zero Record).
func ParseRetention(cm *corev1.ConfigMap) (Retention, error) {
	var rec Retention
	for _, o := range cm.OwnerReferences {
		if o.Controller == nil || !*o.Controller || o.APIVersion != v1alpha1.GroupVersion.String() {
			continue
		}
		if kind := routing.Kind(o.Kind); kind == routing.KindImageAlternative || kind == routing.KindImageMirror {
			rec.Resource, rec.UID = ResourceKey{Kind: kind, Name: o.Name}, o.UID
		}
	}
	if rec.Resource.Name == "" {
		return Retention{}, fmt.Errorf("%w: configmap %s/%s has no routing resource as controller", ErrInvalidRetention, cm.Namespace, cm.Name)
	}
	if want := RetentionName(rec.Resource.Kind, rec.Resource.Name); cm.Name != want {
		return Retention{}, fmt.Errorf("%w: configmap %s/%s is controlled by %s, whose record is %s", ErrInvalidRetention, cm.Namespace, cm.Name, rec.Resource, want)
	}
	var errs []error
	rec.Usage = make(map[string]Usage, len(cm.Data))
	for _, ns := range slices.Sorted(maps.Keys(cm.Data)) {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%w: %s: key %q is not a namespace name", ErrInvalidRetention, cm.Name, ns))
			continue
		}
		var uses map[string]retainedUse
		if err := json.Unmarshal([]byte(cm.Data[ns]), &uses); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: namespace %s: %w", ErrInvalidRetention, cm.Name, ns, err))
			continue
		}
		u := make(Usage, len(uses))
		for key, use := range uses {
			switch {
			case use.Live:
				u[key] = EntryUse{Live: true}
			case !use.LastUsed.IsZero():
				u[key] = EntryUse{LastUsed: use.LastUsed}
			}
		}
		if len(u) > 0 {
			rec.Usage[ns] = u
		}
	}
	return rec, errors.Join(errs...)
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
			// A use in the future (a restored retention record someone edited, or a leader's clock
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
