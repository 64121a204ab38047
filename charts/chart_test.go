package charts_test

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
)

const ns = "kuik-system"

func render(t *testing.T, values map[string]any) *charts.Rendered {
	t.Helper()
	r, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func renderErr(values map[string]any) error {
	_, err := charts.Render(charts.Release{Name: "kuik", Namespace: ns, Values: values})
	return err
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	if u == nil {
		t.Fatalf("missing %T", *new(T))
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

func deployments(t *testing.T, r *charts.Rendered) map[string]*appsv1.Deployment {
	t.Helper()
	out := map[string]*appsv1.Deployment{}
	for _, u := range r.OfKind("Deployment") {
		out[u.GetName()] = convert[appsv1.Deployment](t, u)
	}
	if len(out) != 2 {
		t.Fatalf("deployments = %v, want the webhook and the secret-syncer", keys(out))
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var valueSets = map[string]map[string]any{
	"defaults":     nil,
	"cert-manager": {"certManager": map[string]any{"enabled": true}},
	"cert-manager with an issuer": {"certManager": map[string]any{"enabled": true,
		"issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}},
	"everything on": {
		"imagePullSecret":  map[string]any{"create": true, "registry": "registry.example.com", "username": "u", "password": "p"},
		"imagePullSecrets": []any{"shared", map[string]any{"name": "other"}},
		"metrics":          map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "30s"}},
		"syncer": map[string]any{"replicaCount": 2,
			"missedPulls": map[string]any{"enabled": true}, "recreateStuckPods": map[string]any{"enabled": true}},
		"webhook": map[string]any{"replicaCount": 3, "mutating": map[string]any{"excludeNamespaces": []any{"monitoring"}, "matchConditions": true}},
	},
}

func TestHelmLint(t *testing.T) {
	for name, values := range valueSets {
		t.Run(name, func(t *testing.T) {
			if msgs := charts.Lint(ns, values); len(msgs) != 0 {
				t.Errorf("helm lint:\n%s", strings.Join(msgs, "\n"))
			}
		})
	}
}

// The schema refuses what the templates could not render into something sound.
func TestSchemaRefusesBadValues(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"a probe timeout the webhook timeout cannot cover": {"webhook": map[string]any{"probeTimeoutSeconds": 30}},
		"a misspelt key": {"webhok": map[string]any{}},
		"a ServiceAccount name that is not a DNS label":      {"serviceAccount": map[string]any{"syncerName": "kuik'||true||'"}},
		"an unknown failure policy":                          {"webhook": map[string]any{"mutating": map[string]any{"failurePolicy": "Maybe"}}},
		"a pull Secret to create without a password":         {"imagePullSecret": map[string]any{"create": true, "registry": "r.example.com", "username": "u"}},
		"a duration that is not one":                         {"syncer": map[string]any{"retention": "15 minutes"}},
		"several syncers without leader election":            {"syncer": map[string]any{"replicaCount": 2, "leaderElection": false}},
		"stuck pods recreated without the missed-pull watch": {"syncer": map[string]any{"recreateStuckPods": map[string]any{"enabled": true}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(values)
			if err == nil {
				t.Fatal("rendered, want refused")
			}
			t.Log(err)
		})
	}
}

func TestRenderDefaults(t *testing.T) {
	r := render(t, nil)
	var got []string
	for _, o := range r.Objects {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(got)
	want := []string{
		"ClusterRole/kuik-secret-syncer", "ClusterRole/kuik-webhook",
		"ClusterRoleBinding/kuik-secret-syncer", "ClusterRoleBinding/kuik-webhook",
		"Deployment/kuik-secret-syncer", "Deployment/kuik-webhook",
		"MutatingWebhookConfiguration/kuik-webhook",
		"PodDisruptionBudget/kuik-webhook",
		"Role/kuik-secret-syncer", "Role/kuik-secret-syncer-events", "Role/kuik-webhook",
		"RoleBinding/kuik-secret-syncer", "RoleBinding/kuik-secret-syncer-events", "RoleBinding/kuik-webhook",
		"Secret/kuik-webhook-tls",
		"Service/kuik-secret-syncer-metrics", "Service/kuik-webhook", "Service/kuik-webhook-metrics",
		"ServiceAccount/kuik-secret-syncer", "ServiceAccount/kuik-webhook",
		"ValidatingAdmissionPolicy/kuik-configmap-writes", "ValidatingAdmissionPolicy/kuik-secret-writes",
		"ValidatingAdmissionPolicyBinding/kuik-configmap-writes", "ValidatingAdmissionPolicyBinding/kuik-secret-writes",
		"ValidatingWebhookConfiguration/kuik-webhook",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
	var crds []string
	for _, c := range r.CRDs {
		crds = append(crds, c.GetName())
	}
	if diff := cmp.Diff([]string{"imagealternatives.kuik.enix.io", "imagemirrors.kuik.enix.io"}, crds); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
	for _, o := range r.Objects {
		// The one exception: the syncer's events Role and binding, in "default", where the API
		// server puts the events of cluster-scoped objects.
		if o.GetNamespace() == metav1.NamespaceDefault && o.GetName() == "kuik-secret-syncer-events" && (o.GetKind() == "Role" || o.GetKind() == "RoleBinding") {
			continue
		}
		if o.GetNamespace() != "" && o.GetNamespace() != ns {
			t.Errorf("%s/%s is in namespace %q, want the release namespace", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
}

// The chart's CRDs are config/crd's (make manifests copies them).
func TestCRDsAreGenerated(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no config/crd/*.yaml: %v", err)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(charts.Dir(), "crds", filepath.Base(f)))
		if err != nil || string(got) != string(want) {
			t.Errorf("charts/kuik/crds/%s is not config/crd's (run make manifests): %v", filepath.Base(f), err)
		}
	}
}

// The rendered policy is policies/*.yaml with the release's policy name, the release namespace,
// the syncer's ServiceAccount and the chart's MutatingWebhookConfiguration filled in, object for
// object.
func TestRenderedPolicyIsPoliciesDir(t *testing.T) {
	// Each policy's name in the release, and the value it is rendered with (none: always):
	// pod-deletes.yaml with syncer.recreateStuckPods.enabled (the only case where the syncer may
	// delete pods), webhook-writes.yaml with webhook.mutating.matchConditions (the only case
	// where it may patch the webhook's configuration).
	names := map[string]string{
		"secret-writes.yaml": "kuik-secret-writes", "configmap-writes.yaml": "kuik-configmap-writes",
		"pod-deletes.yaml": "kuik-pod-deletes", "webhook-writes.yaml": "kuik-webhook-writes",
	}
	recreate := map[string]any{"missedPulls": map[string]any{"enabled": true}, "recreateStuckPods": map[string]any{"enabled": true}}
	matchConditions := map[string]any{"mutating": map[string]any{"matchConditions": true}}
	type optIns struct{ recreate, matchConditions bool }
	rendered := func(base string, on optIns) bool {
		switch base {
		case "pod-deletes.yaml":
			return on.recreate
		case "webhook-writes.yaml":
			return on.matchConditions
		}
		return true
	}
	for name, tc := range map[string]struct {
		values map[string]any
		sa     string
		on     optIns
	}{
		"default ServiceAccount": {sa: "kuik-secret-syncer"},
		"named ServiceAccount":   {values: map[string]any{"serviceAccount": map[string]any{"syncerName": "syncer"}}, sa: "syncer"},
		"recreateStuckPods":      {values: map[string]any{"syncer": recreate}, sa: "kuik-secret-syncer", on: optIns{recreate: true}},
		"recreateStuckPods, named ServiceAccount": {
			values: map[string]any{"syncer": recreate, "serviceAccount": map[string]any{"syncerName": "syncer"}}, sa: "syncer", on: optIns{recreate: true},
		},
		"matchConditions": {values: map[string]any{"webhook": matchConditions}, sa: "kuik-secret-syncer", on: optIns{matchConditions: true}},
		"matchConditions, named ServiceAccount": {
			values: map[string]any{"webhook": matchConditions, "serviceAccount": map[string]any{"syncerName": "syncer"}}, sa: "syncer", on: optIns{matchConditions: true},
		},
		"everything on": {
			values: map[string]any{"syncer": recreate, "webhook": matchConditions}, sa: "kuik-secret-syncer", on: optIns{recreate: true, matchConditions: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.values)
			files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "policies", "*.yaml"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no policies/*.yaml: %v", err)
			}
			var want []*unstructured.Unstructured
			for _, f := range files {
				base := filepath.Base(f)
				if base == "keeper-writes.yaml" {
					continue // keeper.enabled only: TestKeeperWritesPolicyRenderedWithTheKeeper
				}
				if !rendered(base, tc.on) {
					continue
				}
				policy, ok := names[base]
				if !ok {
					t.Fatalf("policies/%s: no name known for it in this test", base)
				}
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				objs, err := charts.Decode(charts.SubstitutePolicy(b, charts.PolicyValues{
					Name: policy, Namespace: ns, SyncerServiceAccount: tc.sa, RecreateOwners: charts.DefaultRecreateOwners, WebhookConfiguration: "kuik-webhook",
				}))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, objs...)
			}
			var got []*unstructured.Unstructured
			for _, o := range r.Objects {
				if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
					got = append(got, o)
				}
			}
			byKindName := func(a, b *unstructured.Unstructured) int {
				return strings.Compare(a.GetKind()+"/"+a.GetName(), b.GetKind()+"/"+b.GetName())
			}
			slices.SortFunc(want, byKindName)
			slices.SortFunc(got, byKindName)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rendered policy objects differ from policies/ (-want +got):\n%s", diff)
			}
			if !strings.Contains(r.Manifest, "'system:serviceaccount:"+ns+":"+tc.sa+"'") {
				t.Errorf("the rendered policy does not name system:serviceaccount:%s:%s", ns, tc.sa)
			}
			for _, p := range []string{charts.PolicyPlaceholders.Name, charts.PolicyPlaceholders.Namespace, charts.PolicyPlaceholders.SyncerServiceAccount, charts.PolicyPlaceholders.RecreateOwners, charts.PolicyPlaceholders.WebhookConfiguration} {
				if strings.Contains(r.Manifest, p) {
					t.Errorf("placeholder %s was left in the rendered chart", p)
				}
			}
			// And the syncer runs as that ServiceAccount.
			if got := deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.ServiceAccountName; got != tc.sa {
				t.Errorf("secret-syncer runs as %q, want %q", got, tc.sa)
			}
		})
	}
}

// grants reports whether rule allows verb on resource (core group).
func grants(rule rbacv1.PolicyRule, verb, group, resource string) bool {
	in := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return in(rule.Verbs, verb) && in(rule.APIGroups, group) && in(rule.Resources, resource) && len(rule.ResourceNames) == 0
}

// rulesOf returns the rules bound to a ServiceAccount: cluster-wide (ClusterRoleBindings) and
// per namespace (RoleBindings).
func rulesOf(t *testing.T, r *charts.Rendered, sa string) (cluster []rbacv1.PolicyRule, namespaced map[string][]rbacv1.PolicyRule) {
	t.Helper()
	subject := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == ns
		})
	}
	roleRules := func(kind, name, namespace string) []rbacv1.PolicyRule {
		for _, u := range r.OfKind(kind) {
			if u.GetName() == name && u.GetNamespace() == namespace {
				if kind == "ClusterRole" {
					return convert[rbacv1.ClusterRole](t, u).Rules
				}
				return convert[rbacv1.Role](t, u).Rules
			}
		}
		t.Fatalf("%s %s/%s is bound but not rendered", kind, namespace, name)
		return nil
	}
	for _, u := range r.OfKind("ClusterRoleBinding") {
		b := convert[rbacv1.ClusterRoleBinding](t, u)
		if subject(b.Subjects) {
			cluster = append(cluster, roleRules("ClusterRole", b.RoleRef.Name, "")...)
		}
	}
	namespaced = map[string][]rbacv1.PolicyRule{}
	for _, u := range r.OfKind("RoleBinding") {
		b := convert[rbacv1.RoleBinding](t, u)
		if subject(b.Subjects) {
			rn := ""
			if b.RoleRef.Kind == "Role" {
				rn = b.Namespace
			}
			namespaced[b.Namespace] = append(namespaced[b.Namespace], roleRules(b.RoleRef.Kind, b.RoleRef.Name, rn)...)
		}
	}
	return cluster, namespaced
}

func allows(rules []rbacv1.PolicyRule, verb, group, resource string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return grants(r, verb, group, resource) })
}

func TestSyncerReadsSecretsOnlyInItsNamespace(t *testing.T) {
	cluster, namespaced := rulesOf(t, render(t, nil), "kuik-secret-syncer")
	for _, verb := range []string{"get", "list", "watch"} {
		if allows(cluster, verb, "", "secrets") {
			t.Errorf("the secret-syncer may %s Secrets cluster-wide", verb)
		}
		if !allows(namespaced[ns], verb, "", "secrets") {
			t.Errorf("the secret-syncer may not %s Secrets in %s", verb, ns)
		}
	}
	for _, verb := range []string{"create", "patch"} {
		if !allows(cluster, verb, "", "secrets") {
			t.Errorf("the secret-syncer may not %s Secrets cluster-wide", verb)
		}
	}
	for _, verb := range []string{"update", "delete", "deletecollection"} {
		if allows(cluster, verb, "", "secrets") || allows(namespaced[ns], verb, "", "secrets") {
			t.Errorf("the secret-syncer may %s Secrets", verb)
		}
	}
	if diff := cmp.Diff([]string{metav1.NamespaceDefault, ns}, keys(namespaced)); diff != "" {
		t.Errorf("the secret-syncer's RoleBindings by namespace (-want +got):\n%s", diff)
	}
	for _, want := range []struct{ verb, group, resource string }{
		{"list", "", "pods"}, {"watch", "", "pods"}, {"list", "", "namespaces"}, {"watch", "", "namespaces"},
		{"list", "kuik.enix.io", "imagealternatives"}, {"watch", "kuik.enix.io", "imagemirrors"},
		{"patch", "kuik.enix.io", "imagealternatives/status"}, {"patch", "kuik.enix.io", "imagemirrors/status"},
	} {
		if !allows(cluster, want.verb, want.group, want.resource) {
			t.Errorf("the secret-syncer may not %s %s", want.verb, want.resource)
		}
	}
	if !allows(namespaced[ns], "update", "coordination.k8s.io", "leases") || allows(cluster, "update", "coordination.k8s.io", "leases") {
		t.Error("the secret-syncer's Lease rights are not confined to its namespace")
	}
	// Exactly the verbs it uses: status through patches; events (core/v1 only, its recorder's)
	// created in default, where its cluster-scoped resources' events go, and patched there when
	// a cause comes back, created in its namespace by leader election; its retention records
	// listed at start and applied, in its namespace only.
	verbs := func(rules []rbacv1.PolicyRule, group, resource string) []string {
		var out []string
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if allows(rules, v, group, resource) {
				out = append(out, v)
			}
		}
		return out
	}
	for _, want := range []struct {
		namespace, group, resource string
		verbs                      []string
	}{
		{"", "kuik.enix.io", "imagealternatives/status", []string{"patch"}},
		{"", "kuik.enix.io", "imagemirrors/status", []string{"patch"}},
		// No event read and no pod get by default: those come with syncer.missedPulls.enabled
		// (TestMissedPullsRightsAndFlags).
		{"", "", "events", nil},
		{"", "", "pods", []string{"list", "watch"}},
		{"", "events.k8s.io", "events", nil},
		{metav1.NamespaceDefault, "", "events", []string{"create", "patch"}},
		{metav1.NamespaceDefault, "events.k8s.io", "events", nil},
		{ns, "", "events", []string{"create"}},
		{ns, "events.k8s.io", "events", nil},
		{"", "", "configmaps", nil},
		{metav1.NamespaceDefault, "", "configmaps", nil},
		{ns, "", "configmaps", []string{"list", "create", "patch"}},
	} {
		rules, where := cluster, "cluster-wide"
		if want.namespace != "" {
			rules, where = namespaced[want.namespace], "in "+want.namespace
		}
		if diff := cmp.Diff(want.verbs, verbs(rules, want.group, want.resource)); diff != "" {
			t.Errorf("the secret-syncer's verbs on %s %q %s (-want +got):\n%s", want.resource, want.group, where, diff)
		}
	}
}

func TestWebhookOnlyReads(t *testing.T) {
	cluster, namespaced := rulesOf(t, render(t, nil), "kuik-webhook")
	for _, verb := range []string{"get", "list", "watch", "create", "patch", "update"} {
		if allows(cluster, verb, "", "secrets") {
			t.Errorf("the webhook may %s Secrets cluster-wide", verb)
		}
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		for _, rules := range append([][]rbacv1.PolicyRule{cluster}, namespaced[ns]) {
			for _, res := range []string{"secrets", "pods", "imagealternatives", "configmaps"} {
				if allows(rules, verb, "", res) || allows(rules, verb, "kuik.enix.io", res) {
					t.Errorf("the webhook may %s %s", verb, res)
				}
			}
		}
	}
	if !allows(namespaced[ns], "watch", "", "secrets") || !allows(cluster, "create", "authorization.k8s.io", "subjectaccessreviews") ||
		!allows(cluster, "watch", "kuik.enix.io", "imagemirrors") || !allows(cluster, "list", "", "namespaces") {
		t.Error("the webhook lacks a right it needs")
	}
	// Namespaces: read through the cache, and directly (get) when a namespace created a moment
	// ago is not in it yet; nothing else.
	var nsVerbs []string
	for _, r := range cluster {
		if slices.Contains(r.Resources, "namespaces") {
			nsVerbs = append(nsVerbs, r.Verbs...)
		}
	}
	slices.Sort(nsVerbs)
	if diff := cmp.Diff([]string{"get", "list", "watch"}, nsVerbs); diff != "" {
		t.Errorf("the webhook's verbs on namespaces (-want +got):\n%s", diff)
	}
}

func TestWebhookConfigurations(t *testing.T) {
	for _, probe := range []int{1, 2, 5, 29} {
		r := render(t, map[string]any{"webhook": map[string]any{"probeTimeoutSeconds": probe, "mutating": map[string]any{"excludeNamespaces": []any{"monitoring"}}}})
		m := convert[admissionregistrationv1.MutatingWebhookConfiguration](t, r.Find("MutatingWebhookConfiguration", "kuik-webhook"))
		if len(m.Webhooks) != 1 {
			t.Fatalf("mutating webhooks = %d, want 1", len(m.Webhooks))
		}
		w := m.Webhooks[0]
		if *w.TimeoutSeconds < int32(probe)+1 || *w.TimeoutSeconds > 30 {
			t.Errorf("probe timeout %ds: timeoutSeconds = %d, want ≥ %d and ≤ 30", probe, *w.TimeoutSeconds, probe+1)
		}
		args := deployments(t, r)["kuik-webhook"].Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--probe-timeout="+itoa(probe)+"s") {
			t.Errorf("probe timeout %ds: webhook args %v", probe, args)
		}
		if probe != 2 {
			continue
		}
		want := admissionregistrationv1.MutatingWebhook{
			Name:                    "pods.kuik.enix.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Name: "kuik-webhook", Namespace: ns, Path: ptr("/mutate-pods"), Port: ptr[int32](443)},
				CABundle: w.ClientConfig.CABundle,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr(admissionregistrationv1.NamespacedScope)}},
				{Operations: []admissionregistrationv1.OperationType{"UPDATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/ephemeralcontainers"}, Scope: ptr(admissionregistrationv1.NamespacedScope)}},
			},
			MatchPolicy:        ptr(admissionregistrationv1.Equivalent),
			FailurePolicy:      ptr(admissionregistrationv1.Ignore),
			SideEffects:        ptr(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:     ptr[int32](3),
			ReinvocationPolicy: ptr(admissionregistrationv1.IfNeededReinvocationPolicy),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", ns, "monitoring"}},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kuik.enix.io/skip", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}},
			}},
		}
		if diff := cmp.Diff(want, w); diff != "" {
			t.Errorf("mutating webhook (-want +got):\n%s", diff)
		}
		if len(w.ClientConfig.CABundle) == 0 {
			t.Error("mutating webhook has no caBundle")
		}
		// The selectors do what they say.
		nsSel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		objSel, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"kube-system": false, ns: false, "monitoring": false, "default": true, "team-a": true} {
			if got := nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": name}); got != want {
				t.Errorf("namespace %s routed = %v, want %v", name, got, want)
			}
		}
		for l, want := range map[string]bool{"true": false, "false": true, "": true} {
			set := labels.Set{}
			if l != "" {
				set["kuik.enix.io/skip"] = l
			}
			if got := objSel.Matches(set); got != want {
				t.Errorf("pod with kuik.enix.io/skip=%q routed = %v, want %v", l, got, want)
			}
		}

		v := convert[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "kuik-webhook"))
		wantV := []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "routing.kuik.enix.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Name: "kuik-webhook", Namespace: ns, Path: ptr("/validate-routing"), Port: ptr[int32](443)},
				CABundle: w.ClientConfig.CABundle,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"kuik.enix.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"imagealternatives", "imagemirrors"}, Scope: ptr(admissionregistrationv1.ClusterScope)},
			}},
			MatchPolicy:    ptr(admissionregistrationv1.Equivalent),
			FailurePolicy:  ptr(admissionregistrationv1.Fail),
			SideEffects:    ptr(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds: ptr[int32](10),
		}}
		if diff := cmp.Diff(wantV, v.Webhooks); diff != "" {
			t.Errorf("validating webhook (-want +got):\n%s", diff)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
func ptr[T any](v T) *T { return &v }

// The chart-generated certificate is signed by the caBundle both configurations carry and
// names the webhook Service as the API server dials it.
func TestGeneratedCertificate(t *testing.T) {
	r := render(t, nil)
	s := convert[corev1.Secret](t, r.Find("Secret", "kuik-webhook-tls"))
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("TLS Secret type = %s", s.Type)
	}
	m := convert[admissionregistrationv1.MutatingWebhookConfiguration](t, r.Find("MutatingWebhookConfiguration", "kuik-webhook"))
	v := convert[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "kuik-webhook"))
	if string(m.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) || string(v.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) {
		t.Fatal("the webhook configurations' caBundle is not the Secret's ca.crt")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kuik-webhook.kuik-system.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate does not verify for kuik-webhook.kuik-system.svc: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.kuik-system.svc"}); err == nil {
		t.Error("serving certificate verifies for another name")
	}
}

func TestCertManager(t *testing.T) {
	t.Run("self-signed issuer", func(t *testing.T) {
		r := render(t, valueSets["cert-manager"])
		if r.Find("Secret", "kuik-webhook-tls") != nil {
			t.Error("the chart generates a TLS Secret although cert-manager issues it")
		}
		issuer := r.Find("Issuer", "kuik-webhook-selfsigned")
		if issuer == nil {
			t.Fatal("no self-signed Issuer")
		}
		if _, ok, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned"); !ok {
			t.Error("the Issuer is not self-signed")
		}
		cert := r.Find("Certificate", "kuik-webhook")
		if cert == nil {
			t.Fatal("no Certificate")
		}
		if cert.GetAPIVersion() != "cert-manager.io/v1" || cert.GetNamespace() != ns {
			t.Errorf("Certificate is %s in %s", cert.GetAPIVersion(), cert.GetNamespace())
		}
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
		if secretName != "kuik-webhook-tls" || !slices.Contains(dns, "kuik-webhook.kuik-system.svc") || issuerName != "kuik-webhook-selfsigned" {
			t.Errorf("Certificate secretName %q, dnsNames %v, issuer %q", secretName, dns, issuerName)
		}
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			o := r.Find(kind, "kuik-webhook")
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != ns+"/kuik-webhook" {
				t.Errorf("%s inject-ca-from = %q, want %s/kuik-webhook", kind, got, ns)
			}
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			if _, found, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle"); found {
				t.Errorf("%s carries a caBundle that cert-manager should inject", kind)
			}
		}
		// The webhook mounts the Secret cert-manager writes.
		vols := deployments(t, r)["kuik-webhook"].Spec.Template.Spec.Volumes
		if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != secretName {
			t.Errorf("webhook volumes = %+v, want the Certificate's Secret", vols)
		}
	})
	t.Run("given issuer", func(t *testing.T) {
		r := render(t, valueSets["cert-manager with an issuer"])
		if len(r.OfKind("Issuer")) != 0 {
			t.Error("an Issuer is created although one is given")
		}
		ref, _, _ := unstructured.NestedStringMap(r.Find("Certificate", "kuik-webhook").Object, "spec", "issuerRef")
		if diff := cmp.Diff(map[string]string{"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}, ref); diff != "" {
			t.Errorf("issuerRef (-want +got):\n%s", diff)
		}
	})
}

// Every pod template passes the restricted Pod Security Standard, as the API server's
// PodSecurity admission evaluates it (k8s.io/pod-security-admission).
func TestPodsAreRestricted(t *testing.T) {
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	check := func(values map[string]any) []string {
		var failures []string
		for name, d := range deployments(t, render(t, values)) {
			for _, res := range evaluator.EvaluatePod(restricted, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec) {
				if !res.Allowed {
					failures = append(failures, name+": "+res.ForbiddenReason+": "+res.ForbiddenDetail)
				}
			}
		}
		return failures
	}
	if f := check(nil); len(f) != 0 {
		t.Errorf("not restricted:\n%s", strings.Join(f, "\n"))
	}
	// The check sees a weakened context.
	if f := check(map[string]any{"securityContext": map[string]any{"allowPrivilegeEscalation": true}}); len(f) != 2 {
		t.Errorf("with allowPrivilegeEscalation, violations = %v, want one per Deployment", f)
	}
	for name, d := range deployments(t, render(t, nil)) {
		c := d.Spec.Template.Spec.Containers[0].SecurityContext
		if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
			t.Errorf("%s: root filesystem is writable", name)
		}
	}
}

func TestImagePullSecrets(t *testing.T) {
	values := map[string]any{
		"imagePullSecret":  map[string]any{"create": true, "registry": "registry.example.com", "username": "robot", "password": "s3cret"},
		"imagePullSecrets": []any{"shared", map[string]any{"name": "other"}},
		"webhook":          map[string]any{"image": map[string]any{"repository": "registry.example.com/kuik/webhook", "tag": "v9", "pullPolicy": "Always", "pullSecrets": []any{"webhook-only", "shared"}}},
	}
	r := render(t, values)
	s := convert[corev1.Secret](t, r.Find("Secret", "kuik-image-pull-secret"))
	if s.Type != corev1.SecretTypeDockerConfigJson || s.Namespace != ns {
		t.Errorf("pull Secret type %s in %q", s.Type, s.Namespace)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatal(err)
	}
	a := cfg.Auths["registry.example.com"]
	if a.Username != "robot" || a.Password != "s3cret" || a.Auth != base64.StdEncoding.EncodeToString([]byte("robot:s3cret")) || len(cfg.Auths) != 1 {
		t.Errorf("pull Secret auths = %+v", cfg.Auths)
	}
	names := func(refs []corev1.LocalObjectReference) []string {
		var out []string
		for _, r := range refs {
			out = append(out, r.Name)
		}
		return out
	}
	d := deployments(t, r)
	if diff := cmp.Diff([]string{"kuik-image-pull-secret", "shared", "other", "webhook-only"}, names(d["kuik-webhook"].Spec.Template.Spec.ImagePullSecrets)); diff != "" {
		t.Errorf("webhook imagePullSecrets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kuik-image-pull-secret", "shared", "other"}, names(d["kuik-secret-syncer"].Spec.Template.Spec.ImagePullSecrets)); diff != "" {
		t.Errorf("secret-syncer imagePullSecrets (-want +got):\n%s", diff)
	}
	wc := d["kuik-webhook"].Spec.Template.Spec.Containers[0]
	sc := d["kuik-secret-syncer"].Spec.Template.Spec.Containers[0]
	if wc.Image != "registry.example.com/kuik/webhook:v9" || wc.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("webhook image %s %s", wc.Image, wc.ImagePullPolicy)
	}
	if sc.Image != "ghcr.io/enix/kuik-secret-syncer:0.1.0" || sc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("secret-syncer image %s %s", sc.Image, sc.ImagePullPolicy)
	}

	// Off by default: no Secret, no reference.
	r = render(t, nil)
	if r.Find("Secret", "kuik-image-pull-secret") != nil {
		t.Error("a pull Secret is created by default")
	}
	for name, d := range deployments(t, r) {
		if len(d.Spec.Template.Spec.ImagePullSecrets) != 0 {
			t.Errorf("%s references pull Secrets by default: %v", name, d.Spec.Template.Spec.ImagePullSecrets)
		}
	}
}

func TestAvailability(t *testing.T) {
	r := render(t, nil)
	d := deployments(t, r)
	w, s := d["kuik-webhook"], d["kuik-secret-syncer"]
	if *w.Spec.Replicas != 2 || *s.Spec.Replicas != 1 {
		t.Errorf("replicas: webhook %d, secret-syncer %d; want 2, 1", *w.Spec.Replicas, *s.Spec.Replicas)
	}
	pdb := convert[policyv1.PodDisruptionBudget](t, r.Find("PodDisruptionBudget", "kuik-webhook"))
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(w.Spec.Template.Labels)) || sel.Matches(labels.Set(s.Spec.Template.Labels)) || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB selects webhook pods: %v, syncer pods: %v, minAvailable %s", sel.Matches(labels.Set(w.Spec.Template.Labels)), sel.Matches(labels.Set(s.Spec.Template.Labels)), pdb.Spec.MinAvailable.String())
	}
	aff := w.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("webhook affinity = %+v, want a preferred anti-affinity", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	asel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	if term.TopologyKey != "kubernetes.io/hostname" || !asel.Matches(labels.Set(w.Spec.Template.Labels)) {
		t.Errorf("anti-affinity term %+v does not spread webhook pods over nodes", term)
	}
	if !slices.Contains(s.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
		t.Errorf("secret-syncer args %v, want leader election", s.Spec.Template.Spec.Containers[0].Args)
	}
	for _, want := range []string{"--cluster-resource-namespace=" + ns, "--retention=15m", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"} {
		if !slices.Contains(s.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("secret-syncer args %v lack %s", s.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
	for _, want := range []string{"--cluster-resource-namespace=" + ns, "--cache-ttl=10s", "--cert-dir=/tls", "--webhook-port=9443"} {
		if !slices.Contains(w.Spec.Template.Spec.Containers[0].Args, want) {
			t.Errorf("webhook args %v lack %s", w.Spec.Template.Spec.Containers[0].Args, want)
		}
	}
	// Services select their pods by port name.
	for _, svc := range r.OfKind("Service") {
		sv := convert[corev1.Service](t, svc)
		target := w
		if strings.Contains(sv.Name, "secret-syncer") {
			target = s
		}
		if !labels.SelectorFromSet(sv.Spec.Selector).Matches(labels.Set(target.Spec.Template.Labels)) {
			t.Errorf("Service %s selects no %s pod", sv.Name, target.Name)
		}
		for _, p := range sv.Spec.Ports {
			if !slices.ContainsFunc(target.Spec.Template.Spec.Containers[0].Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.String() }) {
				t.Errorf("Service %s targets port %s that %s does not expose", sv.Name, p.TargetPort.String(), target.Name)
			}
		}
	}
}

func TestServiceMonitors(t *testing.T) {
	if n := len(render(t, nil).OfKind("ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors by default", n)
	}
	r := render(t, valueSets["everything on"])
	sms := r.OfKind("ServiceMonitor")
	if len(sms) != 2 {
		t.Fatalf("%d ServiceMonitors, want 2", len(sms))
	}
	for _, sm := range sms {
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		matched := 0
		for _, svc := range r.OfKind("Service") {
			if labels.SelectorFromSet(sel).Matches(labels.Set(svc.GetLabels())) {
				matched++
				if !strings.HasSuffix(svc.GetName(), "-metrics") {
					t.Errorf("ServiceMonitor %s selects Service %s", sm.GetName(), svc.GetName())
				}
			}
		}
		if matched != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want its metrics Service", sm.GetName(), matched)
		}
	}
}

// `helm package` keeps everything the chart reads (the policy copy is a real file, not a link
// out of the chart): the packaged chart renders the same policy.
func TestPackagedChartRendersThePolicy(t *testing.T) {
	c, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := chartutil.Save(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	packaged, err := loader.Load(tgz)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun, install.ReleaseName, install.Namespace = true, true, "kuik", ns
	if install.KubeVersion, err = chartutil.ParseKubeVersion(charts.KubeVersion); err != nil {
		t.Fatal(err)
	}
	// webhook.mutating.matchConditions: webhook-writes.yaml too.
	values := map[string]any{"webhook": map[string]any{"mutating": map[string]any{"matchConditions": true}}}
	rel, err := install.Run(packaged, values)
	if err != nil {
		t.Fatal(err)
	}
	got, err := charts.Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := render(t, values)
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, name := range []string{"kuik-secret-writes", "kuik-configmap-writes", "kuik-webhook-writes"} {
			var g *unstructured.Unstructured
			for _, o := range got {
				if o.GetKind() == kind && o.GetName() == name {
					g = o
				}
			}
			if want.Find(kind, name) == nil {
				t.Errorf("the chart renders no %s %s", kind, name)
			}
			if diff := cmp.Diff(want.Find(kind, name), g); diff != "" {
				t.Errorf("packaged chart's %s %s (-dir +packaged):\n%s", kind, name, diff)
			}
		}
	}
	if len(packaged.CRDObjects()) != 2 {
		t.Errorf("packaged chart has %d CRDs, want 2", len(packaged.CRDObjects()))
	}
}

// X.509 bounds a commonName to 64 bytes (ub-common-name) and cert-manager refuses a Certificate
// whose commonName is longer; <service>.<namespace>.svc exceeds it with a long release name and
// namespace. Neither the cert-manager Certificate nor the chart-generated certificates may carry
// such a commonName, and both still name the Service as the API server dials it.
func TestCertificateNamesFitX509(t *testing.T) {
	const maxCommonName = 64
	release := "release-" + strings.Repeat("r", 45)     // 53 bytes, Helm's longest release name
	namespace := "namespace-" + strings.Repeat("n", 53) // 63 bytes, the longest namespace name
	render := func(t *testing.T, values map[string]any) (*charts.Rendered, string) {
		t.Helper()
		r, err := charts.Render(charts.Release{Name: release, Namespace: namespace, Values: values})
		if err != nil {
			t.Fatal(err)
		}
		var svc string
		for _, u := range r.OfKind("Service") {
			if slices.ContainsFunc(convert[corev1.Service](t, u).Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "webhook" }) {
				svc = u.GetName()
			}
		}
		if svc == "" {
			t.Fatal("no webhook Service")
		}
		return r, svc + "." + namespace + ".svc"
	}

	t.Run("cert-manager", func(t *testing.T) {
		r, dialed := render(t, valueSets["cert-manager"])
		if len(dialed) <= maxCommonName {
			t.Fatalf("%s is %d bytes: the test needs a name longer than %d", dialed, len(dialed), maxCommonName)
		}
		certs := r.OfKind("Certificate")
		if len(certs) != 1 {
			t.Fatalf("%d Certificates, want 1", len(certs))
		}
		if cn, found, _ := unstructured.NestedString(certs[0].Object, "spec", "commonName"); found && len(cn) > maxCommonName {
			t.Errorf("Certificate commonName %q is %d bytes, over X.509's %d", cn, len(cn), maxCommonName)
		}
		dns, _, _ := unstructured.NestedStringSlice(certs[0].Object, "spec", "dnsNames")
		if !slices.Contains(dns, dialed) {
			t.Errorf("Certificate dnsNames %v lack %s", dns, dialed)
		}
	})

	t.Run("generated", func(t *testing.T) {
		r, dialed := render(t, nil)
		var s *corev1.Secret
		for _, u := range r.OfKind("Secret") {
			if u.GetLabels()["app.kubernetes.io/component"] == "webhook" {
				s = convert[corev1.Secret](t, u)
			}
		}
		if s == nil {
			t.Fatal("no generated TLS Secret")
		}
		parse := func(key string) *x509.Certificate {
			t.Helper()
			block, _ := pem.Decode(s.Data[key])
			if block == nil {
				t.Fatalf("%s holds no PEM block", key)
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		ca, cert := parse("ca.crt"), parse("tls.crt")
		for name, c := range map[string]*x509.Certificate{"CA": ca, "serving certificate": cert} {
			if cn := c.Subject.CommonName; len(cn) > maxCommonName {
				t.Errorf("%s commonName %q is %d bytes, over X.509's %d", name, cn, len(cn), maxCommonName)
			}
			if cn := c.Issuer.CommonName; len(cn) > maxCommonName {
				t.Errorf("%s issuer commonName %q is %d bytes, over X.509's %d", name, cn, len(cn), maxCommonName)
			}
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dialed, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", dialed, err)
		}
	})
}

// Two releases (their own names, their own namespaces) render no object of the same kind,
// namespace and name outside their own namespaces (cluster-scoped ones, and any in a shared
// namespace), so the second neither fails to install nor takes over the first's; and each
// release's cluster-wide objects point at its own: the policy binding at its policy, the policy
// at its secret-syncer, the RBAC at its ServiceAccounts.
func TestTwoReleasesShareNoClusterScopedObject(t *testing.T) {
	releases := []charts.Release{{Name: "kuik", Namespace: "kuik-system"}, {Name: "second", Namespace: "team-b"}}
	owner := map[string]string{} // kind/namespace/name → release
	for _, rel := range releases {
		r, err := charts.Render(rel)
		if err != nil {
			t.Fatal(err)
		}
		var clusterScoped int
		for _, o := range r.Objects {
			if o.GetNamespace() == rel.Namespace {
				continue
			}
			if o.GetNamespace() == "" {
				clusterScoped++
			}
			key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
			if other, ok := owner[key]; ok {
				t.Errorf("releases %s and %s both render %s", other, rel.Name, key)
			}
			owner[key] = rel.Name
		}
		if clusterScoped < 6 {
			t.Errorf("release %s renders %d cluster-scoped objects, want the RBAC, both webhook configurations, the policies and their bindings", rel.Name, clusterScoped)
		}

		// secret-writes and configmap-writes (pod-deletes is opt-in).
		policies, bindings := r.OfKind("ValidatingAdmissionPolicy"), r.OfKind("ValidatingAdmissionPolicyBinding")
		if len(policies) != 2 || len(bindings) != 2 {
			t.Fatalf("release %s renders %d policies and %d bindings, want two each", rel.Name, len(policies), len(bindings))
		}
		for _, u := range policies {
			vap := convert[admissionregistrationv1.ValidatingAdmissionPolicy](t, u)
			b := r.Find("ValidatingAdmissionPolicyBinding", vap.Name)
			if b == nil {
				t.Fatalf("release %s: no binding named after its policy %s", rel.Name, vap.Name)
			}
			if vapb := convert[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, b); vapb.Spec.PolicyName != vap.Name {
				t.Errorf("release %s: the binding %s binds policy %q, want its own %q", rel.Name, vapb.Name, vapb.Spec.PolicyName, vap.Name)
			}
			syncer := "'system:serviceaccount:" + rel.Namespace + ":"
			if !strings.Contains(vap.Spec.MatchConditions[0].Expression, syncer) {
				t.Errorf("release %s: policy %s does not name a ServiceAccount of %s: %s", rel.Name, vap.Name, rel.Namespace, vap.Spec.MatchConditions[0].Expression)
			}
		}
		for _, u := range r.OfKind("ClusterRoleBinding") {
			b := convert[rbacv1.ClusterRoleBinding](t, u)
			if r.Find("ClusterRole", b.RoleRef.Name) == nil {
				t.Errorf("release %s: %s binds ClusterRole %s, which it does not render", rel.Name, b.Name, b.RoleRef.Name)
			}
			for _, s := range b.Subjects {
				if s.Namespace != rel.Namespace {
					t.Errorf("release %s: %s binds %s/%s", rel.Name, b.Name, s.Namespace, s.Name)
				}
			}
		}
	}
}

// webhook.networkPolicy renders a NetworkPolicy letting only the given peers reach the webhook
// port of the webhook pods, plus the extra rules; it is off by default and refuses to render
// without peers (an ingress rule without peers admits every source).
func TestWebhookNetworkPolicy(t *testing.T) {
	if n := len(render(t, nil).OfKind("NetworkPolicy")); n != 0 {
		t.Errorf("%d NetworkPolicies by default, want none", n)
	}
	apiServer := []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/24"}}}
	prometheus := map[string]any{
		"from":  []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}},
		"ports": []any{map[string]any{"port": "metrics"}},
	}
	r := render(t, map[string]any{"webhook": map[string]any{"networkPolicy": map[string]any{
		"enabled": true, "from": apiServer, "extraIngress": []any{prometheus},
	}}})
	nps := r.OfKind("NetworkPolicy")
	if len(nps) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(nps))
	}
	np := convert[networkingv1.NetworkPolicy](t, nps[0])
	if np.Namespace != ns {
		t.Errorf("NetworkPolicy in %q", np.Namespace)
	}
	d := deployments(t, r)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(d["kuik-webhook"].Spec.Template.Labels)) || sel.Matches(labels.Set(d["kuik-secret-syncer"].Spec.Template.Labels)) {
		t.Error("the NetworkPolicy does not select exactly the webhook pods")
	}
	if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); diff != "" {
		t.Errorf("policyTypes (-want +got):\n%s", diff)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress rules = %+v, want the webhook port's and the extra one", np.Spec.Ingress)
	}
	webhookRule := np.Spec.Ingress[0]
	if diff := cmp.Diff([]networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}}, webhookRule.From); diff != "" {
		t.Errorf("webhook port peers (-want +got):\n%s", diff)
	}
	// The rule's port is the one the webhook Service targets, on the webhook container.
	svc := convert[corev1.Service](t, r.Find("Service", "kuik-webhook"))
	if len(webhookRule.Ports) != 1 || webhookRule.Ports[0].Port == nil || webhookRule.Ports[0].Port.String() != svc.Spec.Ports[0].TargetPort.String() ||
		webhookRule.Ports[0].Protocol == nil || *webhookRule.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("webhook rule ports = %+v, want TCP %s (the Service's targetPort)", webhookRule.Ports, svc.Spec.Ports[0].TargetPort.String())
	}
	if !slices.ContainsFunc(d["kuik-webhook"].Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool {
		return p.Name == webhookRule.Ports[0].Port.String() && p.ContainerPort == 9443
	}) {
		t.Errorf("the webhook container has no port %s (9443)", webhookRule.Ports[0].Port.String())
	}
	if got := np.Spec.Ingress[1]; len(got.Ports) != 1 || got.Ports[0].Port.String() != "metrics" || got.From[0].NamespaceSelector == nil {
		t.Errorf("extra ingress rule = %+v, want the values' one", got)
	}
	if msgs := charts.Lint(ns, map[string]any{"webhook": map[string]any{"networkPolicy": map[string]any{"enabled": true, "from": apiServer}}}); len(msgs) != 0 {
		t.Errorf("helm lint:\n%s", strings.Join(msgs, "\n"))
	}

	for name, np := range map[string]map[string]any{
		"enabled without peers":      {"enabled": true},
		"enabled with an empty list": {"enabled": true, "from": []any{}},
		"an empty peer":              {"enabled": true, "from": []any{map[string]any{}}},
		"a peer that is not one":     {"enabled": true, "from": []any{map[string]any{"cidr": "10.0.0.0/24"}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(map[string]any{"webhook": map[string]any{"networkPolicy": np}})
			if err == nil {
				t.Fatal("rendered, want refused")
			}
			if !strings.Contains(err.Error(), "from") {
				t.Errorf("refusal %q does not name from", err)
			}
		})
	}
}
