// Package policies_test proves the kuik-secret-writes and kuik-configmap-writes
// ValidatingAdmissionPolicies on a real API server: the policies are rendered by the chart from
// policies/ (exactly what `helm install` applies), and every write below goes through
// kube-apiserver as the identity it names.
package policies_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The release the policy is rendered for: the chart's defaults in kuik-system.
const (
	releaseNamespace = "kuik-system"
	syncerSA         = "kuik-secret-syncer"
	policyName       = "kuik-secret-writes"
	// The two identities of kube-controller-manager's garbage collector.
	gcServiceAccountNS, gcServiceAccount = "kube-system", "generic-garbage-collector"
	kcmUser                              = "system:kube-controller-manager"
	dockerConfigJSON                     = `{"auths":{"registry.example.com":{"auth":"dTpw"}}}`
)

// Messages of the policy, as written in policies/secret-writes.yaml.
const (
	msgType       = "the kuik secret-syncer may only write Secrets of type kubernetes.io/dockerconfigjson"
	msgLabel      = "the kuik secret-syncer may only write Secrets labelled app.kubernetes.io/managed-by=kuik-secret-syncer"
	msgName       = "the kuik secret-syncer may only write Secrets named kuik-inject-* or kuik-provider-*"
	msgProviderNS = "the kuik secret-syncer may only write kuik-provider-* Secrets in namespace kuik-system"
	msgReserved   = "Secrets named kuik-inject-* and kuik-provider-* are reserved to the kuik secret-syncer"
	msgContent    = "an update by anyone else must leave type, data, labels and immutable unchanged"
	msgOwners     = "an update by anyone else must leave ownerReferences unchanged (only the garbage collector may remove one)"
)

var (
	cp       *testenv.ControlPlane
	rendered *charts.Rendered
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{GarbageCollection: true}, &cp))
}

// setup installs the CRDs, the chart's policies (secret-writes, configmap-writes) and bindings
// and RBAC letting every identity of the tests write Secrets and ConfigMaps, so that only the
// policies refuse. It runs once per test binary.
func setup(t *testing.T) {
	t.Helper()
	if rendered != nil {
		return
	}
	r, err := charts.Render(charts.Release{Name: "kuik", Namespace: releaseNamespace})
	if err != nil {
		t.Fatal(err)
	}
	objs := append([]*unstructured.Unstructured{}, r.CRDs...)
	for _, name := range []string{policyName, configMapPolicyName} {
		p, b := r.Find("ValidatingAdmissionPolicy", name), r.Find("ValidatingAdmissionPolicyBinding", name)
		if p == nil || b == nil {
			t.Fatalf("the chart renders no %s policy and binding", name)
		}
		objs = append(objs, p, b)
	}
	if err := testenv.Apply(t.Context(), cp.Config(), objs); err != nil {
		t.Fatal(err)
	}
	cs := admin(t)
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantSecretWrites(t, cs)
	waitBound(t, policyName)
	waitConfigMapPolicyBound(t)
	rendered = r
}

func grantSecretWrites(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-secret-writer"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"},
			Verbs: []string{"get", "create", "update", "patch", "delete"},
		}},
	}
	if err := grant(t.Context(), cs, role,
		serviceAccount(syncerSA),
		serviceAccount("kuik-webhook"),
		rbacv1.Subject{Kind: "ServiceAccount", Namespace: gcServiceAccountNS, Name: gcServiceAccount},
		rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: kcmUser},
		rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"},
	); err != nil {
		t.Fatal(err)
	}
}

// grant creates role and binds it, cluster-wide, to subjects: rights beyond the chart's, so
// that only the policies refuse.
func grant(ctx context.Context, cs kubernetes.Interface, role *rbacv1.ClusterRole, subjects ...rbacv1.Subject) error {
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	return err
}

// serviceAccount is the ServiceAccount name of the release namespace, as a subject.
func serviceAccount(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: releaseNamespace, Name: name}
}

// waitBound polls with dry-run creates until the syncer is refused a Secret outside its names:
// policies bind asynchronously.
func waitBound(t *testing.T, policy string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"}, Type: corev1.SecretTypeOpaque}
	syncer := syncerClient(t)
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = syncer.CoreV1().Secrets(releaseNamespace).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "'"+policy+"'"), nil
	})
	if err != nil {
		t.Fatalf("policy %s never refused the syncer (last: %v): %v", policy, last, err)
	}
}

