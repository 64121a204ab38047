package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	keepNamespace = "demo-keep"
	// keepPushSecret is the keeper's write credential for the mirror: pods never get it.
	keepPushSecret = "demo-mirror-push"
)

// keepStory plays issue 21's story: a Deployment runs an image from an upstream registry, the
// keeper copies it into the mirror (same digest), the upstream stops, and the Deployment's next
// pod runs from the kept copy. It returns the mirror's reference of the kept image.
func keepStory(ctx context.Context, n *testnode.Node, cs kubernetes.Interface, c client.Client, releaseNamespace, mirror string) (string, error) {
	// Port 80: the upstream's images are named without a port, which a mirror can name.
	l, err := net.Listen("tcp", testnode.NodeIP+":80")
	if err != nil {
		return "", fmt.Errorf("upstream registry: %w", err)
	}
	srv := &http.Server{Handler: registryHandler("", ""), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()
	if err := n.TrustPlainHTTP(testnode.NodeIP); err != nil {
		return "", err
	}
	origin := testnode.NodeIP + "/demo/kept:v1"
	step("keeping images: pushing %s to an upstream registry (anonymous)", origin)
	img, err := n.GuestImage(origin)
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(origin, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("pushing the upstream image: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: keepPushSecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{mirror: registryUser + ":" + registryPassword})},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}

	im := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-keep"},
		Spec: v1alpha1.ImageMirrorSpec{
			RewritePolicy:     v1alpha1.RewritePolicyOnFailure,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kuik-demo": "kept"}},
			Destination: v1alpha1.MirrorDestination{
				Path:     mirror + "/kept/",
				Insecure: true,
				Pull:     &v1alpha1.MirrorPull{Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
			Keep: &v1alpha1.MirrorKeep{Push: &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: keepPushSecret}}}},
		},
	}
	step("applying an ImageMirror with spec.keep: the keeper copies what its pods run into %s/kept/", mirror)
	if err := c.Create(ctx, im); err != nil {
		return "", err
	}
	printYAML(map[string]any{"kind": "ImageMirror", "metadata": map[string]any{"name": im.Name}, "spec": im.Spec})
	kept, err := routing.MirrorReference(im.Spec.Destination.Path, origin)
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: keepNamespace, Labels: map[string]string{"kuik-demo": "kept"}}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if err := testnode.WaitServiceAccount(ctx, cs, keepNamespace); err != nil {
		return "", err
	}

	step("creating Deployment %s/hello-kept with image %s (the upstream is up)", keepNamespace, origin)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-kept"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hello-kept"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "hello-kept"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "hello", Image: origin, Command: []string{"/guest", "pause"}}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(keepNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	first, err := runningPod(ctx, cs, "", "")
	if err != nil {
		return "", err
	}
	fmt.Printf("    %s/%s is Running the original %s\n", keepNamespace, first.Name, first.Spec.Containers[0].Image)

	t0 := time.Now()
	keptRef, err := name.ParseReference(kept, name.Insecure)
	if err != nil {
		return "", err
	}
	auth := &authn.Basic{Username: registryUser, Password: registryPassword}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		desc, err := remote.Head(keptRef, remote.WithContext(ctx), remote.WithAuth(auth))
		return err == nil && desc.Digest == digest, nil
	}); err != nil {
		return "", fmt.Errorf("the keeper never copied %s to %s: %w", origin, kept, err)
	}
	fmt.Printf("    the keeper copied it in %.1fs: %s has %s, the upstream's digest\n", time.Since(t0).Seconds(), kept, digest)

	step("stopping the upstream registry, then deleting the pod: its Deployment recreates it")
	if err := srv.Close(); err != nil {
		return "", err
	}
	// The webhook's probe cache still says "up" for a few seconds: wait until it routes.
	probe := d.Spec.Template.DeepCopy()
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(keepNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: probe.Spec}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Spec.Containers[0].Image == kept, nil
	}); err != nil {
		return "", fmt.Errorf("the webhook never routed %s to %s: %w", origin, kept, err)
	}
	if err := cs.CoreV1().Pods(keepNamespace).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return "", err
	}
	second, err := runningPod(ctx, cs, first.Name, kept)
	if err != nil {
		return "", err
	}
	st := second.Status.ContainerStatuses[0]
	fmt.Printf("    upstream gone: %s/%s is Running %s (%s), routed to the kept copy\n", keepNamespace, second.Name, st.Image, st.ImageID)
	return kept, nil
}

// runningPod waits for a Running pod of hello-kept, other than previous, whose image is want
// (any when empty).
func runningPod(ctx context.Context, cs kubernetes.Interface, previous, want string) (*corev1.Pod, error) {
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(keepNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=hello-kept"})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == previous || p.DeletionTimestamp != nil || (want != "" && p.Spec.Containers[0].Image != want) {
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
		return nil, errors.Join(fmt.Errorf("no Running pod of %s/hello-kept with image %q", keepNamespace, want), err)
	}
	return got, nil
}
