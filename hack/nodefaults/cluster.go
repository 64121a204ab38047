package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// scenario is one row's namespace, OnFailure ImageAlternative (upstream first, the mirror
// second) and Deployment.
type scenario struct {
	name, ns         string
	upstream, mirror string // repositories
	tag              string
}

// setup creates the scenario's namespace and ImageAlternative, and waits until the webhook
// routes a dry-run pod of the upstream image to want ("" for any routing, the mirror image for
// a down upstream).
func (e *env) setup(ctx context.Context, s *scenario, want string) error {
	if err := e.create(ctx, s); err != nil {
		return err
	}
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: podSpec(s.upstream+":"+s.tag, corev1.PullIfNotPresent)}
	// Each replica learns of the resource from its informer: a dry run goes to either, so a
	// few in a row must route.
	inARow := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.cs.CoreV1().Pods(s.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && routed(got) && (want == "" || got.Spec.Containers[0].Image == want) {
			inARow++
		} else {
			inARow = 0
		}
		return inARow >= 6, nil
	})
	if err != nil {
		return fmt.Errorf("the webhook never routed a pod of %s: %w", s.ns, err)
	}
	return nil
}

// create creates the namespace and the ImageAlternative selecting it.
func (e *env) create(ctx context.Context, s *scenario) error {
	labels := map[string]string{"nodefaults": s.name}
	ns, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", s.name, err)
	}
	s.ns = ns.Name
	if err := testnode.WaitServiceAccount(ctx, e.cs, s.ns); err != nil {
		return err
	}
	ia := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec: v1alpha1.ImageAlternativeSpec{
			RewritePolicy:     v1alpha1.RewritePolicyOnFailure,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: labels},
			Alternatives: []v1alpha1.Alternative{
				{Repository: s.upstream, Insecure: true},
				{Repository: s.mirror, Insecure: true, Auth: &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: mirrorSecret}}},
			},
		},
	}
	if err := e.c.Create(ctx, ia); err != nil {
		return fmt.Errorf("creating ImageAlternative %s: %w", s.name, err)
	}
	return nil
}

func podSpec(image string, pull corev1.PullPolicy) corev1.PodSpec {
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers:                    []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: pull, Command: []string{"/guest", "pause"}}},
	}
}

func (s *scenario) deployment(replicas int, pull corev1.PullPolicy) *appsv1.Deployment {
	labels := map[string]string{"app": s.name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(s.upstream+":"+s.tag, pull),
			},
		},
	}
}

// routed says whether the webhook rewrote the pod.
func routed(p *corev1.Pod) bool { return p.Labels[v1alpha1.LabelRewritten] == "true" }

// running says whether the pod runs with every container ready.
func running(p *corev1.Pod) bool {
	ok, _ := testnode.PodRunning(p)
	return ok
}

// waiting is the reason the pod's container waits for, or "".
func waiting(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			return c.State.Waiting.Reason
		}
	}
	return ""
}

// pods lists the scenario's live pods (not being deleted).
func (e *env) pods(ctx context.Context, s *scenario) ([]corev1.Pod, error) {
	list, err := e.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + s.name})
	if err != nil {
		return nil, fmt.Errorf("listing pods of %s: %w", s.ns, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// counts are a rollout's pods by fate.
type counts struct {
	pods, routed, unrouted, running, backoff, errPull, other int
}

func count(pods []corev1.Pod) counts {
	var c counts
	c.pods = len(pods)
	for i := range pods {
		p := &pods[i]
		if routed(p) {
			c.routed++
		} else {
			c.unrouted++
		}
		switch w := waiting(p); {
		case running(p):
			c.running++
		case w == "ImagePullBackOff":
			c.backoff++
		case w == "ErrImagePull":
			c.errPull++
		default:
			c.other++
		}
	}
	return c
}

func (c counts) String() string {
	return fmt.Sprintf("%d pods: %d routed, %d unrouted; %d Running, %d ImagePullBackOff, %d ErrImagePull, %d other",
		c.pods, c.routed, c.unrouted, c.running, c.backoff, c.errPull, c.other)
}

// waitPods polls the scenario's pods until done says so, or the timeout; it returns the last
// list.
func (e *env) waitPods(ctx context.Context, s *scenario, timeout time.Duration, done func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	var last []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := e.pods(ctx, s)
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll again
		}
		last = pods
		return done(pods), nil
	})
	return last, err
}

// webhookPods are the webhook Deployment's live pods, by name.
func (e *env) webhookPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := e.cs.CoreV1().Pods(e.kuik.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		return nil, fmt.Errorf("listing webhook pods: %w", err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sigkill kills the pod's container process with SIGKILL through containerd, as the kernel's
// OOM killer or a crash would end it: the pod object stays, the kubelet restarts the container.
func (e *env) sigkill(ctx context.Context, p *corev1.Pod) error {
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return fmt.Errorf("pod %s has no container ID", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	bin, err := testnode.NodeAssetsDir()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ctr"), "--address", filepath.Join(e.n.Dir, "containerd", "containerd.sock"),
		"--namespace", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr tasks kill %s: %w: %s", id, err, out)
	}
	return nil
}

// scrape reads the metrics of a webhook pod's metrics endpoint (the chart's metrics port).
func scrape(ctx context.Context, podIP string) (benchutil.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := benchutil.Scrape(ctx, "http://"+net.JoinHostPort(podIP, "8080")+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", podIP, err)
	}
	return m, nil
}
