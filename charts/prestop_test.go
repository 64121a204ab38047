package charts_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// A stopping webhook replica keeps serving for webhook.preStopSeconds, within its grace
// period; 0 removes the hook.
func TestWebhookKeepsServingWhileItsEndpointGoes(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   int64
	}{
		{nil, 5},
		{map[string]any{"webhook": map[string]any{"preStopSeconds": 12}}, 12},
		{map[string]any{"webhook": map[string]any{"preStopSeconds": 0}}, 0},
	} {
		var webhook *appsv1.Deployment
		for _, u := range render(t, tc.values).OfKind("Deployment") {
			if d := convert[appsv1.Deployment](t, u); d.Spec.Template.Spec.Containers[0].Name == "webhook" {
				webhook = d
			}
		}
		if webhook == nil {
			t.Fatal("no webhook Deployment")
		}
		c := webhook.Spec.Template.Spec.Containers[0]
		var got int64
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			got = c.Lifecycle.PreStop.Sleep.Seconds
		}
		if got != tc.want {
			t.Errorf("values %v: preStop sleep %d s, want %d", tc.values, got, tc.want)
		}
		grace := int64(30)
		if g := webhook.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		if got >= grace {
			t.Errorf("preStop sleep %d s not below the grace period %d s", got, grace)
		}
	}
	if err := renderErr(map[string]any{"webhook": map[string]any{"preStopSeconds": 40}}); err == nil {
		t.Error("a preStop sleep past the grace period rendered")
	}
}
