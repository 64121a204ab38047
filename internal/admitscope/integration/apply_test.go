package integration_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	acv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	applyConfig    = "kuik-apply"
	coveredImage   = "registry.example/team/app:1"
	uncoveredImage = "elsewhere.example/other/tool:1"
)

// TestApply writes the conditions with admitscope.Apply on the chart's configuration, as
// installed by another field manager, and checks through the API server which pods reach the
// webhook: only covered ones once applied, every one once the conditions are dropped, and,
// with failurePolicy Fail and the webhook down, uncovered pods are still admitted.
func TestApply(t *testing.T) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rec := startRecorder(t)
	chart := chartConfiguration(t, rec.url+"/apply")
	if err := testenv.Apply(ctx, cp.Config(), []*unstructured.Unstructured{chart}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), applyConfig, metav1.DeleteOptions{})
	})

	alt := testutil.NewImageAlternative("team").Group("registry.example/team/").Group("mirror.example/team/").Build()
	filtered := admitscope.Conditions([]v1alpha1.ImageAlternative{alt}, nil)
	if filtered.Reason != admitscope.ReasonFiltered {
		t.Fatalf("conditions: %s (%s), want %s", filtered.Reason, filtered.Message, admitscope.ReasonFiltered)
	}

	t.Run("a missing configuration or webhook is an error and nothing is written", func(t *testing.T) {
		err := admitscope.Apply(ctx, cs, "kuik-absent", admitscope.WebhookName, filtered)
		if !apierrors.IsNotFound(err) {
			t.Fatalf("Apply on a missing configuration: %v, want NotFound", err)
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "kuik-absent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the missing configuration after Apply: %v, want NotFound", err)
		}
		err = admitscope.Apply(ctx, cs, applyConfig, "absent.kuik.enix.io", filtered)
		if err == nil || !strings.Contains(err.Error(), "no webhook absent.kuik.enix.io") {
			t.Fatalf("Apply on a missing webhook: %v, want an error naming it", err)
		}
		if got := webhooksOf(t, cs); len(got) != 1 || got[0].Name != admitscope.WebhookName {
			t.Fatalf("webhooks after a refused Apply: %v, want only %s", names(got), admitscope.WebhookName)
		}
	})

	if err := admitscope.Apply(ctx, cs, applyConfig, admitscope.WebhookName, filtered); err != nil {
		t.Fatal(err)
	}

	t.Run("the applier owns matchConditions only", func(t *testing.T) {
		hook := webhooksOf(t, cs)[0]
		if len(hook.MatchConditions) != 1 || hook.MatchConditions[0] != filtered.Conditions[0] {
			t.Fatalf("matchConditions: %+v, want %+v", hook.MatchConditions, filtered.Conditions)
		}
		cur, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, applyConfig, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var owned string
		for _, mf := range cur.ManagedFields {
			if mf.Manager == admitscope.FieldManager {
				owned = mf.FieldsV1.GetRawString()
			}
		}
		if !strings.Contains(owned, `"f:matchConditions"`) {
			t.Fatalf("fields of %s: %s, want matchConditions", admitscope.FieldManager, owned)
		}
		for _, f := range []string{"f:clientConfig", "f:failurePolicy", "f:rules", "f:namespaceSelector", "f:objectSelector", "f:timeoutSeconds"} {
			if strings.Contains(owned, `"`+f+`"`) {
				t.Errorf("fields of %s hold %s: %s", admitscope.FieldManager, f, owned)
			}
		}
	})

	t.Run("the chart applied again keeps the conditions", func(t *testing.T) {
		again := chartConfiguration(t, rec.url+"/apply")
		hooks, _, _ := unstructured.NestedSlice(again.Object, "webhooks")
		hooks[0].(map[string]any)["timeoutSeconds"] = int64(7)
		if err := unstructured.SetNestedSlice(again.Object, hooks, "webhooks"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Apply(ctx, cp.Config(), []*unstructured.Unstructured{again}); err != nil {
			t.Fatal(err)
		}
		hook := webhooksOf(t, cs)[0]
		if hook.TimeoutSeconds == nil || *hook.TimeoutSeconds != 7 {
			t.Fatalf("timeoutSeconds %v after the chart's apply, want 7", hook.TimeoutSeconds)
		}
		if len(hook.MatchConditions) != 1 {
			t.Fatalf("matchConditions after the chart's apply: %+v, want the applier's", hook.MatchConditions)
		}
	})

	t.Run("only covered pods are sent", func(t *testing.T) {
		waitSent(t, cs, rec, "covered", coveredImage)
		createDryRun(t, cs, podWith("uncovered", "main", uncoveredImage))
		if rec.sent("/apply", "uncovered", "CREATE", "") {
			t.Fatalf("a pod with only %s was sent; no resource covers it", uncoveredImage)
		}
	})

	t.Run("a webhook outage with failurePolicy Fail refuses covered pods only", func(t *testing.T) {
		setWebhook(t, cs, map[string]any{"clientConfig": map[string]any{"url": deadURL(t) + "/apply"}, "timeoutSeconds": int64(2)})
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(namespace).Create(ctx, podWith("outage-covered", "main", coveredImage), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil, nil
		})
		if err != nil {
			t.Fatalf("a covered pod is still admitted with the webhook down and failurePolicy Fail: %v", err)
		}
		for _, image := range []string{uncoveredImage, "nginx", "quay.io/team/app:1"} {
			if _, err := cs.CoreV1().Pods(namespace).Create(ctx, podWith("outage-uncovered", "main", image), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatalf("an uncovered pod of %s with the webhook down: %v, want admitted", image, err)
			}
		}
		setWebhook(t, cs, map[string]any{"clientConfig": map[string]any{"url": rec.url + "/apply"}, "timeoutSeconds": int64(10)})
	})

	t.Run("a result that sends every pod sends every pod, also when another manager holds the condition", func(t *testing.T) {
		// A configuration restored from a dump holds the same condition under another
		// manager: an apply of an empty list would leave it.
		cur := webhooksOf(t, cs)[0].MatchConditions
		if len(cur) != 1 {
			t.Fatalf("matchConditions before: %+v, want the filtered one", cur)
		}
		restore := acv1.MutatingWebhookConfiguration(applyConfig).WithWebhooks(acv1.MutatingWebhook().WithName(admitscope.WebhookName).
			WithMatchConditions(acv1.MatchCondition().WithName(cur[0].Name).WithExpression(cur[0].Expression)))
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Apply(ctx, restore, metav1.ApplyOptions{FieldManager: "restore"}); err != nil {
			t.Fatal(err)
		}
		all := admitscope.Conditions(nil, []v1alpha1.ImageMirror{testutil.NewImageMirror("all", "mirror.example/all/").Build()})
		if all.Conditions != nil {
			t.Fatalf("a catch-all mirror: %s, want no conditions", all.Reason)
		}
		if err := admitscope.Apply(ctx, cs, applyConfig, admitscope.WebhookName, all); err != nil {
			t.Fatal(err)
		}
		want := []admissionregistrationv1.MatchCondition{{Name: admitscope.ConditionName, Expression: admitscope.SendAll}}
		if hook := webhooksOf(t, cs)[0]; !slices.Equal(hook.MatchConditions, want) {
			t.Fatalf("matchConditions after a send-all result: %+v, want %+v", hook.MatchConditions, want)
		}
		waitSent(t, cs, rec, "uncovered-now-sent", uncoveredImage)
	})
}

