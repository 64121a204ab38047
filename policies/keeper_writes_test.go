package policies_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keeper/inventory"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The keeper-writes policies (policies/keeper-writes.yaml) and their messages.
const (
	keeperSA              = "kuik-keeper"
	keeperPolicy          = "kuik-keeper-writes"
	keeperForbiddenPolicy = keeperPolicy + "-forbidden"
	keeperStatusPolicy    = keeperPolicy + "-status"
	msgKNamespace         = "the kuik keeper may only write ConfigMaps in namespace kuik-system"
	msgKName              = "the kuik keeper may only write ConfigMaps named kuik-keeper-inventory or kuik-keeper-inventory-<generation>-<id>-<index>"
	msgKManagedBy         = "the kuik keeper may only write ConfigMaps labelled app.kubernetes.io/managed-by=kuik-keeper"
	msgKRole              = "the kuik keeper may only write its inventory head labelled kuik.enix.io/inventory=head and its shards labelled kuik.enix.io/inventory=shard"
	msgKGeneration        = "the kuik keeper may only write inventory shards labelled kuik.enix.io/inventory-generation with their name's generation"
	msgKSecrets           = "the kuik keeper may not write Secrets"
	msgKPods              = "the kuik keeper may not delete or evict pods"
	msgKRouting           = "the kuik keeper may only write the status of ImageMirrors"
	msgKStatus            = "the kuik keeper may only change status.keep and the KeepReady condition of an ImageMirror"
	msgKConditions        = "the kuik keeper may only change the KeepReady condition of an ImageMirror, no other"
)

var (
	asKeeper   = identity{"keeper", func() *rest.Config { return cp.ConfigAsServiceAccount(releaseNamespace, keeperSA) }}
	imResource = v1alpha1.GroupVersion.WithResource("imagemirrors")
	keeperOnce sync.Once
)

// setupKeeper installs the chart's keeper-writes policies (rendered with keeper.enabled) and
// grants the keeper's ServiceAccount, cluster-wide, every write they bound, so that only the
// policies refuse.
func setupKeeper(t *testing.T) {
	t.Helper()
	setup(t)
	var err error
	keeperOnce.Do(func() { err = installKeeperPolicies(t.Context(), admin(t)) })
	if err != nil {
		t.Fatal(err)
	}
	// Policies bind asynchronously: wait until each refuses the keeper (dry runs).
	keeper := client(t, asKeeper.cfg())
	im := mirror(t)
	for policy, try := range map[string]func(context.Context) error{
		keeperPolicy: func(ctx context.Context) error {
			_, err := keeper.CoreV1().ConfigMaps(releaseNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		keeperForbiddenPolicy: func(ctx context.Context) error {
			_, err := keeper.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		keeperStatusPolicy: func(ctx context.Context) error {
			u := im.DeepCopy()
			_ = unstructured.SetNestedField(u.Object, int64(7), "status", "entries")
			_, err := keeperDynamic(t).Resource(imResource).UpdateStatus(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
	} {
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last = try(ctx)
			return last != nil && strings.Contains(last.Error(), "'"+policy+"'"), nil
		}); err != nil {
			t.Fatalf("policy %s never refused the keeper (last: %v): %v", policy, last, err)
		}
	}
}

func installKeeperPolicies(ctx context.Context, cs kubernetes.Interface) error {
	r, err := charts.Render(charts.Release{Name: "kuik", Namespace: releaseNamespace, Values: map[string]any{"keeper": map[string]any{"enabled": true}}})
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, o := range r.Objects {
		if strings.HasPrefix(o.GetName(), keeperPolicy) && strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			objs = append(objs, o)
		}
	}
	if len(objs) != 6 {
		return fmt.Errorf("the chart renders %d keeper-writes objects, want three policies and their bindings", len(objs))
	}
	if err := testenv.Apply(ctx, cp.Config(), objs); err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-keeper"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"imagemirrors", "imagemirrors/status", "imagealternatives", "imagealternatives/status"},
				Verbs: []string{"get", "create", "update", "patch", "delete"}},
		},
	}
	return grant(ctx, cs, role, serviceAccount(keeperSA))
}

func keeperDynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(asKeeper.cfg())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func adminDynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func condition(typ, status, reason string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": typ + " " + status, "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": int64(1)}
}

// mirror creates a keep-enabled ImageMirror whose status the secret-syncer wrote (as cluster
// admin here): observedGeneration, entries, namespaces, Ready and the keeper's KeepReady.
func mirror(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	dyn := adminDynamic(t)
	im := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageMirror",
		"metadata": map[string]any{"generateName": "policy-keep-"},
		"spec": map[string]any{
			"destination": map[string]any{"path": "mirror.example.com/kept"},
			"keep":        map[string]any{},
		},
	}}
	got, err := dyn.Resource(imResource).Create(t.Context(), im, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Object["status"] = map[string]any{
		"observedGeneration": int64(1), "entries": int64(1), "namespaces": int64(3),
		"conditions": []any{condition(v1alpha1.ConditionReady, "True", "Resolved"), condition(v1alpha1.ConditionKeepReady, "True", "Ready")},
		"keep":       map[string]any{"desired": int64(2), "present": int64(2)},
	}
	if got, err = dyn.Resource(imResource).UpdateStatus(t.Context(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return got
}

// statusEdit updates, as the keeper, the status of a fresh mirror once edit has changed it.
func statusEdit(edit func(status map[string]any)) func(ctx context.Context, t *testing.T) error {
	return func(ctx context.Context, t *testing.T) error {
		im := mirror(t)
		edit(im.Object["status"].(map[string]any))
		_, err := keeperDynamic(t).Resource(imResource).UpdateStatus(ctx, im, metav1.UpdateOptions{})
		return err
	}
}

// setCondition replaces (or adds) the condition of typ in status.
func setCondition(status map[string]any, c map[string]any) {
	conds, _ := status["conditions"].([]any)
	for i, o := range conds {
		if o.(map[string]any)["type"] == c["type"] {
			conds[i] = c
			return
		}
	}
	status["conditions"] = append(conds, c)
}

func removeCondition(status map[string]any, typ string) {
	conds, _ := status["conditions"].([]any)
	status["conditions"] = slices.DeleteFunc(conds, func(o any) bool { return o.(map[string]any)["type"] == typ })
}

func inventoryConfigMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"head.json": "{}"}}
}