func admin(t *testing.T) kubernetes.Interface { return client(t, cp.Config()) }
func syncerClient(t *testing.T) kubernetes.Interface {
	return client(t, cp.ConfigAsServiceAccount(releaseNamespace, syncerSA))
}

func client(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func namespace(t *testing.T) string {
	t.Helper()
	ns, err := admin(t).CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

var iaResource = v1alpha1.GroupVersion.WithResource("imagealternatives")

// owner creates an ImageAlternative and returns an ownerReference to it, as the syncer sets it.
func owner(t *testing.T) metav1.OwnerReference {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	ia := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "ImageAlternative",
		"metadata": map[string]any{"generateName": "policy-owner-"},
		"spec":     map[string]any{"alternatives": []any{map[string]any{"repository": "quay.io/acme/foo"}}},
	}}
	got, err := dyn.Resource(iaResource).Create(t.Context(), ia, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "ImageAlternative", Name: got.GetName(), UID: got.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// syncerSecret is what the syncer writes: a labelled dockerconfigjson Secret owned by its
// routing resources.
func syncerSecret(name, ns string, owners ...metav1.OwnerReference) *corev1ac.SecretApplyConfiguration {
	s := corev1ac.Secret(name, ns).
		WithType(corev1.SecretTypeDockerConfigJson).
		WithLabels(map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}).
		WithData(map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerConfigJSON)})
	for _, o := range owners {
		s.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(o.APIVersion).WithKind(o.Kind).
			WithName(o.Name).WithUID(o.UID).WithController(*o.Controller).WithBlockOwnerDeletion(*o.BlockOwnerDeletion))
	}
	return s
}

// seed has the syncer apply a Secret with two owners (as a Secret shared by two owners would
// be) and returns it.
func seed(t *testing.T, name, ns string) *corev1.Secret {
	t.Helper()
	a, b := owner(t), owner(t)
	b.Controller = ptr.To(false)
	s, err := syncerClient(t).CoreV1().Secrets(ns).Apply(t.Context(), syncerSecret(name, ns, a, b), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true})
	if err != nil {
		t.Fatalf("the syncer could not seed %s/%s: %v", ns, name, err)
	}
	return s
}

func plainSecret(name string, typ corev1.SecretType, labels map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Type:       typ,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerConfigJSON)},
	}
}

var managed = map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}

