package charts_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/enix/kuik/charts"
	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
	"github.com/enix/kuik/internal/admitscope"
)

// webhook.mutating.matchConditions: the secret-syncer is told the chart's own
// MutatingWebhookConfiguration, and may get and patch that one only, and the webhook is run
// with --match-conditions-gate; off by default, with neither the flags nor the right. The chart never renders matchConditions itself: helm and
// the syncer's field manager would fight over them.
func TestMatchConditionsFlagAndRight(t *testing.T) {
	for _, on := range []bool{false, true} {
		r := render(t, map[string]any{"webhook": map[string]any{"mutating": map[string]any{"matchConditions": on}}})
		mutating := r.OfKind("MutatingWebhookConfiguration")
		if len(mutating) != 1 {
			t.Fatalf("%d MutatingWebhookConfigurations, want 1", len(mutating))
		}
		config := mutating[0].GetName()
		for _, h := range mutating[0].Object["webhooks"].([]any) {
			hook := h.(map[string]any)
			if _, ok := hook["matchConditions"]; ok {
				t.Errorf("matchConditions %v: the chart renders matchConditions on %v", on, hook["name"])
			}
			if hook["name"] != admitscope.WebhookName {
				t.Errorf("the chart's pod webhook is %v, the syncer writes %s", hook["name"], admitscope.WebhookName)
			}
		}

		var s syncerapp.Options
		cmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
		cmd.SetArgs(deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args)
		if err := cmd.ExecuteContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := ""
		if on {
			want = config
		}
		if s.MatchConditionsOf != want {
			t.Errorf("matchConditions %v: --match-conditions-of %q, want %q", on, s.MatchConditionsOf, want)
		}

		// The webhook routes with a resource only once the syncer marked it PodsSent.
		var w webhookapp.Options
		wcmd := webhookapp.NewCommand(
			func(_ context.Context, o webhookapp.Options) error { w = o; return nil },
			func(context.Context, webhookapp.CandidatesOptions) error { return nil },
		)
		wcmd.SetArgs(deployments(t, r)["kuik-webhook"].Spec.Template.Spec.Containers[0].Args)
		if err := wcmd.ExecuteContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		if w.MatchConditionsGate != on {
			t.Errorf("matchConditions %v: the webhook's --match-conditions-gate is %v", on, w.MatchConditionsGate)
		}

		cluster, _ := rulesOf(t, r, "kuik-secret-syncer")
		var rules []rbacv1.PolicyRule
		for _, rule := range cluster {
			if slices.Contains(rule.APIGroups, "admissionregistration.k8s.io") || slices.Contains(rule.APIGroups, "*") {
				rules = append(rules, rule)
			}
		}
		switch {
		case !on && len(rules) > 0:
			t.Errorf("off: the syncer holds rights on admissionregistration.k8s.io: %+v", rules)
		case on && (len(rules) != 1 || !slices.Equal(rules[0].ResourceNames, []string{config}) ||
			!slices.Equal(rules[0].Verbs, []string{"get", "patch"}) || !slices.Equal(rules[0].Resources, []string{"mutatingwebhookconfigurations"})):
			t.Errorf("on: the syncer's rights on admissionregistration.k8s.io: %+v, want get and patch on %s only", rules, config)
		}
	}
}

