package testnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Clientset is an admin client of the node's API server.
func (n *Node) Clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(n.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a namespace for the test, waits for its default ServiceAccount (pods are
// refused before it exists), and deletes it when the test ends.
func (n *Node) Namespace(t testing.TB) string {
	t.Helper()
	cs := n.Clientset(t)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if err := WaitServiceAccount(context.Background(), cs, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// PodCondition says whether a pod is where a test waits for it; an error stops the wait.
type PodCondition func(*corev1.Pod) (bool, error)

// ErrPodFinished is returned when a pod ended while a test waited for something else.
var ErrPodFinished = errors.New("pod finished")

// PodRunning holds once the pod's phase is Running and every container is ready.
func PodRunning(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false, fmt.Errorf("%w: phase %s", ErrPodFinished, p.Status.Phase)
	case corev1.PodRunning:
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready {
				return false, nil
			}
		}
		return true, nil
	}
	return false, nil
}

// PodSucceeded holds once the pod's phase is Succeeded, and fails the wait if it is Failed.
func PodSucceeded(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return true, nil
	case corev1.PodFailed:
		return false, fmt.Errorf("%w: phase Failed", ErrPodFinished)
	}
	return false, nil
}

// ContainerWaiting holds once a container of the pod waits for one of these reasons
// (ErrImagePull, ImagePullBackOff...), and fails the wait if the container runs instead.
func ContainerWaiting(reasons ...string) PodCondition {
	return func(p *corev1.Pod) (bool, error) {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				return false, fmt.Errorf("container %s is running, want waiting on %v", c.Name, reasons)
			}
			if c.State.Waiting != nil && slices.Contains(reasons, c.State.Waiting.Reason) {
				return true, nil
			}
		}
		return false, nil
	}
}

// WaitPod polls the pod until cond holds, cond fails, or timeout passes; it returns the last
// state seen, and on timeout an error that carries it.
func WaitPod(ctx context.Context, cs kubernetes.Interface, namespace, name string, timeout time.Duration, cond PodCondition) (*corev1.Pod, error) {
	var last *corev1.Pod
	var condErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not created yet or a transient error: poll again
		}
		last = p
		ok, err := cond(p)
		condErr = err
		return ok, err
	})
	if condErr != nil {
		return last, fmt.Errorf("pod %s/%s: %w", namespace, name, condErr)
	}
	if err != nil {
		return last, fmt.Errorf("pod %s/%s: %w; last status: %s", namespace, name, err, describeStatus(last))
	}
	return last, nil
}

// PodEvents lists the events about a pod, oldest first.
func PodEvents(ctx context.Context, cs kubernetes.Interface, namespace, name string) ([]corev1.Event, error) {
	list, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing events of %s/%s: %w", namespace, name, err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	return list.Items, nil
}

func describeStatus(p *corev1.Pod) string {
	if p == nil {
		return "never seen"
	}
	s := string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %s (exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		case c.State.Running != nil:
			s += fmt.Sprintf("; %s running", c.Name)
		}
	}
	return s
}