// gcRemoveOwnerPatch is the strategic merge patch kube-controller-manager's garbage collector
// sends to drop ownerReferences (GenerateDeleteOwnerRefStrategicMergeBytes).
func gcRemoveOwnerPatch(t *testing.T, s *corev1.Secret, uid types.UID) []byte {
	t.Helper()
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             s.UID,
		"ownerReferences": []any{map[string]any{"$patch": "delete", "uid": uid}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type identity struct {
	name string
	cfg  func() *rest.Config
}

var (
	asSyncer  = identity{"secret-syncer", func() *rest.Config { return cp.ConfigAsServiceAccount(releaseNamespace, syncerSA) }}
	asAdmin   = identity{"cluster admin (system:masters)", func() *rest.Config { return cp.Config() }}
	asAlice   = identity{"alice", func() *rest.Config { return cp.ConfigAs("alice") }}
	asWebhook = identity{"kuik webhook", func() *rest.Config { return cp.ConfigAsServiceAccount(releaseNamespace, "kuik-webhook") }}
	asGC      = identity{"garbage collector SA", func() *rest.Config { return cp.ConfigAsServiceAccount(gcServiceAccountNS, gcServiceAccount) }}
	asKCM     = identity{"kube-controller-manager", func() *rest.Config { return cp.ConfigAs(kcmUser) }}
)

// TestAttackMatrix: each write, by whom, and the policy's answer (an empty want is admitted).
func TestAttackMatrix(t *testing.T) {
	setup(t)
	type write func(ctx context.Context, cs kubernetes.Interface, ns string) error
	create := func(s *corev1.Secret, in string) write {
		return func(ctx context.Context, cs kubernetes.Interface, ns string) error {
			if in == "" {
				in = ns
			}
			_, err := cs.CoreV1().Secrets(in).Create(ctx, s, metav1.CreateOptions{})
			return err
		}
	}
	apply := func(s func(ns string) *corev1ac.SecretApplyConfiguration) write {
		return func(ctx context.Context, cs kubernetes.Interface, ns string) error {
			_, err := cs.CoreV1().Secrets(ns).Apply(ctx, s(ns), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true})
			return err
		}
	}
	// update seeds kuik-inject-imagealternative-seed as the syncer, lets edit change it, and
	// sends it back with an update (kubectl replace).
	update := func(edit func(s *corev1.Secret)) (write, func(t *testing.T, ns string)) {
		var seeded *corev1.Secret
		return func(ctx context.Context, cs kubernetes.Interface, ns string) error {
				s := seeded.DeepCopy()
				edit(s)
				_, err := cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
				return err
			}, func(t *testing.T, ns string) {
				seeded = seed(t, "kuik-inject-imagealternative-seed", ns)
			}
	}
	// patchSeed seeds like update, then sends the patch that makePatch builds from it.
	patchSeed := func(pt types.PatchType, makePatch func(t *testing.T, s *corev1.Secret) []byte) (write, func(t *testing.T, ns string)) {
		var seeded *corev1.Secret
		var p []byte
		return func(ctx context.Context, cs kubernetes.Interface, ns string) error {
				_, err := cs.CoreV1().Secrets(ns).Patch(ctx, seeded.Name, pt, p, metav1.PatchOptions{})
				return err
			}, func(t *testing.T, ns string) {
				seeded = seed(t, "kuik-inject-imagealternative-seed", ns)
				p = makePatch(t, seeded)
			}
	}
	removeSecondOwner := func(t *testing.T, s *corev1.Secret) []byte {
		return gcRemoveOwnerPatch(t, s, s.OwnerReferences[1].UID)
	}
	mergePatch := func(v map[string]any) func(t *testing.T, s *corev1.Secret) []byte {
		return func(t *testing.T, s *corev1.Secret) []byte {
			t.Helper()
			if m, ok := v["metadata"].(map[string]any); ok && m["ownerReferences"] == nil {
				// Keep only the first owner, as a JSON merge patch replaces the list.
				m["ownerReferences"] = []metav1.OwnerReference{s.OwnerReferences[0]}
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}

	type tc struct {
		by    identity
		write write
		setup func(t *testing.T, ns string)
		want  string // "" admitted, else a message the refusal carries
		// gone, on an admitted delete: the Secret must then disappear (a foreground delete
		// ends with an update, the finalizer's removal, that the policy must let through).
		gone string
	}
	cases := map[string]tc{
		// The syncer's own writes.
		"syncer applies a kuik-inject Secret": {by: asSyncer, write: apply(func(ns string) *corev1ac.SecretApplyConfiguration {
			return syncerSecret("kuik-inject-imagealternative-a", ns)
		})},
		"syncer re-applies a kuik-inject Secret with new data": {by: asSyncer, setup: func(t *testing.T, ns string) { seed(t, "kuik-inject-imagealternative-seed", ns) },
			write: apply(func(ns string) *corev1ac.SecretApplyConfiguration {
				return syncerSecret("kuik-inject-imagealternative-seed", ns).WithData(map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)})
			})},
		"syncer applies a kuik-provider Secret in the release namespace": {by: asSyncer, write: func(ctx context.Context, cs kubernetes.Interface, _ string) error {
			_, err := cs.CoreV1().Secrets(releaseNamespace).Apply(ctx, syncerSecret("kuik-provider-ecr", releaseNamespace), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true})
			return err
		}},
		"syncer creates an Opaque kuik-inject Secret":                 {by: asSyncer, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeOpaque, managed), ""), want: msgType},
		"syncer creates a kuik-inject Secret without the label":       {by: asSyncer, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeDockerConfigJson, nil), ""), want: msgLabel},
		"syncer creates a kuik-inject Secret with another manager":    {by: asSyncer, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeDockerConfigJson, map[string]string{v1alpha1.LabelManagedBy: "Helm"}), ""), want: msgLabel},
		"syncer creates a Secret outside its names":                   {by: asSyncer, write: create(plainSecret("registry-credentials", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgName},
		"syncer creates a Secret whose name only contains the prefix": {by: asSyncer, write: create(plainSecret("x-kuik-inject-a", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgName},
		"syncer creates an Opaque Secret in the release namespace":    {by: asSyncer, write: create(plainSecret("kuik-webhook-tls", corev1.SecretTypeOpaque, nil), releaseNamespace), want: msgType},
		"syncer creates a kuik-provider Secret in another namespace":  {by: asSyncer, write: create(plainSecret("kuik-provider-ecr", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgProviderNS},
		"syncer removes the managed-by label": func() tc {
			w, s := update(func(s *corev1.Secret) { delete(s.Labels, v1alpha1.LabelManagedBy) })
			return tc{by: asSyncer, write: w, setup: s, want: msgLabel}
		}(),

		// Everyone else on the reserved names.
		"cluster admin creates a kuik-inject Secret":                    {by: asAdmin, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgReserved},
		"alice creates a kuik-provider Secret in the release namespace": {by: asAlice, write: create(plainSecret("kuik-provider-ecr", corev1.SecretTypeDockerConfigJson, managed), releaseNamespace), want: msgReserved},
		"alice creates a kuik-provider Secret elsewhere":                {by: asAlice, write: create(plainSecret("kuik-provider-ecr", corev1.SecretTypeOpaque, nil), ""), want: msgReserved},
		"alice creates a kuik-inject Secret through generateName": {by: asAlice, want: msgReserved, write: func(ctx context.Context, cs kubernetes.Interface, ns string) error {
			s := plainSecret("", corev1.SecretTypeOpaque, nil)
			s.GenerateName = "kuik-inject-"
			_, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		"the kuik webhook creates a kuik-inject Secret": {by: asWebhook, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgReserved},
		"cluster admin changes the data": func() tc {
			w, s := update(func(s *corev1.Secret) {
				s.Data[corev1.DockerConfigJsonKey] = []byte(`{"auths":{"evil.example.com":{"auth":"dTpw"}}}`)
			})
			return tc{by: asAdmin, write: w, setup: s, want: msgContent}
		}(),
		"cluster admin adds a data key": func() tc {
			w, s := update(func(s *corev1.Secret) { s.Data["extra"] = []byte("x") })
			return tc{by: asAdmin, write: w, setup: s, want: msgContent}
		}(),
		"cluster admin adds a label": func() tc {
			w, s := update(func(s *corev1.Secret) { s.Labels["team"] = "a" })
			return tc{by: asAdmin, write: w, setup: s, want: msgContent}
		}(),
		"alice removes the managed-by label": func() tc {
			w, s := update(func(s *corev1.Secret) { delete(s.Labels, v1alpha1.LabelManagedBy) })
			return tc{by: asAlice, write: w, setup: s, want: msgContent}
		}(),
		"cluster admin makes it immutable": func() tc {
			w, s := update(func(s *corev1.Secret) { s.Immutable = ptr.To(true) })
			return tc{by: asAdmin, write: w, setup: s, want: msgContent}
		}(),
		"cluster admin replaces it unchanged (encryption-at-rest rotation)": func() tc {
			w, s := update(func(*corev1.Secret) {})
			return tc{by: asAdmin, write: w, setup: s}
		}(),
		"alice replaces it unchanged": func() tc {
			w, s := update(func(*corev1.Secret) {})
			return tc{by: asAlice, write: w, setup: s}
		}(),
		"cluster admin only adds an annotation": func() tc {
			w, s := update(func(s *corev1.Secret) { s.Annotations = map[string]string{"note": "x"} })
			return tc{by: asAdmin, write: w, setup: s}
		}(),
		"cluster admin removes an ownerReference": func() tc {
			w, s := update(func(s *corev1.Secret) { s.OwnerReferences = s.OwnerReferences[:1] })
			return tc{by: asAdmin, write: w, setup: s, want: msgOwners}
		}(),
		"cluster admin adds an ownerReference": func() tc {
			w, s := update(func(s *corev1.Secret) {
				s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0c9d1c2e-0000-4000-8000-000000000001"})
			})
			return tc{by: asAdmin, write: w, setup: s, want: msgOwners}
		}(),
		"alice removes an ownerReference the way the garbage collector does": func() tc {
			w, s := patchSeed(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asAlice, write: w, setup: s, want: msgOwners}
		}(),

		// The garbage collector.
		"garbage collector (its ServiceAccount) removes an ownerReference": func() tc {
			w, s := patchSeed(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asGC, write: w, setup: s}
		}(),
		"garbage collector (kube-controller-manager's user) removes an ownerReference": func() tc {
			w, s := patchSeed(types.StrategicMergePatchType, removeSecondOwner)
			return tc{by: asKCM, write: w, setup: s}
		}(),
		"garbage collector removes an ownerReference and changes the data": func() tc {
			w, s := patchSeed(types.MergePatchType, mergePatch(map[string]any{
				"metadata": map[string]any{},
				"data":     map[string]any{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
			}))
			return tc{by: asGC, write: w, setup: s, want: msgContent}
		}(),
		"garbage collector removes an ownerReference and a label": func() tc {
			w, s := patchSeed(types.MergePatchType, mergePatch(map[string]any{
				"metadata": map[string]any{"labels": map[string]any{v1alpha1.LabelManagedBy: nil}},
			}))
			return tc{by: asGC, write: w, setup: s, want: msgContent}
		}(),
		"garbage collector adds an ownerReference": func() tc {
			w, s := update(func(s *corev1.Secret) {
				s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0c9d1c2e-0000-4000-8000-000000000002"})
			})
			return tc{by: asGC, write: w, setup: s, want: msgOwners}
		}(),
		"garbage collector swaps an ownerReference for another": func() tc {
			w, s := update(func(s *corev1.Secret) {
				s.OwnerReferences[1] = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0c9d1c2e-0000-4000-8000-000000000003"}
			})
			return tc{by: asGC, write: w, setup: s, want: msgOwners}
		}(),
		"garbage collector creates a kuik-inject Secret": {by: asGC, write: create(plainSecret("kuik-inject-imagealternative-a", corev1.SecretTypeDockerConfigJson, managed), ""), want: msgReserved},

		// Deletes are not checked.
		"alice deletes a kuik-inject Secret": {by: asAlice, gone: "kuik-inject-imagealternative-seed", setup: func(t *testing.T, ns string) { seed(t, "kuik-inject-imagealternative-seed", ns) },
			write: func(ctx context.Context, cs kubernetes.Interface, ns string) error {
				return cs.CoreV1().Secrets(ns).Delete(ctx, "kuik-inject-imagealternative-seed", metav1.DeleteOptions{})
			}},
		"cluster admin deletes a kuik-inject Secret in the foreground": {by: asAdmin, gone: "kuik-inject-imagealternative-seed", setup: func(t *testing.T, ns string) { seed(t, "kuik-inject-imagealternative-seed", ns) },
			write: func(ctx context.Context, cs kubernetes.Interface, ns string) error {
				return cs.CoreV1().Secrets(ns).Delete(ctx, "kuik-inject-imagealternative-seed", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
			}},
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
			case c.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policyName+"'") || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s's refusal = %v, want a Forbidden from %s with %q", c.by.name, err, policyName, c.want)
			}
			if c.gone != "" && err == nil {
				err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					_, err := admin(t).CoreV1().Secrets(ns).Get(ctx, c.gone, metav1.GetOptions{})
					return apierrors.IsNotFound(err), nil
				})
				if err != nil {
					t.Errorf("%s/%s was never deleted: %v", ns, c.gone, err)
				}
			}
		})
	}
}

// Secret writes that neither come from the syncer nor touch a reserved name never meet the
// policy, whoever makes them.
func TestUnrelatedSecretWritesAreUnaffected(t *testing.T) {
	setup(t)
	for _, by := range []identity{asAdmin, asAlice, asWebhook, asGC} {
		t.Run(by.name, func(t *testing.T) {
			ns := namespace(t)
			unrelatedWrites(t, client(t, by.cfg()), ns)
		})
	}
}

// unrelatedWrites creates, updates (type-preserving changes of data, labels, ownerReferences,
// immutability), patches and deletes Secrets whose names are close to the reserved ones.
func unrelatedWrites(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	nsObj, err := admin(t).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"app-credentials", "kuik-webhook-tls", "kuik-injected", "x-kuik-inject-a", "kuik-providers"} {
		s, err := cs.CoreV1().Secrets(ns).Create(ctx, plainSecret(name, corev1.SecretTypeOpaque, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		s.Data["k"] = []byte("v")
		s.Labels = map[string]string{v1alpha1.LabelManagedBy: "someone"}
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: ns, UID: nsObj.UID}}
		s.Immutable = ptr.To(true)
		if s, err = cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
		if _, err = cs.CoreV1().Secrets(ns).Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch %s: %v", name, err)
		}
		if err := cs.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
}

// Even if every validation of the policy failed to evaluate, its matchConditions would keep
// unrelated Secret writes out: a copy of the policy whose only validation errors at runtime
// refuses reserved names (failurePolicy Fail) and nothing else.
func TestEvaluationErrorsNeverReachUnrelatedWrites(t *testing.T) {
	setup(t)
	cs := admin(t)
	ns := namespace(t)
	seeded := seed(t, "kuik-inject-imagealternative-seed", ns)
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(rendered.Find("ValidatingAdmissionPolicy", policyName).Object, &vap); err != nil {
		t.Fatal(err)
	}
	broken := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "kuik-secret-writes-broken"},
		Spec:       *vap.Spec.DeepCopy(),
	}
	broken.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "int(request.name) > 0", Message: "unreachable"}}
	broken.Spec.Variables = nil
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(t.Context(), broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: broken.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: broken.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, broken.Name, metav1.DeleteOptions{})
		// Wait until it no longer applies, so other tests meet the real policy only.
		_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := syncerClient(t).CoreV1().Secrets(releaseNamespace).Apply(ctx, syncerSecret("kuik-provider-probe", releaseNamespace), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true, DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	})

	// Poll until the broken policy is in force: it makes the syncer's own valid write fail.
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = syncerClient(t).CoreV1().Secrets(ns).Apply(ctx, syncerSecret("kuik-inject-imagealternative-a", ns), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true, DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), broken.Name), nil
	})
	if err != nil {
		t.Fatalf("the broken policy never refused the syncer (last: %v): %v", last, err)
	}
	if !strings.Contains(last.Error(), "failed") && !strings.Contains(last.Error(), "error") {
		t.Errorf("refusal by the broken policy = %v, want an evaluation error", last)
	}
	// An unchanged replace, which the real policy admits, meets the broken one too.
	_, err = client(t, cp.ConfigAs("alice")).CoreV1().Secrets(ns).Update(t.Context(), seeded, metav1.UpdateOptions{})
	if err == nil || !strings.Contains(err.Error(), broken.Name) {
		t.Errorf("alice's reserved-name update = %v, want refused by %s (failurePolicy Fail)", err, broken.Name)
	}
	for _, by := range []identity{asAdmin, asAlice} {
		unrelatedWrites(t, client(t, by.cfg()), ns)
	}
}

