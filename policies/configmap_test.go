package policies_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The kuik-configmap-writes policy (policies/configmap-writes.yaml) and its messages.
const (
	configMapPolicyName = "kuik-configmap-writes"
	msgCMName           = "the kuik secret-syncer may only write ConfigMaps named kuik-retain-*"
	msgCMNamespace      = "the kuik secret-syncer may only write ConfigMaps in namespace kuik-system"
	msgCMLabel          = "the kuik secret-syncer may only write ConfigMaps labelled app.kubernetes.io/managed-by=kuik-secret-syncer"
	msgCMReserved       = "ConfigMaps named kuik-retain-* in namespace kuik-system are reserved to the kuik secret-syncer"
	msgCMContent        = "an update by anyone else must leave data, binaryData, labels and immutable unchanged"
	msgCMOwners         = "an update by anyone else must leave ownerReferences unchanged (only the garbage collector may remove one)"
)

// waitConfigMapPolicyBound polls with dry-run creates until the syncer is refused a ConfigMap
// outside its names: policies bind asynchronously.
func waitConfigMapPolicyBound(t *testing.T) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"}}
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = syncerClient(t).CoreV1().ConfigMaps(releaseNamespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "'"+configMapPolicyName+"'"), nil
	})
	if err != nil {
		t.Fatalf("policy %s never refused the syncer (last: %v): %v", configMapPolicyName, last, err)
	}
}

// record is the syncer's retention record of a new ImageAlternative, exactly as the syncer
// applies it (syncer.RetentionApplyConfiguration), in namespace ns, owned by the resource and by a
// second ImageAlternative (so that the garbage collector has an ownerReference to remove).
func record(t *testing.T, ns string) *corev1ac.ConfigMapApplyConfiguration {
	t.Helper()
	o := owner(t)
	r := &syncer.Resource{Kind: routing.KindImageAlternative, Name: o.Name, UID: o.UID}
	ac, err := syncer.RetentionApplyConfiguration(r, ns, map[string]syncer.Usage{
		"team-a": {"quay.io/acme/foo": {LastUsed: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	second := owner(t)
	return ac.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(second.APIVersion).WithKind(second.Kind).
		WithName(second.Name).WithUID(second.UID))
}

// seedRecord has the syncer apply a fresh retention record in the release namespace and
// returns it.
func seedRecord(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	cm, err := syncerClient(t).CoreV1().ConfigMaps(releaseNamespace).Apply(t.Context(), record(t, releaseNamespace), metav1.ApplyOptions{FieldManager: syncer.FieldManager, Force: true})
	if err != nil {
		t.Fatalf("the syncer could not seed its retention record: %v", err)
	}
	if len(cm.OwnerReferences) != 2 || !strings.HasPrefix(cm.Name, "kuik-retain-imagealternative-") {
		t.Fatalf("seeded record %s has owners %+v, want two", cm.Name, cm.OwnerReferences)
	}
	return cm
}

func plainConfigMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"team-a": "{}"}}
}

