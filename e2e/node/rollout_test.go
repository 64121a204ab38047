package node_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const rolloutReplicas = 10

// rollout sets up an OnFailure ImageAlternative for a down upstream selecting a new namespace,
// waits until the webhook routes a probe pod there, and returns the namespace and a Deployment
// of rolloutReplicas pods of the upstream image (not created yet).
func (w *world) rollout(t *testing.T, name string) (string, *appsv1.Deployment) {
	t.Helper()
	image := w.n.PushGuest(t, w.registry, "acme/"+name+":v1")
	upstream := w.down + "/acme/" + name
	ns := w.namespace(t, map[string]string{"e2e": name})
	w.create(t, &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": name}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: w.registry.Host + "/acme/" + name, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
		},
	})
	// The webhook has the resource once a dry-run pod is routed to image.
	probe := pod("probe", upstream+":v1")
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := w.cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && rewritten(got) && got.Spec.Containers[0].Image == image, nil
	})
	if err != nil {
		t.Fatalf("the webhook never routed a pod of %s: %v", ns, err)
	}
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](rolloutReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod("", upstream+":v1").Spec,
			},
		},
	}
	return ns, d
}

// rolloutPods waits until the Deployment's rolloutReplicas pods exist (admitted) and returns
// them.
func (w *world) rolloutPods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := w.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		pods = list.Items
		return len(pods) >= rolloutReplicas, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods admitted: %v", len(pods), rolloutReplicas, err)
	}
	return pods
}

// waitAllRunning waits until every pod is Running.
func (w *world) waitAllRunning(t *testing.T, ns string, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		w.waitRunning(t, ns, p.Name, p.CreationTimestamp.Time)
	}
}

// A Deployment rolled out while its upstream is down: every pod is routed to the private
// registry and the kubelet runs all of them.
func TestRolloutDuringAnOutageRunsEveryPod(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	ns, d := w.rollout(t, "rollout")
	start := time.Now()
	if _, err := w.cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := w.rolloutPods(t, ns, d.Name)
	for _, p := range pods {
		if !rewritten(&p) {
			t.Errorf("pod %s not routed: %s", p.Name, podSummary(&p))
		}
	}
	w.waitAllRunning(t, ns, pods)
	t.Logf("%d pods routed and Running %.2fs after the Deployment's creation", len(pods), time.Since(start).Seconds())
}

// A webhook pod is killed while a Deployment rolls out during an outage: the API server still
// admits every pod (failurePolicy Ignore); those the surviving replica routed run, those
// admitted while a call hit the dead one stay on the down upstream. The webhook's Deployment
// comes back to its replicas.
func TestRolloutSurvivesAKilledWebhookPod(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	ns, d := w.rollout(t, "rollout-kill")
	hooks, err := w.cs.CoreV1().Pods(w.kuik.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil || len(hooks.Items) < 2 {
		t.Fatalf("webhook pods: %d (%v)", len(hooks.Items), err)
	}
	victim := hooks.Items[0].Name

	start := time.Now()
	if _, err := w.cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.cs.CoreV1().Pods(w.kuik.Namespace).Delete(t.Context(), victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatalf("killing webhook pod %s: %v", victim, err)
	}
	pods := w.rolloutPods(t, ns, d.Name)
	var routed, unrouted []corev1.Pod
	for _, p := range pods {
		if rewritten(&p) {
			routed = append(routed, p)
		} else {
			unrouted = append(unrouted, p)
		}
	}
	t.Logf("webhook pod %s killed during the rollout: %d pods admitted, %d routed, %d left on the down upstream", victim, len(pods), len(routed), len(unrouted))
	if len(routed) == 0 {
		t.Error("no pod was routed: the surviving webhook replica routed none")
	}
	w.waitAllRunning(t, ns, routed)
	for _, p := range unrouted {
		msg := w.waitPullRefused(t, ns, p.Name)
		t.Logf("unrouted pod %s: %s", p.Name, firstLine(msg))
	}
	t.Logf("routed pods Running %.2fs after the Deployment's creation", time.Since(start).Seconds())
	if err := w.kuik.WaitAvailable(t.Context(), w.cs, waitTimeout); err != nil {
		t.Errorf("the webhook did not come back: %v", err)
	}
	if _, err := w.cs.CoreV1().Pods(w.kuik.Namespace).Get(t.Context(), victim, metav1.GetOptions{}); err == nil {
		t.Errorf("webhook pod %s still exists", victim)
	}
}
