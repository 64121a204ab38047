package admitscope

import (
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	acv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the field manager [Apply] writes with. It owns the webhook's
// matchConditions and nothing else, so that `helm upgrade` (which never renders them) and
// the applier never undo each other's fields.
const FieldManager = "kuik-admitscope"

// WebhookName is the name of kuik's pod webhook in the chart's MutatingWebhookConfiguration.
const WebhookName = "pods.kuik.enix.io"

// SendAll is the expression of the condition [Apply] writes when a result sends every pod.
// An empty list would remove only the conditions FieldManager owns alone: a condition of the
// same name another manager also holds (a configuration restored from a dump) would stay.
const SendAll = "true"

// Apply server-side-applies res's conditions on the webhook named webhook of the
// MutatingWebhookConfiguration config, with [FieldManager]: its matchConditions become
// res.Conditions, and, when res sends every pod, the one condition [ConditionName] with the
// expression [SendAll]. Every other field stays its owner's.
//
// It never creates the configuration or the webhook: a missing one is an error, and
// nothing is written.
func Apply(ctx context.Context, c kubernetes.Interface, config, webhook string, res Result) error {
	cur, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, config, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("matchConditions of %s: %w", config, err)
	}
	return ApplyOn(ctx, c, cur, webhook, res)
}

// ApplyOn is [Apply] on cur, the configuration as just read: it is written only if it still
// has cur's UID.
func ApplyOn(ctx context.Context, c kubernetes.Interface, cur *admissionregistrationv1.MutatingWebhookConfiguration, webhook string, res Result) error {
	if findWebhook(cur, webhook) == nil {
		return fmt.Errorf("matchConditions of %s: no webhook %s in it", cur.Name, webhook)
	}
	hook := acv1.MutatingWebhook().WithName(webhook)
	for _, mc := range written(res) {
		hook.WithMatchConditions(acv1.MatchCondition().WithName(mc.Name).WithExpression(mc.Expression))
	}
	// The UID precondition: a configuration deleted and made again since the Get is not
	// written (an apply would otherwise create a configuration of this one webhook).
	ac := acv1.MutatingWebhookConfiguration(cur.Name).WithUID(cur.UID).WithWebhooks(hook)
	_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("matchConditions of %s, webhook %s: %w", cur.Name, webhook, err)
	}
	return nil
}

// Holds reports whether the webhook named webhook of cfg has exactly the matchConditions
// [Apply] writes for res, in any order. A condition of another field manager, which Apply
// leaves, makes it false: the API server sends a pod only when every condition is true.
func Holds(cfg *admissionregistrationv1.MutatingWebhookConfiguration, webhook string, res Result) bool {
	hook := findWebhook(cfg, webhook)
	if hook == nil {
		return false
	}
	want := written(res)
	if len(hook.MatchConditions) != len(want) {
		return false
	}
	for _, w := range want {
		if !slices.Contains(hook.MatchConditions, w) {
			return false
		}
	}
	return true
}

// written is the list of conditions [Apply] writes for res.
func written(res Result) []admissionregistrationv1.MatchCondition {
	if len(res.Conditions) == 0 {
		return []admissionregistrationv1.MatchCondition{{Name: ConditionName, Expression: SendAll}}
	}
	return res.Conditions
}

func findWebhook(c *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	for i := range c.Webhooks {
		if c.Webhooks[i].Name == name {
			return &c.Webhooks[i]
		}
	}
	return nil
}