// TestRetentionRecordMatrix: each ConfigMap write, by whom, and the kuik-configmap-writes
// policy's answer (an empty want is admitted). The secret-syncer writes only its retention
// records (kuik-retain-*, labelled, in the release namespace); nobody else may create one
// there, nor change one except as secret-writes.yaml lets Secrets be changed.
func TestRetentionRecordMatrix(t *testing.T) {
	setup(t)
	type write func(ctx context.Context, cs kubernetes.Interface, ns string) error
	// in is the namespace written to: "" for the case's own namespace, else the one given.
	create := func(cm *corev1.ConfigMap, in string) write {
		return func(ctx context.Context, cs kubernetes.Interface, ns string) error {
			if in != "" {
				ns = in
			}
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
	}
	// update seeds a record as the syncer, lets edit change it, and sends it back with an
	// update (kubectl replace).
	update := func(edit func(cm *corev1.ConfigMap)) (write, func(t *testing.T, ns string)) {
		var seeded *corev1.ConfigMap
		return func(ctx context.Context, cs kubernetes.Interface, _ string) error {
				cm := seeded.DeepCopy()
				edit(cm)
				_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Update(ctx, cm, metav1.UpdateOptions{})
				return err
			}, func(t *testing.T, _ string) {
				seeded = seedRecord(t)
			}
	}
	// patch seeds a record, then sends the patch that makePatch builds from it.
	patch := func(pt types.PatchType, makePatch func(t *testing.T, cm *corev1.ConfigMap) []byte) (write, func(t *testing.T, ns string)) {
		var seeded *corev1.ConfigMap
		var p []byte
		return func(ctx context.Context, cs kubernetes.Interface, _ string) error {
				_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Patch(ctx, seeded.Name, pt, p, metav1.PatchOptions{})
				return err
			}, func(t *testing.T, _ string) {
				seeded = seedRecord(t)
				p = makePatch(t, seeded)
			}
	}
	// removeSecondOwner is the strategic merge patch the garbage collector sends to drop an
	// ownerReference (see gcRemoveOwnerPatch).
	removeSecondOwner := func(t *testing.T, cm *corev1.ConfigMap) []byte {
		t.Helper()
		p, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":             cm.UID,
			"ownerReferences": []any{map[string]any{"$patch": "delete", "uid": cm.OwnerReferences[1].UID}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	removeSecondOwnerAndData := func(t *testing.T, cm *corev1.ConfigMap) []byte {
		t.Helper()
		return []byte(`{"metadata":{"ownerReferences":[{"$patch":"delete","uid":"` + string(cm.OwnerReferences[1].UID) + `"}]},"data":{"team-b":"{}"}}`)
	}
	foreignOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0c9d1c2e-0000-4000-8000-000000000011"}

	type tc struct {
		by    identity
		write write
		setup func(t *testing.T, ns string)
		want  string // "" admitted, else a message the refusal carries
	}
	cases := map[string]tc{
		// The syncer's own writes.
		"syncer applies its retention record": {by: asSyncer, write: func(ctx context.Context, cs kubernetes.Interface, _ string) error {
			_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Apply(ctx, record(t, releaseNamespace), metav1.ApplyOptions{FieldManager: syncer.FieldManager, Force: true})
			return err
		}},
		"syncer re-applies its retention record with new data": func() tc {
			var seeded *corev1.ConfigMap
			return tc{by: asSyncer, setup: func(t *testing.T, _ string) { seeded = seedRecord(t) },
				write: func(ctx context.Context, cs kubernetes.Interface, _ string) error {
					ac := corev1ac.ConfigMap(seeded.Name, releaseNamespace).WithLabels(seeded.Labels).WithData(map[string]string{"team-b": "{}"})
					_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: syncer.FieldManager, Force: true})
					return err
				}}
		}(),
		"syncer creates a ConfigMap outside its names in the release namespace": {by: asSyncer, write: create(plainConfigMap("kuik-webhook-config", managed), releaseNamespace), want: msgCMName},
		"syncer creates a ConfigMap whose name only contains the prefix":        {by: asSyncer, write: create(plainConfigMap("x-kuik-retain-a", managed), releaseNamespace), want: msgCMName},
		"syncer creates a ConfigMap in another namespace":                       {by: asSyncer, write: create(plainConfigMap("app-config", nil), ""), want: msgCMName},
		"syncer creates a retention record in another namespace":                {by: asSyncer, write: create(plainConfigMap("kuik-retain-imagealternative-a", managed), ""), want: msgCMNamespace},
		"syncer creates a retention record without the label":                   {by: asSyncer, write: create(plainConfigMap("kuik-retain-imagealternative-a", nil), releaseNamespace), want: msgCMLabel},
		"syncer creates a retention record with another manager": {by: asSyncer, want: msgCMLabel,
			write: create(plainConfigMap("kuik-retain-imagealternative-a", map[string]string{v1alpha1.LabelManagedBy: "Helm"}), releaseNamespace)},
		"syncer removes the managed-by label": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { delete(cm.Labels, v1alpha1.LabelManagedBy) })
			return tc{by: asSyncer, write: w, setup: s, want: msgCMLabel}
		}(),

		// Everyone else on the reserved name, in the release namespace.
		"cluster admin creates a retention record": {by: asAdmin, write: create(plainConfigMap("kuik-retain-imagealternative-a", managed), releaseNamespace), want: msgCMReserved},
		"alice applies a retention record": {by: asAlice, want: msgCMReserved, write: func(ctx context.Context, cs kubernetes.Interface, _ string) error {
			_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Apply(ctx, record(t, releaseNamespace), metav1.ApplyOptions{FieldManager: syncer.FieldManager, Force: true})
			return err
		}},
		"alice creates a retention record through generateName": {by: asAlice, want: msgCMReserved, write: func(ctx context.Context, cs kubernetes.Interface, _ string) error {
			cm := plainConfigMap("", nil)
			cm.GenerateName = "kuik-retain-"
			_, err := cs.CoreV1().ConfigMaps(releaseNamespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}},
		"the kuik webhook creates a retention record":  {by: asWebhook, write: create(plainConfigMap("kuik-retain-imagealternative-a", managed), releaseNamespace), want: msgCMReserved},
		"garbage collector creates a retention record": {by: asGC, write: create(plainConfigMap("kuik-retain-imagealternative-a", managed), releaseNamespace), want: msgCMReserved},
		"cluster admin changes the data": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.Data["victim-namespace"] = `{"quay.io/acme/foo":{"live":true}}` })
			return tc{by: asAdmin, write: w, setup: s, want: msgCMContent}
		}(),
		"alice adds binaryData": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"x": []byte("y")} })
			return tc{by: asAlice, write: w, setup: s, want: msgCMContent}
		}(),
		"cluster admin adds a label": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.Labels["team"] = "a" })
			return tc{by: asAdmin, write: w, setup: s, want: msgCMContent}
		}(),
		"cluster admin makes it immutable": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.Immutable = ptr.To(true) })
			return tc{by: asAdmin, write: w, setup: s, want: msgCMContent}
		}(),
		"cluster admin replaces it unchanged (encryption-at-rest rotation)": func() tc {
			w, s := update(func(*corev1.ConfigMap) {})
			return tc{by: asAdmin, write: w, setup: s}
		}(),
		"alice only adds an annotation": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"note": "x"} })
			return tc{by: asAlice, write: w, setup: s}
		}(),
		"cluster admin removes an ownerReference": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.OwnerReferences = cm.OwnerReferences[:1] })
			return tc{by: asAdmin, write: w, setup: s, want: msgCMOwners}
		}(),
		"cluster admin swaps the controller for another": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.OwnerReferences[0] = foreignOwner })
			return tc{by: asAdmin, write: w, setup: s, want: msgCMOwners}
		}(),
		"alice removes an ownerReference the way the garbage collector does": func() tc {
			w, s := patch(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asAlice, write: w, setup: s, want: msgCMOwners}
		}(),

		// The garbage collector.
		"garbage collector (its ServiceAccount) removes an ownerReference": func() tc {
			w, s := patch(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asGC, write: w, setup: s}
		}(),
		"garbage collector (kube-controller-manager's user) removes an ownerReference": func() tc {
			w, s := patch(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asKCM, write: w, setup: s}
		}(),
		"garbage collector removes an ownerReference and changes the data": func() tc {
			w, s := patch(types.StrategicMergePatchType, removeSecondOwnerAndData)
			return tc{by: asGC, write: w, setup: s, want: msgCMContent}
		}(),
		"garbage collector adds an ownerReference": func() tc {
			w, s := update(func(cm *corev1.ConfigMap) { cm.OwnerReferences = append(cm.OwnerReferences, foreignOwner) })
			return tc{by: asGC, write: w, setup: s, want: msgCMOwners}
		}(),

		// The name is reserved in the release namespace only.
		"alice creates a kuik-retain ConfigMap in her namespace": {by: asAlice, write: create(plainConfigMap("kuik-retain-imagealternative-a", managed), "")},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			if c.setup != nil {
				c.setup(t, ns)
			}
			err := c.write(t.Context(), client(t, c.by.cfg()), ns)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s was refused: %v", c.by.name, err)
			case c.want != "" && err == nil:
				t.Errorf("%s was admitted, want refused with %q", c.by.name, c.want)
			case c.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+configMapPolicyName+"'") || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s's refusal = %v, want a Forbidden from %s with %q", c.by.name, err, configMapPolicyName, c.want)
			}
		})
	}
}

