package syncer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The syncer owns Ready only: the keeper's KeepReady stays as it is, whatever Ready does.
func TestDesiredStatusKeepsConditionsItDoesNotOwn(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	keepReady := metav1.Condition{
		Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, ObservedGeneration: 1,
		LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)), Reason: "PushFailed", Message: "the keeper's",
	}
	m := mustMirror(t, testutil.NewImageMirror("m", "registry.tld/").SecretRef("creds"))
	ok := dockerSecret("creds", map[string]string{"registry.tld": "u:p"})
	for name, current := range map[string]v1alpha1.RoutingStatus{
		"no Ready yet":    {Conditions: []metav1.Condition{keepReady}},
		"Ready to change": {Conditions: []metav1.Condition{keepReady, {Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSecretNotFound, LastTransitionTime: now}}},
		"Ready first":     {Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSecretNotFound, LastTransitionTime: now}, keepReady}},
	} {
		t.Run(name, func(t *testing.T) {
			next, _ := DesiredStatus(m, Resolve(m, lookupIn(ok), nil), 2, &current, metav1.NewTime(now.Add(time.Minute)))
			if diff := cmp.Diff(&keepReady, meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionKeepReady)); diff != "" {
				t.Errorf("KeepReady (-before +after):\n%s", diff)
			}
			if r := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v, want True", r)
			}
			if len(next.Conditions) != 2 {
				t.Errorf("%d conditions, want Ready and KeepReady", len(next.Conditions))
			}
		})
	}
}