var (
	headLabels  = map[string]string{inventory.LabelManagedBy: inventory.ManagedBy, inventory.LabelInventory: "head"}
	shardLabels = map[string]string{inventory.LabelManagedBy: inventory.ManagedBy, inventory.LabelInventory: "shard", inventory.LabelGeneration: "3"}
	shardName   = inventory.HeadName + "-3-0a1b2c3d-0"
)

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{}
	for key, val := range labels {
		out[key] = val
	}
	if v == "" {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

// TestKeeperWritesMatrix: each write by the keeper (or, at the end, by someone else), and the
// keeper-writes policies' answer: "" admitted, else the policy and a message of its refusal.
func TestKeeperWritesMatrix(t *testing.T) {
	setupKeeper(t)
	type write func(ctx context.Context, t *testing.T) error
	cmCreate := func(cm *corev1.ConfigMap, in string) write {
		return func(ctx context.Context, t *testing.T) error {
			got, err := client(t, asKeeper.cfg()).CoreV1().ConfigMaps(in).Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				t.Cleanup(func() {
					_ = admin(t).CoreV1().ConfigMaps(in).Delete(context.Background(), got.Name, metav1.DeleteOptions{})
				})
			}
			return err
		}
	}
	// seeded creates a ConfigMap as cluster admin, then lets the keeper act on it.
	seeded := func(cm *corev1.ConfigMap, act func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error) write {
		return func(ctx context.Context, t *testing.T) error {
			cm := cm.DeepCopy()
			cm.GenerateName, cm.Name = cm.Name+"-", ""
			got, err := admin(t).CoreV1().ConfigMaps(releaseNamespace).Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return act(ctx, client(t, asKeeper.cfg()), got)
		}
	}
	update := func(edit func(cm *corev1.ConfigMap)) func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
		return func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
			edit(cm)
			_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		}
	}
	deleteIt := func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
		return cs.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{})
	}
	// onHead creates the head as the keeper (admitted), then lets it act on it.
	onHead := func(act func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error) write {
		return func(ctx context.Context, t *testing.T) error {
			cs := client(t, asKeeper.cfg())
			_ = cs.CoreV1().ConfigMaps(releaseNamespace).Delete(ctx, inventory.HeadName, metav1.DeleteOptions{})
			got, err := cs.CoreV1().ConfigMaps(releaseNamespace).Create(ctx, inventoryConfigMap(inventory.HeadName, headLabels), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the keeper could not create its head: %v", err)
			}
			t.Cleanup(func() {
				_ = admin(t).CoreV1().ConfigMaps(releaseNamespace).Delete(context.Background(), inventory.HeadName, metav1.DeleteOptions{})
			})
			return act(ctx, cs, got)
		}
	}
	secretWrite := func(act func(ctx context.Context, s kubernetes.Interface, name string) error) write {
		return func(ctx context.Context, t *testing.T) error {
			s := plainSecret("", corev1.SecretTypeOpaque, nil)
			s.GenerateName = "app-credentials-"
			got, err := admin(t).CoreV1().Secrets(releaseNamespace).Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return act(ctx, client(t, asKeeper.cfg()), got.Name)
		}
	}
	pod := func(t *testing.T) *corev1.Pod {
		t.Helper()
		p, err := admin(t).CoreV1().Pods(namespace(t)).Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "app"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	keepReadyFalse := condition(v1alpha1.ConditionKeepReady, "False", "PushDenied")

	type tc struct {
		write  write
		policy string // "" admitted
		want   string
	}
	cases := map[string]tc{
		// ConfigMaps: the inventory's own names and labels are admitted.
		"keeper creates its head": {write: onHead(func(context.Context, kubernetes.Interface, *corev1.ConfigMap) error { return nil })},
		"keeper updates its head": {write: onHead(update(func(cm *corev1.ConfigMap) { cm.Data["head.json"] = `{"version":1}` }))},
		"keeper deletes its head": {write: onHead(deleteIt)},
		"keeper creates a shard":  {write: cmCreate(inventoryConfigMap(shardName, shardLabels), releaseNamespace)},

		// ConfigMaps: names.
		"keeper creates a ConfigMap outside its names":         {write: cmCreate(inventoryConfigMap("app-config", headLabels), releaseNamespace), policy: keeperPolicy, want: msgKName},
		"keeper creates a name that only starts like the head": {write: cmCreate(inventoryConfigMap(inventory.HeadName+"-x", headLabels), releaseNamespace), policy: keeperPolicy, want: msgKName},
		"keeper creates a shard with a non-hex id":             {write: cmCreate(inventoryConfigMap(inventory.HeadName+"-3-0a1b2c3g-0", shardLabels), releaseNamespace), policy: keeperPolicy, want: msgKName},
		"keeper creates a shard with a short id":               {write: cmCreate(inventoryConfigMap(inventory.HeadName+"-3-0a1b2c-0", shardLabels), releaseNamespace), policy: keeperPolicy, want: msgKName},
		"keeper creates a shard name with a suffix":            {write: cmCreate(inventoryConfigMap(shardName+"-x", shardLabels), releaseNamespace), policy: keeperPolicy, want: msgKName},
		"keeper creates an inventory name through generateName": {policy: keeperPolicy, want: msgKName, write: func(ctx context.Context, t *testing.T) error {
			cm := inventoryConfigMap("", headLabels)
			cm.GenerateName = inventory.HeadName + "-"
			_, err := client(t, asKeeper.cfg()).CoreV1().ConfigMaps(releaseNamespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}},
		"keeper replaces the syncer's retention record unchanged": {policy: keeperPolicy, want: msgKName, write: func(ctx context.Context, t *testing.T) error {
			_, err := client(t, asKeeper.cfg()).CoreV1().ConfigMaps(releaseNamespace).Update(ctx, seedRecord(t), metav1.UpdateOptions{})
			return err
		}},
		"keeper deletes the syncer's retention record": {policy: keeperPolicy, want: msgKName, write: func(ctx context.Context, t *testing.T) error {
			return client(t, asKeeper.cfg()).CoreV1().ConfigMaps(releaseNamespace).Delete(ctx, seedRecord(t).Name, metav1.DeleteOptions{})
		}},
		"keeper updates another ConfigMap":           {write: seeded(plainConfigMap("app-config", nil), update(func(cm *corev1.ConfigMap) { cm.Data["k"] = "v" })), policy: keeperPolicy, want: msgKName},
		"keeper deletes another ConfigMap":           {write: seeded(plainConfigMap("app-config", nil), deleteIt), policy: keeperPolicy, want: msgKName},
		"keeper labels another ConfigMap as its own": {write: seeded(plainConfigMap("app-config", nil), update(func(cm *corev1.ConfigMap) { cm.Labels = headLabels })), policy: keeperPolicy, want: msgKName},
		"keeper patches another ConfigMap": {policy: keeperPolicy, want: msgKName,
			write: seeded(plainConfigMap("app-config", nil), func(ctx context.Context, cs kubernetes.Interface, cm *corev1.ConfigMap) error {
				_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType, []byte(`{"data":{"k":"v"}}`), metav1.PatchOptions{})
				return err
			})},

		// ConfigMaps: the namespace.
		"keeper creates its head in another namespace": {policy: keeperPolicy, want: msgKNamespace, write: func(ctx context.Context, t *testing.T) error {
			return cmCreate(inventoryConfigMap(inventory.HeadName, headLabels), namespace(t))(ctx, t)
		}},

		// ConfigMaps: labels.
		"keeper creates its head without labels":            {write: cmCreate(inventoryConfigMap(inventory.HeadName, nil), releaseNamespace), policy: keeperPolicy, want: msgKManagedBy},
		"keeper creates its head with another manager":      {write: cmCreate(inventoryConfigMap(inventory.HeadName, withLabel(headLabels, inventory.LabelManagedBy, "kuik-secret-syncer")), releaseNamespace), policy: keeperPolicy, want: msgKManagedBy},
		"keeper creates its head labelled as a shard":       {write: cmCreate(inventoryConfigMap(inventory.HeadName, withLabel(headLabels, inventory.LabelInventory, "shard")), releaseNamespace), policy: keeperPolicy, want: msgKRole},
		"keeper creates a shard labelled as the head":       {write: cmCreate(inventoryConfigMap(shardName, withLabel(shardLabels, inventory.LabelInventory, "head")), releaseNamespace), policy: keeperPolicy, want: msgKRole},
		"keeper creates a shard without its role":           {write: cmCreate(inventoryConfigMap(shardName, withLabel(shardLabels, inventory.LabelInventory, "")), releaseNamespace), policy: keeperPolicy, want: msgKRole},
		"keeper creates a shard of another generation":      {write: cmCreate(inventoryConfigMap(shardName, withLabel(shardLabels, inventory.LabelGeneration, "4")), releaseNamespace), policy: keeperPolicy, want: msgKGeneration},
		"keeper creates a shard without its generation":     {write: cmCreate(inventoryConfigMap(shardName, withLabel(shardLabels, inventory.LabelGeneration, "")), releaseNamespace), policy: keeperPolicy, want: msgKGeneration},
		"keeper removes the managed-by label from its head": {write: onHead(update(func(cm *corev1.ConfigMap) { delete(cm.Labels, inventory.LabelManagedBy) })), policy: keeperPolicy, want: msgKManagedBy},

		// Secrets, pods and the routing resources: refused outright.
		"keeper creates a Secret": {policy: keeperForbiddenPolicy, want: msgKSecrets, write: func(ctx context.Context, t *testing.T) error {
			_, err := client(t, asKeeper.cfg()).CoreV1().Secrets(releaseNamespace).Create(ctx, plainSecret("kuik-keeper-inventory", corev1.SecretTypeOpaque, nil), metav1.CreateOptions{})
			return err
		}},
		"keeper updates a Secret": {policy: keeperForbiddenPolicy, want: msgKSecrets, write: secretWrite(func(ctx context.Context, cs kubernetes.Interface, name string) error {
			_, err := cs.CoreV1().Secrets(releaseNamespace).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"dg=="}}`), metav1.PatchOptions{})
			return err
		})},
		"keeper deletes a Secret": {policy: keeperForbiddenPolicy, want: msgKSecrets, write: secretWrite(func(ctx context.Context, cs kubernetes.Interface, name string) error {
			return cs.CoreV1().Secrets(releaseNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		})},
		"keeper deletes a pod": {policy: keeperForbiddenPolicy, want: msgKPods, write: func(ctx context.Context, t *testing.T) error {
			p := pod(t)
			return client(t, asKeeper.cfg()).CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}},
		"keeper evicts a pod": {policy: keeperForbiddenPolicy, want: msgKPods, write: func(ctx context.Context, t *testing.T) error {
			p := pod(t)
			return client(t, asKeeper.cfg()).CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
		}},
		"keeper creates an ImageMirror": {policy: keeperForbiddenPolicy, want: msgKRouting, write: func(ctx context.Context, t *testing.T) error {
			im := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageMirror",
				"metadata": map[string]any{"generateName": "policy-keeper-"},
				"spec":     map[string]any{"destination": map[string]any{"path": "evil.example.com/x"}},
			}}
			_, err := keeperDynamic(t).Resource(imResource).Create(ctx, im, metav1.CreateOptions{})
			return err
		}},
		"keeper changes an ImageMirror's spec": {policy: keeperForbiddenPolicy, want: msgKRouting, write: func(ctx context.Context, t *testing.T) error {
			im := mirror(t)
			_, err := keeperDynamic(t).Resource(imResource).Patch(ctx, im.GetName(), types.MergePatchType, []byte(`{"spec":{"destination":{"path":"evil.example.com/x"}}}`), metav1.PatchOptions{})
			return err
		}},
		"keeper deletes an ImageMirror": {policy: keeperForbiddenPolicy, want: msgKRouting, write: func(ctx context.Context, t *testing.T) error {
			return keeperDynamic(t).Resource(imResource).Delete(ctx, mirror(t).GetName(), metav1.DeleteOptions{})
		}},
		"keeper writes an ImageAlternative's status": {policy: keeperForbiddenPolicy, want: msgKRouting, write: func(ctx context.Context, t *testing.T) error {
			o := owner(t)
			_, err := keeperDynamic(t).Resource(iaResource).Patch(ctx, o.Name, types.MergePatchType, []byte(`{"status":{"entries":5}}`), metav1.PatchOptions{}, "status")
			return err
		}},

		// ImageMirror status: keep and KeepReady only.
		"keeper updates status.keep": {write: statusEdit(func(st map[string]any) {
			st["keep"] = map[string]any{"desired": int64(3), "present": int64(1), "failed": int64(2)}
		})},
		"keeper removes status.keep":     {write: statusEdit(func(st map[string]any) { delete(st, "keep") })},
		"keeper changes KeepReady":       {write: statusEdit(func(st map[string]any) { setCondition(st, keepReadyFalse) })},
		"keeper removes KeepReady":       {write: statusEdit(func(st map[string]any) { removeCondition(st, v1alpha1.ConditionKeepReady) })},
		"keeper reorders the conditions": {write: statusEdit(func(st map[string]any) { slices.Reverse(st["conditions"].([]any)) })},
		"keeper applies keep and KeepReady": {write: func(ctx context.Context, t *testing.T) error {
			im := mirror(t)
			ac := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageMirror", "metadata": map[string]any{"name": im.GetName()},
				"status": map[string]any{"keep": map[string]any{"desired": int64(4)}, "conditions": []any{keepReadyFalse}},
			}}
			got, err := keeperDynamic(t).Resource(imResource).ApplyStatus(ctx, im.GetName(), ac, metav1.ApplyOptions{FieldManager: "kuik-keeper", Force: true})
			if err == nil {
				if c, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions"); len(c) != 2 {
					t.Errorf("after the apply, conditions %v, want Ready and KeepReady", c)
				}
			}
			return err
		}},
		"keeper applies keep and KeepReady to a mirror with no status": {write: func(ctx context.Context, t *testing.T) error {
			im, err := adminDynamic(t).Resource(imResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageMirror",
				"metadata": map[string]any{"generateName": "policy-keep-"},
				"spec":     map[string]any{"destination": map[string]any{"path": "mirror.example.com/kept"}, "keep": map[string]any{}},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ac := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageMirror", "metadata": map[string]any{"name": im.GetName()},
				"status": map[string]any{"keep": map[string]any{"desired": int64(1)}, "conditions": []any{keepReadyFalse}},
			}}
			_, err = keeperDynamic(t).Resource(imResource).ApplyStatus(ctx, im.GetName(), ac, metav1.ApplyOptions{FieldManager: "kuik-keeper", Force: true})
			return err
		}},
		"keeper changes status.entries":            {write: statusEdit(func(st map[string]any) { st["entries"] = int64(9) }), policy: keeperStatusPolicy, want: msgKStatus},
		"keeper removes status.observedGeneration": {write: statusEdit(func(st map[string]any) { delete(st, "observedGeneration") }), policy: keeperStatusPolicy, want: msgKStatus},
		"keeper adds status.fallbacks":             {write: statusEdit(func(st map[string]any) { st["fallbacks"] = int64(1) }), policy: keeperStatusPolicy, want: msgKStatus},
		"keeper changes Ready": {write: statusEdit(func(st map[string]any) {
			setCondition(st, condition(v1alpha1.ConditionReady, "False", "SecretNotFound"))
		}), policy: keeperStatusPolicy, want: msgKConditions},
		"keeper removes Ready":          {write: statusEdit(func(st map[string]any) { removeCondition(st, v1alpha1.ConditionReady) }), policy: keeperStatusPolicy, want: msgKConditions},
		"keeper adds another condition": {write: statusEdit(func(st map[string]any) { setCondition(st, condition("Degraded", "True", "Keeper")) }), policy: keeperStatusPolicy, want: msgKConditions},

		// Other identities are not the policies' concern.
		"cluster admin creates the keeper's head unlabelled": {write: func(ctx context.Context, t *testing.T) error {
			ns := namespace(t)
			_, err := admin(t).CoreV1().ConfigMaps(ns).Create(ctx, inventoryConfigMap(inventory.HeadName, nil), metav1.CreateOptions{})
			return err
		}},
		"alice creates and deletes a ConfigMap in the release namespace": {write: func(ctx context.Context, t *testing.T) error {
			cs := client(t, asAlice.cfg())
			cm := plainConfigMap("", nil)
			cm.GenerateName = "alice-"
			cm, err := cs.CoreV1().ConfigMaps(releaseNamespace).Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			return cs.CoreV1().ConfigMaps(releaseNamespace).Delete(ctx, cm.Name, metav1.DeleteOptions{})
		}},
		"cluster admin changes Ready and entries": {write: func(ctx context.Context, t *testing.T) error {
			im := mirror(t)
			st := im.Object["status"].(map[string]any)
			setCondition(st, condition(v1alpha1.ConditionReady, "False", "SecretNotFound"))
			st["entries"] = int64(4)
			_, err := adminDynamic(t).Resource(imResource).UpdateStatus(ctx, im, metav1.UpdateOptions{})
			return err
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.write(t.Context(), t)
			switch {
			case c.policy == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.policy != "" && err == nil:
				t.Errorf("admitted, want refused by %s with %q", c.policy, c.want)
			case c.policy != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+c.policy+"'") || !strings.Contains(err.Error(), c.want)):
				t.Errorf("refusal = %v, want a Forbidden from %s with %q", err, c.policy, c.want)
			}
		})
	}
}

// The inventory Store's own writes, through a client impersonating the keeper's ServiceAccount,
// are all admitted: creating the head and shards, updating the head, deleting stale shards.
func TestKeeperInventoryWritesAreAdmitted(t *testing.T) {
	setupKeeper(t)
	c, err := crclient.New(asKeeper.cfg(), crclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Delete(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: inventory.HeadName}})
	t.Cleanup(func() {
		_ = admin(t).CoreV1().ConfigMaps(releaseNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: inventory.LabelManagedBy + "=" + inventory.ManagedBy})
	})
	s := inventory.NewStore(c, releaseNamespace)
	if _, err := s.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Enough tags for several shards (each shard's data is bounded), then few: the second Save
	// updates the head and deletes every shard of the first.
	for i, inv := range []keep.Inventory{inventoryOf(20_000), inventoryOf(5)} {
		if err := s.Save(t.Context(), inv); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		got, err := inventory.NewStore(c, releaseNamespace).Load(t.Context())
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		if diff := cmp.Diff(inv, got); diff != "" {
			t.Errorf("save %d: loaded (-saved +loaded):\n%s", i, diff)
		}
		shards, err := admin(t).CoreV1().ConfigMaps(releaseNamespace).List(t.Context(), metav1.ListOptions{
			LabelSelector: inventory.LabelManagedBy + "=" + inventory.ManagedBy + "," + inventory.LabelInventory + "=shard",
		})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && len(shards.Items) < 2 {
			t.Errorf("save 0 wrote %d shards, want several", len(shards.Items))
		}
		if i == 1 && len(shards.Items) != 1 {
			t.Errorf("save 1 left %d shards, want 1 (the first save's deleted)", len(shards.Items))
		}
	}
}

// inventoryOf is an inventory of n distinct tags, every third unused since a time.
func inventoryOf(n int) keep.Inventory {
	inv := keep.Inventory{LastSweep: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	for i := range n {
		d := fmt.Sprintf("sha256:%064x", uint64(i)*0x9e3779b97f4a7c15)
		tag := keep.Tag{
			Mirror:     "keep",
			Repository: fmt.Sprintf("mirror.example.com/kept/docker.io/team-%d/app-%d", i%97, i),
			Tag:        fmt.Sprintf("v1.%d", i),
			Digest:     d,
			Origin:     fmt.Sprintf("docker.io/team-%d/app-%d:v1.%d@%s", i%97, i, i, d),
		}
		if i%3 == 0 {
			tag.UnusedSince = inv.LastSweep.Add(-time.Duration(i) * time.Second)
		}
		inv.Tags = append(inv.Tags, tag)
	}
	return inv
}

// kube-controller-manager's validatingadmissionpolicy-status-controller type-checks the
// keeper-writes policies against the ConfigMap, Secret, Pod, Eviction and ImageMirror schemas
// (as TestPolicyTypeChecks does for the syncer's).
func TestKeeperPolicyTypeChecks(t *testing.T) {
	setupKeeper(t)
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kcm := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+cp.Kubeconfig,
		"--controllers=validatingadmissionpolicy-status-controller",
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0")
	var logs strings.Builder
	kcm.Stdout, kcm.Stderr = &logs, &logs
	kcm.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := kcm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kcm.Process.Kill()
		_ = kcm.Wait()
		if t.Failed() {
			t.Logf("kube-controller-manager logs:\n%s", logs.String())
		}
	})
	for _, name := range []string{keeperPolicy, keeperForbiddenPolicy, keeperStatusPolicy} {
		var got *admissionregistrationv1.ValidatingAdmissionPolicy
		err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = admin(t).AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.TypeChecking != nil, err
		})
		if err != nil {
			t.Fatalf("policy %s's status never observed its generation: %v", name, err)
		}
		if w := got.Status.TypeChecking.ExpressionWarnings; len(w) != 0 {
			t.Errorf("policy %s: type-checking warnings: %+v", name, w)
		}
		if *got.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("policy %s: failurePolicy = %s, want Fail", name, *got.Spec.FailurePolicy)
		}
	}
}
