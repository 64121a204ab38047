package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/internal/kuiknode"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	demoNamespace    = "demo"
	outsideNamespace = "demo-without-kuik"
	registryUser     = "demo"
	registryPassword = "kuik-demo-password"
	registrySecret   = "demo-registry"
)

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// serve runs in the node's namespaces: it installs kuik, plays the scenario, writes the
// kubeconfig and kubectl wrapper, says it is ready, and holds everything until ctx ends.
func serve(ctx context.Context, n *testnode.Node, dir string) error {
	t0 := time.Now()
	cs, err := kubernetes.NewForConfig(n.Config())
	if err != nil {
		return err
	}
	c, err := client.New(n.Config(), client.Options{Scheme: webhook.Scheme()})
	if err != nil {
		return err
	}
	images, err := listen(ctx, n, "", "")
	if err != nil {
		return err
	}
	private, err := listen(ctx, n, registryUser, registryPassword)
	if err != nil {
		return err
	}
	down, err := freeAddr()
	if err != nil {
		return err
	}
	if err := n.TrustPlainHTTP(down); err != nil {
		return err
	}

	step("building kuik's images for linux/%s and helm install charts/kuik with them (registry %s)", runtime.GOARCH, images)
	k, err := kuiknode.Install(ctx, n, kuiknode.Options{Registry: images, Keeper: true})
	if err != nil {
		return err
	}
	for _, tm := range k.Timings {
		fmt.Printf("    %-32s %6.2fs\n", tm.Name, tm.Since.Seconds())
	}
	for _, img := range k.Images {
		fmt.Println("    image", img)
	}
	holder, err := k.LeaseHolder(ctx, cs)
	if err != nil {
		return err
	}
	fmt.Printf("    %s: 2/2 Ready behind Service %s; %s: Ready, leader %s; %s: Ready\n", k.Webhook, k.WebhookService, k.Syncer, holder, k.Keeper)

	step("pushing demo/hello:v1 to the private registry %s (basic auth)", private)
	img, err := n.GuestImage("demo/hello:v1")
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(private+"/demo/hello:v1", name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword})); err != nil {
		return fmt.Errorf("pushing the demo image: %w", err)
	}
	if _, err := cs.CoreV1().Secrets(k.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: registrySecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{private: registryUser + ":" + registryPassword})},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}

	upstream := down + "/demo/hello"
	step("applying an ImageAlternative: %s is down (nothing listens), %s/demo/hello holds the same image", upstream, private)
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-hello"},
		Spec: v1alpha1.ImageAlternativeSpec{
			RewritePolicy:     v1alpha1.RewritePolicyOnFailure,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kuik-demo": "routed"}},
			Alternatives: []v1alpha1.Alternative{
				{Repository: upstream, Insecure: true},
				{Repository: private + "/demo/hello", Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: registrySecret}}},
			},
		},
	}
	if err := c.Create(ctx, ia); err != nil {
		return err
	}
	printYAML(map[string]any{"kind": "ImageAlternative", "metadata": map[string]any{"name": ia.Name}, "spec": ia.Spec})
	for ns, labels := range map[string]map[string]string{demoNamespace: {"kuik-demo": "routed"}, outsideNamespace: nil} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := testnode.WaitServiceAccount(ctx, cs, ns); err != nil {
			return err
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "hello", Image: upstream + ":v1", Command: []string{"/guest", "pause"}}},
		},
	}

	step("creating pod %s/hello with image %s:v1", demoNamespace, upstream)
	// The webhook learns of the new ImageAlternative from its informer a moment later: wait
	// with dry-run creates until it routes, then create the pod for real.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Labels[v1alpha1.LabelRewritten] == "true", nil
	}); err != nil {
		return fmt.Errorf("the webhook never rewrote the pod: %w", err)
	}
	created := time.Now()
	got, err := cs.CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	fmt.Println("    the API server admitted it as:")
	printYAML(map[string]any{
		"metadata": map[string]any{"annotations": got.Annotations, "labels": got.Labels},
		"spec":     map[string]any{"containers": []map[string]string{{"name": "hello", "image": got.Spec.Containers[0].Image}}, "imagePullSecrets": got.Spec.ImagePullSecrets},
	})
	running, err := testnode.WaitPod(ctx, cs, demoNamespace, "hello", 2*time.Minute, testnode.PodRunning)
	if err != nil {
		return err
	}
	secretName := got.Spec.ImagePullSecrets[0].Name
	if _, err := cs.CoreV1().Secrets(demoNamespace).Get(ctx, secretName, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("the syncer's Secret: %w", err)
	}
	fmt.Printf("    %s/hello is Running %.1fs after its creation: the kubelet pulled %s (%s) with Secret %s, written by the secret-syncer\n",
		demoNamespace, time.Since(created).Seconds(), running.Status.ContainerStatuses[0].Image, running.Status.ContainerStatuses[0].ImageID, secretName)

	step("creating the same pod in namespace %s, which the ImageAlternative does not select", outsideNamespace)
	if _, err := cs.CoreV1().Pods(outsideNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	stuck, err := testnode.WaitPod(ctx, cs, outsideNamespace, "hello", 2*time.Minute, testnode.ContainerWaiting("ImagePullBackOff"))
	if err != nil {
		return err
	}
	fmt.Printf("    %s/hello: %s — %s\n", outsideNamespace, stuck.Status.ContainerStatuses[0].State.Waiting.Reason, stuck.Status.ContainerStatuses[0].State.Waiting.Message)

	kept, err := keepStory(ctx, n, cs, c, k.Namespace, private)
	if err != nil {
		return err
	}

	kubectl, err := writeKubectl(dir, n.Kubeconfig)
	if err != nil {
		return err
	}
	fmt.Printf(`
kuik runs on a real node (kubelet, containerd): %.0fs from the node's start to here. Explore:

  %[2]s get pods -A -o wide
  %[2]s -n %[3]s get pod hello -o yaml           # kuik's annotations, image, imagePullSecrets
  %[2]s -n %[3]s get secret %[4]s -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d
  %[2]s -n %[5]s describe pod hello              # ImagePullBackOff: the upstream is down, no kuik here
  %[2]s get imagealternatives -o yaml
  %[2]s get imagemirror demo-keep -o yaml        # status.keep: what the keeper holds
  %[2]s -n %[10]s get pods -o wide               # hello-kept runs %[11]s
  %[2]s -n %[6]s logs deploy/%[7]s
  %[2]s -n %[6]s logs deploy/%[8]s
  %[2]s -n %[6]s logs deploy/%[12]s
  %[2]s get --raw /api/v1/namespaces/%[6]s/services/%[7]s-metrics:metrics/proxy/metrics | grep ^kuik_
  %[2]s get --raw /api/v1/namespaces/%[6]s/services/%[8]s-metrics:metrics/proxy/metrics | grep ^kuik_

(%[2]s runs kubectl in the node's network namespace.) The node's logs: %[9]s
Stop everything with: make demo-down
`, time.Since(t0).Seconds(), kubectl, demoNamespace, secretName, outsideNamespace, k.Namespace, k.Webhook, k.Syncer, filepath.Join(n.HostDir(), "logs"), keepNamespace, kept, k.Keeper)
	fmt.Println(readyLine)
	<-ctx.Done()
	fmt.Println("demo: stopping")
	return nil
}

