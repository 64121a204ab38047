package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// stuckPodAge is the chart's syncer.recreateStuckPods.age on the node: short, so the test takes
// a few minutes, long enough to tell "not deleted for longer than the age" from "not yet".
const stuckPodAge = 20 * time.Second

// recreateStuckPodsValues are the syncer's chart values of the shared install: missed pulls on
// (off by default) and the syncer may delete stuck pods (no routing resource opts in unless a
// test says so).
func recreateStuckPodsValues() map[string]any {
	return map[string]any{
		"missedPulls":       map[string]any{"enabled": true},
		"recreateStuckPods": map[string]any{"enabled": true, "age": stuckPodAge.String()},
	}
}

// scaleDeployment sets the replicas of one of kuik's Deployments.
func (w *world) scaleDeployment(t *testing.T, name string, replicas int32) {
	t.Helper()
	s, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).GetScale(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("scale of %s: %v", name, err)
	}
	s.Spec.Replicas = replicas
	if _, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).UpdateScale(context.Background(), name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
}

// admittedRouted polls dry-run creates of a pod of upstream in ns until the API server admits
// it routed (to image) or not routed, as want says: the webhook is up, or out of reach.
func (w *world) admittedRouted(t *testing.T, ns, upstream, image string, want bool) {
	t.Helper()
	probe := pod("probe", upstream)
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := w.cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = podSummary(got)
		routed := rewritten(got) && got.Spec.Containers[0].Image == image
		return routed == want, nil
	})
	if err != nil {
		t.Fatalf("a pod of %s never admitted with routed=%v (last: %s): %v", ns, want, last, err)
	}
}

// deploymentPod waits until the Deployment has a pod other than the ones excluded (by UID),
// not being deleted, and returns it.
func (w *world) deploymentPod(t *testing.T, ns, app string, exclude ...types.UID) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := w.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp == nil && !contains(uids(exclude), string(p.UID)) {
				got = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no new pod of %s/%s: %v", ns, app, err)
	}
	return got
}

func uids(us []types.UID) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = string(u)
	}
	return out
}

// resourceEvents joins the messages of the events of reason on a routing resource (their
// namespace is "default").
func (w *world) resourceEvents(ctx context.Context, kind, name, reason string) (string, error) {
	list, err := w.cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		return "", err
	}
	var msgs []string
	for _, e := range list.Items {
		msgs = append(msgs, e.Message)
	}
	return strings.Join(msgs, "\n"), nil
}

// The proof, on the node. A Deployment created while the webhook is down (scaled to
// zero: the API server admits its pod unchanged, failurePolicy Ignore) runs an image whose
// upstream refuses connections: the kubelet leaves it in ErrImagePull/ImagePullBackOff. The
// secret-syncer sees the kubelet's events, verifies the pod and puts ImagePullMissedRouting on it,
// naming the private registry's candidate. Without spec.recreateStuckPods the pod stays, longer
// than the stuck age. The webhook comes back, the resource opts in: the syncer deletes the pod,
// its ReplicaSet recreates it, the webhook routes it, and the kubelet runs it from the private
// registry through the injected Secret.
func TestDeploymentAdmittedWhileTheWebhookIsDownRunsOnlyWithRecreateStuckPods(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	const app = "missed"
	image := w.n.PushGuest(t, w.registry, "acme/"+app+":v1")
	upstream := w.down + "/acme/" + app
	ns := w.namespace(t, map[string]string{"e2e": app})
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": app}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: w.registry.Host + "/acme/" + app, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
		},
	}
	w.create(t, ia)
	w.admittedRouted(t, ns, upstream+":v1", image, true)

	// The webhook goes down.
	hooks, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).Get(t.Context(), w.kuik.Webhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := ptr.Deref(hooks.Spec.Replicas, 1)
	w.scaleDeployment(t, w.kuik.Webhook, 0)
	restored := false
	t.Cleanup(func() {
		if !restored {
			w.scaleDeployment(t, w.kuik.Webhook, replicas)
			_ = w.kuik.WaitAvailable(context.Background(), w.cs, waitTimeout)
		}
	})
	w.admittedRouted(t, ns, upstream+":v1", image, false)

	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod("", upstream+":v1").Spec,
			},
		},
	}
	if _, err := w.cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stuck := w.deploymentPod(t, ns, app)
	if rewritten(stuck) || stuck.Spec.Containers[0].Image != upstream+":v1" {
		t.Fatalf("the pod admitted while the webhook is down: %s, want it unchanged", podSummary(stuck))
	}
	msg := w.waitPullRefused(t, ns, stuck.Name)
	t.Logf("pod %s admitted unchanged, the kubelet: %s", stuck.Name, firstLine(msg))

	// The syncer reports it, on the pod and on the resource.
	var reported time.Time
	eventually(t, "ImagePullMissedRouting on the stuck pod", func(ctx context.Context) error {
		got := w.events(t, ns, stuck.Name, v1alpha1.EventImagePullMissedRouting)
		if !strings.Contains(got, upstream+":v1") || !strings.Contains(got, image) {
			return fmt.Errorf("events: %q", got)
		}
		reported = time.Now()
		t.Logf("pod event: %s", got)
		return nil
	})
	eventually(t, "ImagePullMissedRouting on the resource", func(ctx context.Context) error {
		got, err := w.resourceEvents(ctx, "ImageAlternative", app, v1alpha1.EventImagePullMissedRouting)
		if err != nil {
			return err
		}
		if !strings.Contains(got, ns+"/"+stuck.Name) {
			return fmt.Errorf("events: %q", got)
		}
		return nil
	})

	// Without the option it stays, stuck, for longer than the stuck age.
	for time.Since(reported) < 2*stuckPodAge {
		p, err := w.cs.CoreV1().Pods(ns).Get(t.Context(), stuck.Name, metav1.GetOptions{})
		if err != nil || p.UID != stuck.UID || p.DeletionTimestamp != nil {
			t.Fatalf("without recreateStuckPods the stuck pod went: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	p, err := testnode.WaitPod(t.Context(), w.cs, ns, stuck.Name, waitTimeout, testnode.ContainerWaiting("ErrImagePull", "ImagePullBackOff"))
	if err != nil || p.UID != stuck.UID {
		t.Fatalf("the stuck pod after %s: %v", 2*stuckPodAge, err)
	}

	// The webhook comes back; the resource opts in.
	w.scaleDeployment(t, w.kuik.Webhook, replicas)
	restored = true
	if err := w.kuik.WaitAvailable(t.Context(), w.cs, waitTimeout); err != nil {
		t.Fatalf("the webhook did not come back: %v", err)
	}
	w.admittedRouted(t, ns, upstream+":v1", image, true)
	optIn := time.Now()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"recreateStuckPods": true}})
	if err := w.c.Patch(t.Context(), ia, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stuck pod deleted", func(ctx context.Context) error {
		p, err := w.cs.CoreV1().Pods(ns).Get(ctx, stuck.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && (p.UID != stuck.UID || p.DeletionTimestamp != nil)) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (uid %s)", p.UID)
	})
	t.Logf("stuck pod deleted %.1fs after the opt-in", time.Since(optIn).Seconds())
	eventually(t, "StuckPodRecreated on the resource", func(ctx context.Context) error {
		got, err := w.resourceEvents(ctx, "ImageAlternative", app, v1alpha1.EventStuckPodRecreated)
		if err != nil {
			return err
		}
		if !strings.Contains(got, ns+"/"+stuck.Name) {
			return fmt.Errorf("events: %q", got)
		}
		return nil
	})
	fresh := w.deploymentPod(t, ns, app, stuck.UID)
	checkRouted(t, fresh, upstream+":v1", image, "ImageAlternative/"+app, string(v1alpha1.RewritePolicyOnFailure), "kuik-inject-imagealternative-"+app)
	w.waitRunning(t, ns, fresh.Name, fresh.CreationTimestamp.Time)
	t.Logf("recreated pod %s routed and Running %.1fs after the opt-in", fresh.Name, time.Since(optIn).Seconds())
}

