package integration_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/testutil"
)

// podAuthor is a user who may create and patch pods in the namespaces, nothing else: anyone a
// team is given a namespace to deploy in.
func podAuthor(t *testing.T, e env, user string, namespaces ...string) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	for _, ns := range namespaces {
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "patch"}}},
		}
		if _, err := e.cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(cp.ConfigAs(user))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createPodAs creates a pod as a user, waiting for the user's RBAC to take effect.
func createPodAs(t *testing.T, as kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	eventually(t, "create pod "+p.Namespace+"/"+p.Name, func(ctx context.Context) error {
		_, err := as.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return err
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
}

func withLabels(p *corev1.Pod, labels map[string]string) *corev1.Pod {
	maps.Copy(p.Labels, labels)
	return p
}

// A pod author cannot pull a credential into a namespace by claiming to have been rewritten.
// Pods labelled kuik.enix.io/rewritten=true with kuik's annotations written by hand, by a user
// who may only create and patch pods, bring no OnFailure credential into a namespace the
// resource does not select, for a pod it does not select, or for an image that is no candidate
// of the recorded original; an honest rewritten pod next to them gets its entry and only it. The
// pair is re-decided when the pod's or the namespace's labels change: a namespace leaving the
// selector loses the entry at once, retention notwithstanding.
func TestForgedRewritesBringNoCredential(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.a": "a:pw", "registry.b": "b:pw"}))
	ia := testutil.NewImageAlternative(n).
		NamespaceSelector(map[string]string{"scope": n}).PodSelector(map[string]string{"app": "web"}).
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef(n + "-creds").
		Repository("registry.b/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	in := createNamespace(t, e, map[string]string{"scope": n})
	out := createNamespace(t, e, nil)
	author := podAuthor(t, e, n+"-author", in, out)
	startSyncer(t, syncerConfig())

	by := "ImageAlternative/" + n
	web := map[string]string{"app": "web"}
	forged := []*corev1.Pod{
		// (a) A namespace the namespaceSelector excludes (the record would be true elsewhere).
		withLabels(rewrittenPod(out, "excluded-namespace", map[string]string{"c": "registry.a/acme/foo:v1"},
			map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}), web),
		// (b) A pod the podSelector excludes.
		withLabels(rewrittenPod(in, "excluded-pod", map[string]string{"c": "registry.b/acme/foo:v1"},
			map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}), map[string]string{"app": "db"}),
		// (c) An image that is no candidate of the recorded original.
		withLabels(rewrittenPod(in, "not-a-candidate", map[string]string{"c": "registry.b/acme/foo:v1"},
			map[string]rewrite{"c": {"docker.io/mallory/x:v1", by}}), web),
		// The original recorded as its own rewrite.
		withLabels(rewrittenPod(in, "own-original", map[string]string{"c": "registry.b/acme/foo:v1"},
			map[string]rewrite{"c": {"registry.b/acme/foo:v1", by}}), web),
		// A record of a container the pod does not have.
		withLabels(rewrittenPod(in, "ghost", map[string]string{"c": "registry.b/acme/foo:v1"},
			map[string]rewrite{"ghost": {"quay.io/acme/foo:v1", by}}), web),
	}
	for _, p := range forged {
		createPodAs(t, author, p)
	}
	secretName := "kuik-inject-imagealternative-" + n
	absentFor(t, e, out, secretName, 2*time.Second)

	// An honest rewritten pod gets its entry, and only it: the decision reads every pod of the
	// namespace, the forged ones included.
	createPodAs(t, author, withLabels(rewrittenPod(in, "honest", map[string]string{"c": "registry.a/acme/foo:v1"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}), web))
	secretHolds(t, e, in, secretName, map[string]string{"registry.a/acme/foo": "a:pw"})

	// The author relabels the excluded pod into the podSelector: the resource now routes that
	// pod, and its record is one the webhook could have written.
	patch := fmt.Appendf(nil, `{"metadata":{"labels":%s}}`, mustJSON(web))
	if _, err := author.CoreV1().Pods(in).Patch(t.Context(), "excluded-pod", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, in, secretName, map[string]string{"registry.a/acme/foo": "a:pw", "registry.b/acme/foo": "b:pw"})

	// The excluded namespace enters the scope: its pod's record is now true; it leaves the scope:
	// the entry goes at once.
	label(t, e, out, map[string]string{"scope": n})
	secretHolds(t, e, out, secretName, map[string]string{"registry.a/acme/foo": "a:pw"})
	label(t, e, out, map[string]string{"scope": "elsewhere"})
	secretHolds(t, e, out, secretName, map[string]string{})
}
