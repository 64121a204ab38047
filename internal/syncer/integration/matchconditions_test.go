package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
)

// The syncer's leader, with the chart's rights (webhook.mutating.matchConditions), keeps the
// pod webhook's matchConditions in step with the routing resources: a new resource's
// repositories appear in them, a deleted one's go, a catch-all mirror drops them (every pod
// is sent), and conditions an operator removed are back at the next resync.
func TestMatchConditionsFollowTheRoutingResources(t *testing.T) {
	e := harness(t)
	n := name(t)
	config := installPodWebhook(t, e)

	opts := syncerConfig()
	opts.MatchConditionsOf = config
	opts.ResyncPeriod = 2 * time.Second
	stop := startSyncer(t, opts)
	defer stop()

	repo := "scope.example/" + n + "/app"
	ia := testutil.NewImageAlternative(n).Repository(repo).Repository("mirror.example/" + n + "/app").Build()
	create(t, e, &ia)
	waitConditions(t, e, config, "the new resource's repository", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && mc[0].Name == admitscope.ConditionName && strings.Contains(mc[0].Expression, "'"+repo+"'")
	})

	im := testutil.NewImageMirror(n, "mirror.example/"+n+"/all/").Build()
	create(t, e, &im)
	waitConditions(t, e, config, "true: a catch-all mirror sends every pod", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && mc[0].Name == admitscope.ConditionName && mc[0].Expression == admitscope.SendAll
	})
	if err := e.cl.Delete(t.Context(), &im); err != nil {
		t.Fatal(err)
	}
	waitConditions(t, e, config, "the alternative's repository again", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && strings.Contains(mc[0].Expression, "'"+repo+"'")
	})

	// An operator's edit drops them: the next resync restores them.
	cur, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Webhooks[0].MatchConditions = nil
	if _, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(t.Context(), cur, metav1.UpdateOptions{FieldManager: "operator"}); err != nil {
		t.Fatal(err)
	}
	waitConditions(t, e, config, "restored after an edit removed them", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && strings.Contains(mc[0].Expression, "'"+repo+"'")
	})

	if err := e.cl.Delete(t.Context(), &ia); err != nil {
		t.Fatal(err)
	}
	waitConditions(t, e, config, "without the deleted resource's repository", func(mc []admissionregistrationv1.MatchCondition) bool {
		return len(mc) == 1 && !strings.Contains(mc[0].Expression, repo)
	})
}

// installPodWebhook applies the chart's MutatingWebhookConfiguration, its pod webhook
// selecting no namespace (no pod of the other tests reaches it), and deletes it at cleanup.
func installPodWebhook(t *testing.T, e env) string {
	t.Helper()
	return installPodWebhookAt(t, e, 443, map[string]any{"kuik-test.example/none": "none"})
}

// installPodWebhookAt is installPodWebhook with the webhook at 127.0.0.1:port, selecting the
// namespaces with the labels nsLabels.
func installPodWebhookAt(t *testing.T, e env, port int, nsLabels map[string]any) string {
	t.Helper()
	chart, err := kuikenv.RenderValues(crns, chartValues)
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if h.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		ws, _, _ := unstructured.NestedSlice(h.Object, "webhooks")
		ws[0].(map[string]any)["namespaceSelector"] = map[string]any{"matchLabels": nsLabels}
		if err := unstructured.SetNestedSlice(h.Object, ws, "webhooks"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Apply(t.Context(), cp.Config(), []*unstructured.Unstructured{h}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), h.GetName(), metav1.DeleteOptions{})
		})
		return h.GetName()
	}
	t.Fatal("the chart has no MutatingWebhookConfiguration")
	return ""
}

func waitConditions(t *testing.T, e env, config, want string, ok func([]admissionregistrationv1.MatchCondition) bool) {
	t.Helper()
	var last []admissionregistrationv1.MatchCondition
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, config, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = cur.Webhooks[0].MatchConditions
		return ok(last), nil
	})
	if err != nil {
		var got []string
		for _, mc := range last {
			got = append(got, fmt.Sprintf("%s (%d bytes)", mc.Name, len(mc.Expression)))
		}
		t.Fatalf("matchConditions: want %s, got %v: %v", want, got, err)
	}
}