// kube-controller-manager's validatingadmissionpolicy-status-controller type-checks the
// policies' expressions against the Secret, ConfigMap, Pod, Eviction and MutatingWebhookConfiguration
// schemas; a warning there
// means an expression refers to a field or type those do not have. (An optional selection,
// `.?field`, is not checked: a misspelt one reads as absent. Each of them is covered by a case
// of TestAttackMatrix, TestRetentionRecordMatrix or TestPodDeletesCasesAgreeWithTheSyncer whose
// answer would flip.) The harness runs only the garbage collector and the namespace controller,
// so this test runs that controller itself, as a second kube-controller-manager.
func TestPolicyTypeChecks(t *testing.T) {
	setup(t)
	setupPodDeletes(t)
	setupWebhookWrites(t)
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
	for _, name := range []string{policyName, configMapPolicyName, podDeletesPolicy, podDeletesPolicy + "-evictions", podDeletesPolicy + "-evicted-pods", webhookPolicy} {
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

// The garbage collector (kube-controller-manager runs in the harness) deletes a kuik-inject
// Secret when its routing resource goes, in the background and in the foreground.
func TestGarbageCollectorDeletesInjectedSecrets(t *testing.T) {
	setup(t)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	for name, policy := range map[string]metav1.DeletionPropagation{"background": metav1.DeletePropagationBackground, "foreground": metav1.DeletePropagationForeground} {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			o := owner(t)
			if _, err := syncerClient(t).CoreV1().Secrets(ns).Apply(t.Context(), syncerSecret("kuik-inject-imagealternative-"+o.Name, ns, o), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true}); err != nil {
				t.Fatal(err)
			}
			if err := dyn.Resource(iaResource).Delete(t.Context(), o.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}); err != nil {
				t.Fatal(err)
			}
			// The garbage collector picks up a new resource type on its next discovery resync
			// (every 30 s): the first deletion after the CRD appeared may wait that long.
			err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
				_, err := admin(t).CoreV1().Secrets(ns).Get(ctx, "kuik-inject-imagealternative-"+o.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, nil
				}
				return false, err
			})
			if err != nil {
				t.Fatalf("the Secret outlived its owner: %v", err)
			}
			err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				_, err := dyn.Resource(iaResource).Get(ctx, o.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if err != nil {
				t.Fatalf("the owner was never deleted: %v", err)
			}
		})
	}
}

// policies/ is what the chart ships, byte for byte (make manifests copies it).
func TestChartShipsPoliciesVerbatim(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no policies/*.yaml: %v", err)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(charts.Dir(), "files", "policies", f))
		if err != nil {
			t.Fatalf("the chart has no copy of %s (run make manifests): %v", f, err)
		}
		if string(got) != string(want) {
			t.Errorf("charts/kuik/files/policies/%s differs from policies/%s: run make manifests", f, f)
		}
	}
}
