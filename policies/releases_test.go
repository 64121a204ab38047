package policies_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/charts"
)

// A second release of the chart, in its own namespace, as `helm install second -n team-b`
// renders it.
const (
	secondRelease, secondNamespace = "second", "team-b"
	secondPolicyName               = "second-kuik-secret-writes"
	secondSyncerSA                 = "second-kuik-secret-syncer"
)

// Two releases create their policies and bindings side by side (create, as `helm install`
// does: a shared name would be refused, or, applied, take over the first release's policy);
// each binding binds its own policy, each policy names its own release's syncer, and each
// syncer is bounded by its own release's policy. What the two policies do to each other is
// what the chart README says: each reserves kuik-inject-* to its own syncer.
func TestTwoReleasesEachBoundByTheirOwnPolicy(t *testing.T) {
	setup(t)
	cs := admin(t)
	r, err := charts.Render(charts.Release{Name: secondRelease, Namespace: secondNamespace})
	if err != nil {
		t.Fatal(err)
	}
	vap, vapb := r.Find("ValidatingAdmissionPolicy", secondPolicyName), r.Find("ValidatingAdmissionPolicyBinding", secondPolicyName)
	if vap == nil || vapb == nil {
		t.Fatalf("release %s renders no %s policy and binding", secondRelease, secondPolicyName)
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secondNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for u, into := range map[*unstructured.Unstructured]any{vap: &policy, vapb: &binding} {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(t.Context(), &policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating release %s's policy beside release kuik's: %v", secondRelease, err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(t.Context(), &binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating release %s's binding beside release kuik's: %v", secondRelease, err)
	}
	t.Cleanup(func() { removeSecondRelease(t, cs, policy.Name, binding.Name) })
	// Release B's syncer may write Secrets as far as RBAC goes: only the policies refuse.
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-secret-writer-" + secondRelease},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "policy-test-secret-writer"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: secondNamespace, Name: secondSyncerSA}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})

	// Both releases' objects are there, each pointing at its own.
	for _, want := range []struct{ policy, namespace, sa string }{
		{policyName, releaseNamespace, syncerSA},
		{secondPolicyName, secondNamespace, secondSyncerSA},
	} {
		p, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(t.Context(), want.policy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if user := "'system:serviceaccount:" + want.namespace + ":" + want.sa + "'"; !strings.Contains(p.Spec.MatchConditions[0].Expression, user) {
			t.Errorf("policy %s does not name %s: %s", want.policy, user, p.Spec.MatchConditions[0].Expression)
		}
		b, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(t.Context(), want.policy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Spec.PolicyName != want.policy {
			t.Errorf("binding %s binds %q, want %q", b.Name, b.Spec.PolicyName, want.policy)
		}
	}

	syncerA := syncerClient(t)
	syncerB := client(t, cp.ConfigAsServiceAccount(secondNamespace, secondSyncerSA))
	// Each syncer is refused a Secret outside its names by its own release's policy, the only
	// one that matches it (the other names another syncer, and the name is not reserved).
	refusedBy := func(t *testing.T, cs kubernetes.Interface, in, policy, message string) {
		t.Helper()
		s := plainSecret("not-kuik", corev1.SecretTypeDockerConfigJson, managed)
		var last error
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = cs.CoreV1().Secrets(in).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last != nil, nil
		})
		if err != nil {
			t.Fatalf("a Secret outside kuik's names was admitted for %s's syncer (last: %v): %v", policy, last, err)
		}
		if !apierrors.IsForbidden(last) || !strings.Contains(last.Error(), "ValidatingAdmissionPolicy '"+policy+"' with binding '"+policy+"'") || !strings.Contains(last.Error(), message) {
			t.Errorf("refusal = %v, want a Forbidden from %s with %q", last, policy, message)
		}
	}
	refusedBy(t, syncerB, secondNamespace, secondPolicyName, msgName)
	refusedBy(t, syncerA, releaseNamespace, policyName, msgName)
	// Each policy reserves kuik-inject-* to its own syncer: while both releases are installed,
	// each syncer is refused them by the other release's policy (chart README, "Releases").
	ns := namespace(t)
	for _, c := range []struct {
		name   string
		cs     kubernetes.Interface
		policy string
	}{{"kuik", syncerA, secondPolicyName}, {secondRelease, syncerB, policyName}} {
		_, err := c.cs.CoreV1().Secrets(ns).Apply(t.Context(), syncerSecret("kuik-inject-imagealternative-a", ns), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "'"+c.policy+"'") || !strings.Contains(err.Error(), msgReserved) {
			t.Errorf("release %s's syncer applying a kuik-inject Secret = %v, want refused by %s (reserved name)", c.name, err, c.policy)
		}
	}
}

// removeSecondRelease deletes the second release's policy and binding and waits until they no
// longer apply, so the other tests meet release kuik's policy only.
func removeSecondRelease(t *testing.T, cs kubernetes.Interface, policy, binding string) {
	ctx := context.Background()
	_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding, metav1.DeleteOptions{})
	_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := syncerClient(t).CoreV1().Secrets(releaseNamespace).Apply(ctx, syncerSecret("kuik-inject-imagealternative-probe", releaseNamespace), metav1.ApplyOptions{FieldManager: "kuik-secret-syncer", Force: true, DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("release %s's policy still applies after its deletion: %v", secondRelease, err)
	}
}
