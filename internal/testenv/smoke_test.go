package testenv_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, testenv.Options{GarbageCollection: true}, &cp))
}

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// A fake client bumps resourceVersion on every apply; only the real API server recognises an
// apply that changes nothing and leaves the object alone.
func TestServerSideApplyNoOpKeepsResourceVersion(t *testing.T) {
	cs := admin(t)
	ns := namespace(t, cs)
	apply := func() string {
		s := corev1ac.Secret("applied", ns).
			WithType(corev1.SecretTypeOpaque).
			WithLabels(map[string]string{"app": "smoke"}).
			WithData(map[string][]byte{"k": []byte("v")})
		got, err := cs.CoreV1().Secrets(ns).Apply(t.Context(), s, metav1.ApplyOptions{FieldManager: "smoke", Force: true})
		if err != nil {
			t.Fatal(err)
		}
		return got.ResourceVersion
	}
	first, second := apply(), apply()
	if first != second {
		t.Errorf("identical apply changed resourceVersion: %s then %s", first, second)
	}
	got, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "applied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "smoke" || got.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managedFields = %+v, want one Apply entry by smoke", got.ManagedFields)
	}
}

// Only kube-controller-manager's garbage collector deletes dependents of a deleted owner.
func TestGarbageCollectorDeletesDependentOfClusterScopedOwner(t *testing.T) {
	cs := admin(t)
	ns := namespace(t, cs)
	owner, err := cs.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-owner-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: "owned",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: owner.Name, UID: owner.UID,
		}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RbacV1().ClusterRoles().Delete(t.Context(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Secrets(ns).Get(ctx, "owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("dependent Secret was not garbage-collected: %v", err)
	}
}

// A ValidatingAdmissionPolicy is enforced by the API server for the identity it matches.
func TestValidatingAdmissionPolicyRefusesOneIdentity(t *testing.T) {
	cs := admin(t)
	ns := namespace(t, cs)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-no-configmaps-for-mallory"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "request.userInfo.username != 'mallory'",
				Message:    "mallory may not create ConfigMaps",
			}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-no-configmaps-for-mallory"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	grantConfigMaps(t, cs, ns, "mallory", "alice")

	as := func(user string) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(cp.ConfigAs(user))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The policy binds, and the RBAC grant takes effect, asynchronously: poll with dry-run
	// creates until mallory is refused by the policy (not by RBAC) and alice is admitted.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "smoke-"}}
	var refusal, aliceErr error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, refusal = as("mallory").CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		_, aliceErr = as("alice").CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(refusal) && aliceErr == nil, nil
	})
	if err != nil {
		t.Fatalf("policy never took effect: mallory got %v, alice got %v", refusal, aliceErr)
	}
	if !strings.Contains(refusal.Error(), "mallory may not create ConfigMaps") {
		t.Errorf("mallory's refusal = %v, want the policy's message", refusal)
	}
	if _, err := as("alice").CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Errorf("alice was refused: %v", err)
	}
}

func grantConfigMaps(t *testing.T, cs kubernetes.Interface, ns string, users ...string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmaps"},
	}
	for _, u := range users {
		rb.Subjects = append(rb.Subjects, rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: u})
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(t.Context(), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The API server calls a mutating webhook served by this test process over TLS on 127.0.0.1.
func TestMutatingWebhookIsCalledOnPodCreate(t *testing.T) {
	cs := admin(t)
	ns := namespace(t, cs)

	pair, err := cp.CA.ServingPair()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		patch := `[{"op":"add","path":"/metadata/labels","value":{"mutated-by":"smoke"}}]`
		review.Response = &admissionv1.AdmissionResponse{
			UID: review.Request.UID, Allowed: true,
			Patch: []byte(patch), PatchType: ptr.To(admissionv1.PatchTypeJSONPatch),
		}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("webhook server: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })

	url := "https://" + ln.Addr().String() + "/mutate"
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-mutate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "smoke.kuik.enix.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: cp.CA.PEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	var got *corev1.Pod
	// Webhook configurations are picked up asynchronously; a failurePolicy Fail webhook
	// refuses nothing once it answers, so retry until the label shows.
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels["mutated-by"] == "smoke", nil
	})
	if err != nil {
		t.Fatalf("pod was not mutated (last: %+v): %v", got, err)
	}
	if calls.Load() == 0 {
		t.Error("webhook server saw no call")
	}
}

// kube-apiserver killed and started again keeps the same etcd and port: what was written
// before is there, and a client built before the kill works again, unchanged.
func TestAPIServerKillAndRestart(t *testing.T) {
	own, err := testenv.Start(t.Context(), testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Stop)
	cs, err := kubernetes.NewForConfig(own.Config())
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-kill", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := own.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("the API server answered after it was killed")
	}
	if err := own.RestartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("after the restart the ConfigMap holds %v, want k=v", got.Data)
	}
	if err := own.RestartAPIServer(t.Context()); err == nil {
		t.Error("RestartAPIServer while it runs: no error")
	}
}