// The chart's kuik-pod-deletes policies are in force on the node: the syncer's own identity may
// evict a pod only when its controller recreates it, the kubelet reports a container waiting in
// ErrImagePull or ImagePullBackOff and none of its containers ever ran; a Running pod of the same
// kind is refused, and the chart grants it no delete at all. (The other cases are
// internal/syncer/integration's TestPodDeletesAndEvictionsAreBoundedByThePolicy.)
func TestPodDeletesAreBoundedByThePolicyOnTheNode(t *testing.T) {
	w := env(t)
	ns := w.namespace(t, nil)
	image := w.n.PushGuest(t, w.registry, "acme/deletes:v1")
	if _, err := w.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.registry.Host)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := w.cs.AppsV1().Deployments(w.kuik.Namespace).Get(t.Context(), w.kuik.Syncer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syncerCS, err := kubernetes.NewForConfig(w.n.ConfigAsServiceAccount(w.kuik.Namespace, d.Spec.Template.Spec.ServiceAccountName))
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(app, image string) *corev1.Pod {
		labels := map[string]string{"app": app}
		spec := pod("", image).Spec
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
		if _, err := w.cs.AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: app},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return w.deploymentPod(t, ns, app)
	}
	running := deploy("running", image)
	w.waitRunning(t, ns, running.Name, running.CreationTimestamp.Time)
	stuck := deploy("stuck", w.down+"/acme/deletes:v1")
	w.waitPullRefused(t, ns, stuck.Name)

	// The syncer's Eviction of the pod's current version, dry-run, polled: the kubelet writes
	// the stuck pod's status again at each back-off, and the policy reads the pod from the API
	// server's own cache.
	evict := func(ctx context.Context, name string) error {
		p, err := w.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid, rv := p.UID, p.ResourceVersion
		return syncerCS.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll},
				Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}},
		})
	}
	want := "ValidatingAdmissionPolicy 'kuik-pod-deletes-evicted-pods' with binding 'kuik-pod-deletes-evicted-pods' denied request: the kuik secret-syncer may only evict pods with a container waiting in ErrImagePull or ImagePullBackOff"
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		last = evict(ctx, running.Name)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), want), nil
	}); err != nil {
		t.Errorf("the syncer evicting the Running pod %s: %v, want Forbidden with %q", running.Name, last, want)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		last = evict(ctx, stuck.Name)
		return last == nil, nil
	}); err != nil {
		t.Errorf("the syncer evicting the stuck pod %s a ReplicaSet owns: %v, want allowed", stuck.Name, last)
	}
	err = syncerCS.CoreV1().Pods(ns).Delete(t.Context(), stuck.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot delete resource "pods"`) {
		t.Errorf("the syncer deleting the stuck pod %s: %v, want refused by RBAC (evictions only)", stuck.Name, err)
	}
}