// listen serves a registry on the node's address until ctx ends, and tells containerd to use
// plain HTTP with it. It returns host:port.
func listen(ctx context.Context, n *testnode.Node, user, pass string) (string, error) {
	l, err := net.Listen("tcp", testnode.NodeIP+":0")
	if err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	srv := &http.Server{Handler: registryHandler(user, pass), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	host := l.Addr().String()
	return host, n.TrustPlainHTTP(host)
}

// freeAddr is an address of the node where nothing listens.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", testnode.NodeIP+":0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// writeKubectl writes dir/kubeconfig and dir/kubectl, a kubectl that enters the node's network
// namespace (the API server listens there only).
func writeKubectl(dir, kubeconfig string) (string, error) {
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), b, 0o600); err != nil {
		return "", fmt.Errorf("writing the kubeconfig: %w", err)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubectl")
	script := fmt.Sprintf("#!/bin/sh\n# kubectl for the kuik demo's cluster, whose API server is in the node's network namespace.\nexec nsenter --net=/proc/\"$(cat %q)\"/ns/net -- %q --kubeconfig=%q \"$@\"\n",
		filepath.Join(dir, "netns.pid"), filepath.Join(assets, "kubectl"), filepath.Join(dir, "kubeconfig"))
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		return "", fmt.Errorf("writing the kubectl wrapper: %w", err)
	}
	return path, nil
}

func printYAML(v any) {
	b, err := yaml.Marshal(v)
	if err != nil {
		fmt.Println("   ", err)
		return
	}
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Println("    " + l)
	}
}