// Deletes are not checked (policies/configmap-writes.yaml says why): anyone RBAC lets delete a
// retention record deletes it.
func TestRetentionRecordDeletesAreNotChecked(t *testing.T) {
	setup(t)
	cm := seedRecord(t)
	if err := client(t, asAlice.cfg()).CoreV1().ConfigMaps(releaseNamespace).Delete(t.Context(), cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("alice's delete of %s was refused: %v", cm.Name, err)
	}
	if _, err := admin(t).CoreV1().ConfigMaps(releaseNamespace).Get(t.Context(), cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s after its delete: %v, want NotFound", cm.Name, err)
	}
}

// ConfigMap writes that neither come from the syncer nor touch a reserved name never meet the
// policy, whoever makes them: in the release namespace, names close to the reserved prefix;
// elsewhere, the prefix itself.
func TestUnrelatedConfigMapWritesAreUnaffected(t *testing.T) {
	setup(t)
	for _, by := range []identity{asAdmin, asAlice, asWebhook, asGC} {
		t.Run(by.name, func(t *testing.T) {
			cs := client(t, by.cfg())
			ns := namespace(t)
			nsObj, err := admin(t).CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct{ ns, name string }{
				{releaseNamespace, "app-config-" + ns}, {releaseNamespace, "kuik-retained-" + ns}, {releaseNamespace, "x-kuik-retain-" + ns},
				{ns, "kuik-retain-imagealternative-a"}, {ns, "app-config"},
			} {
				cm, err := cs.CoreV1().ConfigMaps(w.ns).Create(t.Context(), plainConfigMap(w.name, nil), metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("create %s/%s: %v", w.ns, w.name, err)
				}
				cm.Data["k"] = "v"
				cm.Labels = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}
				cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: ns, UID: nsObj.UID}}
				cm.Immutable = ptr.To(true)
				if cm, err = cs.CoreV1().ConfigMaps(w.ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("update %s/%s: %v", w.ns, w.name, err)
				}
				if _, err := cs.CoreV1().ConfigMaps(w.ns).Patch(t.Context(), cm.Name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
					t.Fatalf("patch %s/%s: %v", w.ns, w.name, err)
				}
				if err := cs.CoreV1().ConfigMaps(w.ns).Delete(t.Context(), cm.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatalf("delete %s/%s: %v", w.ns, w.name, err)
				}
			}
		})
	}
}
