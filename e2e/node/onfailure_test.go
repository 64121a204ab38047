package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// pod is a user's pod: one container running the guest image's pause.
func pod(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "app", Image: image, Command: []string{"/guest", "pause"}}},
		},
	}
}

// createPodUntil creates the pod until the webhook admits it as until wants (the webhook learns
// of a new routing resource through its informer, a moment after the resource is created),
// deleting each attempt that is not. It returns the admitted pod and when it was created.
func (w *world) createPodUntil(t *testing.T, ns string, p *corev1.Pod, until func(*corev1.Pod) bool) (*corev1.Pod, time.Time) {
	t.Helper()
	var got *corev1.Pod
	var created time.Time
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		created = time.Now()
		var err error
		if got, err = w.cs.CoreV1().Pods(ns).Create(ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
			last = err.Error()
			return false, nil
		}
		if until(got) {
			return true, nil
		}
		last = "admitted as " + podSummary(got)
		zero := int64(0)
		if err := w.cs.CoreV1().Pods(ns).Delete(ctx, got.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return false, fmt.Errorf("deleting pod %s: %w", got.Name, err)
		}
		return false, w.waitPodGone(ctx, ns, got.Name)
	})
	if err != nil {
		t.Fatalf("pod %s/%s not admitted as expected: %v (last: %s)", ns, p.Name, err, last)
	}
	return got, created
}

func (w *world) waitPodGone(ctx context.Context, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := w.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func rewritten(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" }

func podSummary(p *corev1.Pod) string {
	var images []string
	for _, c := range p.Spec.Containers {
		images = append(images, c.Image)
	}
	return fmt.Sprintf("images=%v annotations=%v labels=%v pullSecrets=%v", images, p.Annotations, p.Labels, p.Spec.ImagePullSecrets)
}

// waitRunning waits until the kubelet runs the pod, and returns how long after created.
func (w *world) waitRunning(t *testing.T, ns, name string, created time.Time) time.Duration {
	t.Helper()
	if _, err := testnode.WaitPod(t.Context(), w.cs, ns, name, waitTimeout, testnode.PodRunning); err != nil {
		t.Fatalf("%v\nevents:\n%s", err, w.events(t, ns, name))
	}
	return time.Since(created)
}

// waitPullRefused waits until the kubelet gives up pulling the pod's image, and returns the
// pull errors it reported (the container's waiting message and the Failed events).
func (w *world) waitPullRefused(t *testing.T, ns, name string) string {
	t.Helper()
	got, err := testnode.WaitPod(t.Context(), w.cs, ns, name, waitTimeout, testnode.ContainerWaiting("ErrImagePull", "ImagePullBackOff"))
	if err != nil {
		t.Fatalf("%v\nevents:\n%s", err, w.events(t, ns, name))
	}
	return got.Status.ContainerStatuses[0].State.Waiting.Message + "\n" + w.events(t, ns, name, "Failed")
}

// OnFailure, on the node: the upstream refuses connections, the webhook (the chart's pods,
// called by the API server through their Service) routes the user's pod to the private
// registry, the secret-syncer writes the credential in the pod's namespace, and the kubelet
// pulls the image through that Secret: the pod runs. In a namespace the resource does not
// select, kuik leaves the same pod alone and the kubelet fails to pull it; pulling the private
// image there without kuik's Secret, the registry answers 401.
func TestOnFailurePodRunsFromThePrivateRegistryThroughTheInjectedSecret(t *testing.T) {
	w := env(t)
	w.kuikState(t)
	image := w.n.PushGuest(t, w.registry, "acme/onfailure:v1")
	baseline := w.n.PushGuest(t, w.registry, "acme/baseline:v1")
	private := w.registry.Host + "/acme/onfailure"
	upstream := w.down + "/acme/onfailure"
	if image != private+":v1" {
		t.Fatalf("pushed %s, want %s", image, private+":v1")
	}
	selected := w.namespace(t, map[string]string{"e2e": "onfailure"})
	outside := w.namespace(t, nil)
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "onfailure"},
		Spec: v1alpha1.ImageAlternativeSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e": "onfailure"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: private, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
		},
	}
	w.create(t, ia)
	secretName := "kuik-inject-imagealternative-onfailure"

	var withKuik, withoutKuik time.Duration
	t.Run("routed pod runs", func(t *testing.T) {
		pulls := w.registry.ManifestRequests()
		got, created := w.createPodUntil(t, selected, pod("app", upstream+":v1"), rewritten)
		if got.Spec.Containers[0].Image != image {
			t.Errorf("image %s, want %s", got.Spec.Containers[0].Image, image)
		}
		if diff := cmp.Diff([]corev1.LocalObjectReference{{Name: secretName}}, got.Spec.ImagePullSecrets); diff != "" {
			t.Errorf("imagePullSecrets (-want +got):\n%s", diff)
		}
		if r := got.Annotations[v1alpha1.AnnotationReason]; r != `{"app":"OnFailure"}` {
			t.Errorf("reason annotation %q", r)
		}
		withKuik = w.waitRunning(t, selected, "app", created)
		s, err := w.cs.CoreV1().Secrets(selected).Get(t.Context(), secretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the syncer's Secret: %v", err)
		}
		if s.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedBySecretSyncer {
			t.Errorf("secret %s labels %v", secretName, s.Labels)
		}
		if w.registry.ManifestRequests() == pulls {
			t.Error("the private registry served no manifest: the image did not come from it")
		}
		t.Logf("routed pod Running %.2fs after its creation (webhook probe + syncer Secret + pull through it)", withKuik.Seconds())
	})

	t.Run("without kuik the upstream pull fails", func(t *testing.T) {
		got, err := w.cs.CoreV1().Pods(outside).Create(t.Context(), pod("app", upstream+":v1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rewritten(got) || got.Spec.Containers[0].Image != upstream+":v1" {
			t.Fatalf("pod outside the selector was changed: %s", podSummary(got))
		}
		msg := w.waitPullRefused(t, outside, "app")
		if !strings.Contains(msg, "connection refused") {
			t.Errorf("the pull of the down upstream failed without \"connection refused\":\n%s", msg)
		}
		t.Logf("unrouted pod: %s", firstLine(msg))
	})

	t.Run("without kuik's Secret the private registry says 401", func(t *testing.T) {
		refused := w.registry.Unauthorized()
		if _, err := w.cs.CoreV1().Pods(outside).Create(t.Context(), pod("private", image), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		msg := w.waitPullRefused(t, outside, "private")
		if !strings.Contains(msg, "401 Unauthorized") && !strings.Contains(msg, "no basic auth credentials") {
			t.Errorf("the pull failed without the registry's 401:\n%s", msg)
		}
		if w.registry.Unauthorized() == refused {
			t.Error("the registry refused nothing: the pull failed before reaching it")
		}
		t.Logf("private image without kuik's Secret: %s", firstLine(msg))
	})

	t.Run("baseline: the private image with a pull Secret of the user's, no routing", func(t *testing.T) {
		_, err := w.cs.CoreV1().Secrets(outside).Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "own"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.registry.Host)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := pod("baseline", baseline)
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "own"}}
		created := time.Now()
		if _, err := w.cs.CoreV1().Pods(outside).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		withoutKuik = w.waitRunning(t, outside, "baseline", created)
		t.Logf("pod Running %.2fs after its creation without routing (same registry, its own Secret)", withoutKuik.Seconds())
	})
	t.Logf("pod-start latency: %.2fs routed by kuik past a down upstream, %.2fs straight to the registry", withKuik.Seconds(), withoutKuik.Seconds())
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
