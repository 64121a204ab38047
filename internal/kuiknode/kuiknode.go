// Package kuiknode installs kuik on a testnode the way a user installs it: kuik's images built
// from source for the node's platform (internal/images) and pushed to a registry the node's
// containerd pulls from, then `helm install` of charts/kuik (its CRDs, ServiceAccounts, RBAC,
// webhook configurations with the chart-generated TLS, admission policy) with those images, in a
// release namespace enforcing the restricted Pod Security Standard. It waits until the
// Deployments are Available: the webhook's replicas Ready through their probes and behind its
// Service (which the API server calls), the syncer Ready and holding its leader election Lease,
// and with Options.Keeper the keeper Ready. The e2e tests and the demo share it.
package kuiknode

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/images"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
)

// Options of Install.
type Options struct {
	// Registry is host:port[/path] where the images are pushed and pulled from, over plain
	// HTTP (the node's containerd must have been told so: testnode's Registry or
	// TrustPlainHTTP).
	Registry string
	// Namespace is the release namespace (created, restricted Pod Security), kuik-system when
	// empty; Release the release name, kuik when empty.
	Namespace, Release string
	// Values are extra chart values, merged over the image values.
	Values map[string]any
	// Keeper turns the keeper on (keeper.enabled) and waits for its Deployment too.
	Keeper bool
	// Timeout bounds the wait for both Deployments; 3 minutes when zero.
	Timeout time.Duration
}

// Kuik is a release of the chart running on the node.
type Kuik struct {
	Namespace, Release string
	// Webhook and Syncer are the Deployments' names, Keeper too when it is on (else empty);
	// WebhookService the Service the API server calls.
	Webhook, Syncer, Keeper, WebhookService string
	// Images are the pushed images, by digest.
	Images []string
	// Timings are the install's milestones, from the start of Install.
	Timings []testnode.Timing
}

// Install builds and pushes the images, installs the chart with them and waits until kuik is
// Available.
func Install(ctx context.Context, n *testnode.Node, o Options) (*Kuik, error) {
	t0 := time.Now()
	k := &Kuik{Namespace: o.Namespace, Release: o.Release}
	if k.Namespace == "" {
		k.Namespace = "kuik-system"
	}
	if k.Release == "" {
		k.Release = "kuik"
	}
	mark := func(name string) { k.Timings = append(k.Timings, testnode.Timing{Name: name, Since: time.Since(t0)}) }

	src, err := images.GitSource(ctx, testenv.RepoRoot())
	if err != nil {
		src = images.Source{Created: time.Unix(0, 0)}
	}
	built, err := images.Build(ctx, images.Options{
		Platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		Dir:       testenv.RepoRoot(),
		Source:    src,
	})
	if err != nil {
		return nil, fmt.Errorf("building kuik's images: %w", err)
	}
	mark("images built")
	// The tag names the content, so that a second install of other code is pulled anew.
	d, err := built[0].Index.Digest()
	if err != nil {
		return nil, fmt.Errorf("digest of the webhook image: %w", err)
	}
	tag := "node-" + d.Hex[:12]
	prefix := strings.TrimSuffix(o.Registry, "/") + "/kuik"
	pushed, err := images.Push(ctx, built, images.PushOptions{Prefix: prefix, Tag: tag, Insecure: true})
	if err != nil {
		return nil, fmt.Errorf("pushing kuik's images: %w", err)
	}
	for _, p := range pushed {
		k.Images = append(k.Images, p.String())
	}
	mark("images pushed")

	cs, err := kubernetes.NewForConfig(n.Config())
	if err != nil {
		return nil, fmt.Errorf("building admin client: %w", err)
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating the release namespace: %w", err)
	}
	if err := testnode.WaitServiceAccount(ctx, cs, k.Namespace); err != nil {
		return nil, err
	}

	image := func(name string) map[string]any {
		return map[string]any{"image": map[string]any{"repository": prefix + "/" + name, "tag": tag}}
	}
	values := map[string]any{"webhook": image("kuik-webhook"), "syncer": image("kuik-secret-syncer"), "keeper": image("kuik-keeper")}
	if o.Keeper {
		values["keeper"].(map[string]any)["enabled"] = true
	}
	mergeValues(values, o.Values)
	rel, err := helmInstall(ctx, n.Kubeconfig, k.Namespace, k.Release, values)
	if err != nil {
		return nil, err
	}
	objs, err := charts.Decode([]byte(rel))
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		component := obj.GetLabels()["app.kubernetes.io/component"]
		switch {
		case obj.GetKind() == "Deployment" && component == "webhook":
			k.Webhook = obj.GetName()
		case obj.GetKind() == "Deployment" && component == "secret-syncer":
			k.Syncer = obj.GetName()
		case obj.GetKind() == "Deployment" && component == "keeper":
			k.Keeper = obj.GetName()
		case obj.GetKind() == "Service" && component == "webhook" && !strings.HasSuffix(obj.GetName(), "-metrics"):
			k.WebhookService = obj.GetName()
		}
	}
	if k.Webhook == "" || k.Syncer == "" || k.WebhookService == "" {
		return nil, fmt.Errorf("the release has no webhook Deployment, syncer Deployment or webhook Service (%q, %q, %q)", k.Webhook, k.Syncer, k.WebhookService)
	}
	if o.Keeper && k.Keeper == "" {
		return nil, fmt.Errorf("the release has no keeper Deployment")
	}
	mark("helm install")

	timeout := o.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if err := k.WaitAvailable(ctx, cs, timeout); err != nil {
		return nil, err
	}
	mark("kuik Available")
	return k, nil
}

