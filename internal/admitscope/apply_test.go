package admitscope

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestHoldsTheMatchConditionsApplyWrites(t *testing.T) {
	filtered := Result{Reason: ReasonFiltered, Conditions: []admissionregistrationv1.MatchCondition{{Name: ConditionName, Expression: "x"}}}
	all := Result{Reason: ReasonCatchAllMirror}
	other := admissionregistrationv1.MatchCondition{Name: "helm.example/extra", Expression: "true"}
	cases := map[string]struct {
		hooks []admissionregistrationv1.MutatingWebhook
		res   Result
		want  bool
	}{
		"the filtered condition": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName, MatchConditions: filtered.Conditions}},
			res:   filtered, want: true,
		},
		"every pod sent: the one condition SendAll": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName, MatchConditions: []admissionregistrationv1.MatchCondition{{Name: ConditionName, Expression: SendAll}}}},
			res:   all, want: true,
		},
		"every pod sent, no condition: not what Apply writes": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName}},
			res:   all,
		},
		"another expression under the same name": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName, MatchConditions: []admissionregistrationv1.MatchCondition{{Name: ConditionName, Expression: "false"}}}},
			res:   filtered,
		},
		"a condition of another manager beside it narrows what is sent": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName, MatchConditions: append([]admissionregistrationv1.MatchCondition{other}, filtered.Conditions...)}},
			res:   filtered,
		},
		"the condition on another webhook only": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName}, {Name: "other.kuik.enix.io", MatchConditions: filtered.Conditions}},
			res:   filtered,
		},
		"no such webhook": {
			hooks: []admissionregistrationv1.MutatingWebhook{{Name: "other.kuik.enix.io", MatchConditions: filtered.Conditions}},
			res:   filtered,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: tc.hooks}
			if got := Holds(cfg, WebhookName, tc.res); got != tc.want {
				t.Errorf("Holds = %v, want %v", got, tc.want)
			}
		})
	}
}