// The webhook-writes policy is rendered with webhook.mutating.matchConditions only, and then
// bounds the ServiceAccount the secret-syncer runs as, in the release namespace, to the
// configuration its RBAC and --match-conditions-of name, on the webhook and condition names
// admitscope writes.
func TestWebhookWritesPolicyFollowsTheSyncersRight(t *testing.T) {
	on := map[string]any{"webhook": map[string]any{"mutating": map[string]any{"matchConditions": true}}}
	for name, tc := range map[string]struct {
		release   charts.Release
		policy    string // "" none rendered
		sa        string
		configure string
	}{
		"off": {release: charts.Release{Name: "kuik", Namespace: ns}},
		"on":  {release: charts.Release{Name: "kuik", Namespace: ns, Values: on}, policy: "kuik-webhook-writes", sa: "kuik-secret-syncer", configure: "kuik-webhook"},
		"on, named ServiceAccount": {
			release: charts.Release{Name: "kuik", Namespace: ns, Values: mergeValues(on, map[string]any{"serviceAccount": map[string]any{"syncerName": "syncer"}})},
			policy:  "kuik-webhook-writes", sa: "syncer", configure: "kuik-webhook",
		},
		"on, fullnameOverride": {
			release: charts.Release{Name: "kuik", Namespace: ns, Values: mergeValues(on, map[string]any{"fullnameOverride": "images"})},
			policy:  "images-webhook-writes", sa: "images-secret-syncer", configure: "images-webhook",
		},
		"on, another release and namespace": {
			release: charts.Release{Name: "second", Namespace: "team-b", Values: on},
			policy:  "second-kuik-webhook-writes", sa: "second-kuik-secret-syncer", configure: "second-kuik-webhook",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := charts.Render(tc.release)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range r.Objects {
				if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && strings.HasSuffix(o.GetName(), "-webhook-writes") {
					got = append(got, o.GetKind()+"/"+o.GetName())
				}
			}
			if tc.policy == "" {
				if len(got) != 0 {
					t.Errorf("rendered with matchConditions off: %v", got)
				}
				return
			}
			slices.Sort(got)
			if want := []string{"ValidatingAdmissionPolicy/" + tc.policy, "ValidatingAdmissionPolicyBinding/" + tc.policy}; !slices.Equal(got, want) {
				t.Fatalf("rendered %v, want %v", got, want)
			}
			vap := convert[admissionregistrationv1.ValidatingAdmissionPolicy](t, r.Find("ValidatingAdmissionPolicy", tc.policy))
			if b := convert[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r.Find("ValidatingAdmissionPolicyBinding", tc.policy)); b.Spec.PolicyName != tc.policy {
				t.Errorf("the binding binds %q, want %q", b.Spec.PolicyName, tc.policy)
			}
			user := "system:serviceaccount:" + tc.release.Namespace + ":" + tc.sa
			if len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != "request.userInfo.username == '"+user+"'" {
				t.Errorf("the policy matches %+v, want %s only", vap.Spec.MatchConditions, user)
			}
			if got := deployments(t, r)[strings.TrimSuffix(tc.policy, "-webhook-writes")+"-secret-syncer"].Spec.Template.Spec.ServiceAccountName; got != tc.sa {
				t.Errorf("the secret-syncer runs as %q, the policy bounds %q", got, tc.sa)
			}
			// The configuration: the one the chart renders, the RBAC names and the syncer writes.
			if mwc := r.OfKind("MutatingWebhookConfiguration"); len(mwc) != 1 || mwc[0].GetName() != tc.configure {
				t.Fatalf("the chart's MutatingWebhookConfigurations: %v, want %s", mwc, tc.configure)
			}
			var named [][]string
			for _, u := range r.OfKind("ClusterRole") {
				for _, rule := range convert[rbacv1.ClusterRole](t, u).Rules {
					if slices.Contains(rule.Resources, "mutatingwebhookconfigurations") {
						named = append(named, rule.ResourceNames)
					}
				}
			}
			if len(named) != 1 || !slices.Equal(named[0], []string{tc.configure}) {
				t.Errorf("the chart's RBAC on mutatingwebhookconfigurations names %v, the policy %s", named, tc.configure)
			}
			var exprs strings.Builder
			for _, v := range vap.Spec.Validations {
				exprs.WriteString(v.Expression + "\n")
			}
			for _, lit := range []string{"request.name == '" + tc.configure + "'", "'" + admitscope.WebhookName + "'", "'" + admitscope.ConditionName + "'"} {
				if !strings.Contains(exprs.String(), lit) {
					t.Errorf("no validation holds %s:\n%s", lit, exprs.String())
				}
			}
			if ops := vap.Spec.MatchConstraints.ResourceRules; len(ops) != 1 || len(ops[0].ResourceNames) != 0 ||
				!slices.Equal(ops[0].Resources, []string{"mutatingwebhookconfigurations"}) || !slices.Equal(ops[0].Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
				t.Errorf("the policy's rules %+v, want create, update and delete of every mutatingwebhookconfiguration", ops)
			}
			if *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("failurePolicy %s, want Fail", *vap.Spec.FailurePolicy)
			}
		})
	}
}