// chartConfiguration is the chart's MutatingWebhookConfiguration named applyConfig, calling
// url, with failurePolicy Fail, as another field manager installs it.
func chartConfiguration(t *testing.T, url string) *unstructured.Unstructured {
	t.Helper()
	chart, err := kuikenv.Render("kuik-system")
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := chart.WebhookConfigurations(443, cp.CA.PEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if h.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		o := h.DeepCopy()
		o.SetName(applyConfig)
		ws, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		w := ws[0].(map[string]any)
		if w["name"] != admitscope.WebhookName {
			t.Fatalf("the chart's webhook is %v, want %s", w["name"], admitscope.WebhookName)
		}
		if _, ok := w["matchConditions"]; ok {
			t.Fatal("the chart renders matchConditions: helm and the applier would fight over them")
		}
		w["clientConfig"].(map[string]any)["url"] = url
		w["failurePolicy"] = string(admissionregistrationv1.Fail)
		if err := unstructured.SetNestedSlice(o.Object, ws, "webhooks"); err != nil {
			t.Fatal(err)
		}
		return o
	}
	t.Fatal("the chart has no MutatingWebhookConfiguration")
	return nil
}

// setWebhook changes the webhook's URL and timeout with an update by another field manager,
// as an operator's `kubectl edit` would; the applier's conditions must survive it.
func setWebhook(t *testing.T, cs kubernetes.Interface, fields map[string]any) {
	t.Helper()
	cur, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), applyConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hook := cur.Webhooks[0].DeepCopy()
	if u, ok := fields["clientConfig"].(map[string]any)["url"].(string); ok {
		hook.ClientConfig.URL = &u
		hook.ClientConfig.Service = nil
	}
	if s, ok := fields["timeoutSeconds"].(int64); ok {
		s32 := int32(s)
		hook.TimeoutSeconds = &s32
	}
	cur.Webhooks[0] = *hook
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(t.Context(), cur, metav1.UpdateOptions{FieldManager: "operator"}); err != nil {
		t.Fatal(err)
	}
	if got := webhooksOf(t, cs)[0]; len(got.MatchConditions) == 0 {
		t.Fatal("an operator's update of the webhook dropped the applier's matchConditions")
	}
}

// waitSent creates dry-run pods of image until one reaches the recorder: the configuration
// the test just wrote is then in force.
func waitSent(t *testing.T, cs kubernetes.Interface, rec *recorder, prefix, image string) {
	t.Helper()
	n := 0
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n++
		name := fmt.Sprintf("%s-%d", prefix, n)
		if _, err := cs.CoreV1().Pods(namespace).Create(ctx, podWith(name, "main", image), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, nil //nolint:nilerr // a configuration being replaced may refuse a pod: retry
		}
		return rec.sent("/apply", name, "CREATE", ""), nil
	})
	if err != nil {
		t.Fatalf("no pod of %s reached the webhook: %v", image, err)
	}
}

// deadURL is an https URL on 127.0.0.1 where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "https://" + addr
}

func webhooksOf(t *testing.T, cs kubernetes.Interface) []admissionregistrationv1.MutatingWebhook {
	t.Helper()
	cur, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), applyConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cur.Webhooks
}

func names(hooks []admissionregistrationv1.MutatingWebhook) []string {
	var s []string
	for _, h := range hooks {
		s = append(s, h.Name)
	}
	return s
}
