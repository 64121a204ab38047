package charts_test

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

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