// helmInstall installs charts/kuik with values and returns the release's manifest.
func helmInstall(ctx context.Context, kubeconfig, namespace, release string, values map[string]any) (string, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		return "", fmt.Errorf("helm: %w", err)
	}
	chart, err := charts.Load()
	if err != nil {
		return "", err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Timeout = release, namespace, 2*time.Minute
	rel, err := install.RunWithContext(ctx, chart, values)
	if err != nil {
		return "", fmt.Errorf("helm install: %w", err)
	}
	return rel.Manifest, nil
}

func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// WaitAvailable waits until the Deployments (the keeper's too, when on) are Available with
// every replica Ready and updated, the webhook Service has an endpoint per webhook replica, ready, and accepts
// connections at its ClusterIP (the caller must be on the node's network, as the API server
// is), and the syncer's Lease has a holder that is one of its pods.
func (k *Kuik) WaitAvailable(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = k.available(ctx, cs)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kuik not available: %w (last: %w)\n%s", err, last, k.Describe(context.Background(), cs))
	}
	return nil
}

func (k *Kuik) available(ctx context.Context, cs kubernetes.Interface) error {
	webhookReplicas := int32(0)
	names := []string{k.Webhook, k.Syncer}
	if k.Keeper != "" {
		names = append(names, k.Keeper)
	}
	for _, name := range names {
		d, err := cs.AppsV1().Deployments(k.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if name == k.Webhook {
			webhookReplicas = want
		}
		if !deploymentAvailable(d) || d.Status.ReadyReplicas != want || d.Status.UpdatedReplicas != want || d.Status.ObservedGeneration < d.Generation {
			return fmt.Errorf("deployment %s: %d/%d ready, %d updated", name, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas)
		}
	}
	slices, err := cs.DiscoveryV1().EndpointSlices(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + k.WebhookService})
	if err != nil {
		return err
	}
	ready := int32(0)
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready++
			}
		}
	}
	if ready != webhookReplicas {
		return fmt.Errorf("service %s: %d ready endpoints, want %d", k.WebhookService, ready, webhookReplicas)
	}
	// What the API server does: connect to the Service's ClusterIP, which works once
	// kube-proxy has programmed its endpoints (until then nftables rejects the connection).
	svc, err := cs.CoreV1().Services(k.Namespace).Get(ctx, k.WebhookService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort(svc.Spec.ClusterIP, "443"))
	cancel()
	if err != nil {
		return fmt.Errorf("service %s through kube-proxy: %w", k.WebhookService, err)
	}
	_ = conn.Close()
	holder, err := k.LeaseHolder(ctx, cs)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(holder, k.Syncer+"-") {
		return fmt.Errorf("lease %s held by %q, not a pod of %s", syncer.DefaultLeaderElectionID, holder, k.Syncer)
	}
	return nil
}

// LeaseHolder is the holder of the syncer's leader election Lease.
func (k *Kuik) LeaseHolder(ctx context.Context, cs kubernetes.Interface) (string, error) {
	l, err := cs.CoordinationV1().Leases(k.Namespace).Get(ctx, syncer.DefaultLeaderElectionID, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("leader election lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Describe says where kuik's pods are: phase, container states, and the release namespace's
// warning events.
func (k *Kuik) Describe(ctx context.Context, cs kubernetes.Interface) string {
	var b strings.Builder
	pods, err := cs.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "listing pods: " + err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				fmt.Fprintf(&b, "; %s terminated: %s exit %d", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
			default:
				fmt.Fprintf(&b, "; %s running, ready=%t, restarts=%d", c.Name, c.Ready, c.RestartCount)
			}
		}
		b.WriteString("\n")
	}
	events, err := cs.CoreV1().Events(k.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "event %s/%s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	return b.String()
}
