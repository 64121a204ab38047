package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// upstreamPort is where the keep story's upstream listens: port 80, so that its images are
// named without a port (a mirror cannot name a host with a port: routing.ErrHostNotPathComponent).
const upstreamPort = "80"

// The story on the real node. A Deployment runs an image from an upstream registry; the
// keeper (the chart's pod) copies it into the mirror, same digest; the upstream then stops; the
// Deployment's next pod is routed to the kept copy by the webhook and the kubelet runs it,
// pulling the bytes the keeper wrote through the mirror's pull Secret.
func TestKeptImageRunsAfterItsUpstreamIsGone(t *testing.T) {
	w := env(t)
	ctx := t.Context()

	upstream := testutil.NewRegistryAt(t, testnode.NodeIP+":"+upstreamPort, "", "")
	host, _ := strings.CutSuffix(upstream.Host, ":"+upstreamPort)
	if err := w.n.TrustPlainHTTP(host); err != nil {
		t.Fatal(err)
	}
	img, err := w.n.GuestImage(host + "/e2e/kept:v1")
	if err != nil {
		t.Fatal(err)
	}
	pushed := upstream.PushImage(t, "e2e/kept:v1", img)
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	origin := host + "/e2e/kept:v1"
	t.Logf("upstream image %s (%s), pushed as %s", origin, digest, pushed)

	label := map[string]string{"kuik-e2e-keep": "true"}
	im := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-keep-"},
		Spec: v1alpha1.ImageMirrorSpec{
			RewritePolicy:     v1alpha1.RewritePolicyOnFailure,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: label},
			Destination: v1alpha1.MirrorDestination{
				Path:     w.registry.Host + "/kept/",
				Insecure: true,
				Pull:     &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
			Keep: &v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: registrySecret}}}},
		},
	}
	if err := w.c.Create(ctx, im); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), im) })
	kept, err := routing.MirrorReference(im.Spec.Destination.Path, origin)
	if err != nil {
		t.Fatal(err)
	}

	ns := w.namespace(t, label)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kept"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "kept"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "app", Image: origin, Command: []string{"/guest", "pause"}}},
				},
			},
		},
	}
	if _, err := w.cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := w.deploymentPodRunning(t, ns, "", "")
	if got := first.Spec.Containers[0].Image; got != origin {
		t.Fatalf("with the upstream up, the pod runs %s, want the original %s", got, origin)
	}

	// The keeper copies the image the node runs, verbatim: the mirror's tag has its digest.
	auth := &authn.Basic{Username: registryUser, Password: registryPassword}
	keptRef, err := name.ParseReference(kept, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, "the keeper copies "+origin+" to "+kept, func(ctx context.Context) error {
		desc, err := remote.Head(keptRef, remote.WithContext(ctx), remote.WithAuth(auth))
		if err != nil {
			return err
		}
		if desc.Digest != digest {
			return fmt.Errorf("%s has %s, the upstream %s", kept, desc.Digest, digest)
		}
		return nil
	})
	var status string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var got v1alpha1.ImageMirror
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(im), &got); err != nil {
			return false, nil
		}
		b, _ := json.Marshal(got.Status)
		status = string(b)
		return got.Status.Keep != nil && got.Status.Keep.Present >= 1 && got.Status.Keep.Failed == 0, nil
	}); err != nil {
		t.Fatalf("status.keep never counted the kept image: %v; status %s\nkeeper log:\n%s", err, status, w.keeperLog(t))
	}

	// The upstream goes away. Once the webhook's probe cache has seen it (dry-run pods), the
	// Deployment's next pod is routed to the kept copy and runs.
	upstream.Close()
	probe := pod("probe", origin)
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := w.cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Spec.Containers[0].Image == kept, nil
	}); err != nil {
		t.Fatalf("the webhook never routed %s to %s once the upstream stopped: %v", origin, kept, err)
	}
	if err := w.cs.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	second := w.deploymentPodRunning(t, ns, first.Name, kept)
	st := second.Status.ContainerStatuses[0]
	if !strings.HasSuffix(st.ImageID, "@"+digest.String()) {
		t.Fatalf("the kubelet ran %s (%s), want the kept digest %s", st.Image, st.ImageID, digest)
	}
	t.Logf("upstream gone: %s/%s runs %s (%s)", ns, second.Name, st.Image, st.ImageID)
}

// keeperLog is the end of the keeper pod's log.
func (w *world) keeperLog(t *testing.T) string {
	t.Helper()
	pods, err := w.cs.CoreV1().Pods(w.kuik.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=keeper"})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("(no keeper pod: %v)", err)
	}
	b, err := w.cs.CoreV1().Pods(w.kuik.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](60)}).DoRaw(context.Background())
	if err != nil {
		return fmt.Sprintf("(reading the keeper's log: %v)", err)
	}
	return string(b)
}

// deploymentPodRunning waits for a Running pod of the app=kept Deployment in ns other than
// previous whose first container's image is want (any image when empty).
func (w *world) deploymentPodRunning(t *testing.T, ns, previous, want string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := w.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kept"})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == previous || p.DeletionTimestamp != nil {
				continue
			}
			last = p.Name + ": " + podSummary(p) + " phase " + string(p.Status.Phase)
			if want != "" && p.Spec.Containers[0].Image != want {
				continue
			}
			if ok, _ := testnode.PodRunning(p); ok {
				got = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Running pod of the Deployment in %s with image %q: %v (last: %s)", ns, want, err, last)
	}
	return got
}
