package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Missed pulls: a pod admitted without the webhook (it was down: failurePolicy Ignore) fails to
// pull its original image from a dead registry while a routing resource has an available
// candidate. There is no kubelet here: the test writes the pod's status through the status
// subresource and the kubelet's event, as the kubelet would; the candidate is probed in a real
// registry; every request of the syncer goes through the API server as its ServiceAccount under
// the chart's RBAC, its deletes through the chart's kuik-pod-deletes admission policy.

// deadRegistry is host:port where nothing listens.
func deadRegistry(t *testing.T) string { return testutil.DeadAddr(t) }

var recreateRBACOnce sync.Once

// grantRecreate applies what the chart adds with syncer.recreateStuckPods.enabled (and jobs):
// the ClusterRole and binding granting create on pods/eviction and get on jobs, and the
// kuik-pod-deletes policies, then waits until each refuses the syncer what it must refuse.
func grantRecreate(t *testing.T, e env) {
	t.Helper()
	var err error
	recreateRBACOnce.Do(func() {
		var chart *kuikenv.Chart
		chart, err = kuikenv.RenderValues(crns, map[string]any{"syncer": map[string]any{"missedPulls": map[string]any{"enabled": true}, "recreateStuckPods": map[string]any{"enabled": true, "jobs": true}}})
		if err != nil {
			return
		}
		var objs []*unstructured.Unstructured
		for _, o := range chart.Rendered.Objects {
			if strings.HasSuffix(o.GetName(), "-recreate-stuck-pods") || strings.Contains(o.GetName(), "-pod-deletes") {
				objs = append(objs, o)
			}
		}
		if len(objs) != 8 {
			err = fmt.Errorf("the chart renders %d objects for recreateStuckPods, want a ClusterRole, its binding, three policies and their bindings", len(objs))
			return
		}
		if err = testenv.Apply(context.Background(), cp.Config(), objs); err != nil {
			return
		}
		err = grantTestDeletes(context.Background(), e)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Policies bind asynchronously: a dry-run delete, an unlabelled eviction and a labelled one
	// of a running pod by the syncer are refused once each is bound.
	ns := createNamespace(t, e, nil)
	owner := replicaSet(t, e, ns, "bind-probe")
	pod := stuckPod(t, e, ns, "bind-probe", "registry.invalid/x:1", owner, false)
	syncerCS := syncerClient(t)
	for what, try := range map[string]func(context.Context) error{
		"a delete": func(ctx context.Context) error {
			return syncerDeleter(t).CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"an unlabelled eviction": func(ctx context.Context) error {
			ev := eviction(pod, true)
			ev.Labels = nil
			return syncerCS.CoreV1().Pods(ns).EvictV1(ctx, ev)
		},
		"an eviction": func(ctx context.Context) error { return syncerCS.CoreV1().Pods(ns).EvictV1(ctx, eviction(pod, true)) },
	} {
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last = try(ctx)
			return last != nil && strings.Contains(last.Error(), "pod-deletes"), nil
		}); err != nil {
			t.Fatalf("the pod-deletes policies never refused the syncer %s (last: %v): %v", what, last, err)
		}
	}
}

// eviction is the syncer's Eviction of pod: labelled as its own, with uid and resourceVersion
// preconditions, dry-run when dryRun.
func eviction(pod *corev1.Pod, dryRun bool) *policyv1.Eviction {
	uid, rv := pod.UID, pod.ResourceVersion
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}},
	}
	if dryRun {
		ev.DeleteOptions.DryRun = []string{metav1.DryRunAll}
	}
	return ev
}

// testDeleters is a group granted delete on pods by the tests only: the chart grants the syncer
// evictions, never deletes, so its ServiceAccount's deletes reach the pod-deletes policy (which
// bounds them whatever RBAC grants) only as a member of it (syncerDeleter).
const testDeleters = "kuik-test:pod-deleters"

func grantTestDeletes(ctx context.Context, e env) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "kuik-test-pod-deleters"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}}},
	}
	if _, err := e.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kuik-test-pod-deleters"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: testDeleters}},
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// syncerDeleter is the syncer's ServiceAccount, also in testDeleters: allowed to delete pods by
// RBAC, so that the pod-deletes policy decides.
func syncerDeleter(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.ConfigAs("system:serviceaccount:"+crns+":"+serviceAccount,
		"system:serviceaccounts", "system:serviceaccounts:"+crns, testDeleters))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func syncerClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(crns, serviceAccount))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// replicaSet creates a ReplicaSet of no replica (no controller runs here): a real owner, so
// the garbage collector leaves its pods alone.
func replicaSet(t *testing.T, e env, ns, name string) *metav1.OwnerReference {
	t.Helper()
	labels := map[string]string{"app": name}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}}},
			},
		},
	}
	got, err := e.cs.AppsV1().ReplicaSets(ns).Create(t.Context(), rs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: got.Name, UID: got.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// stuckPod creates a pod running image (owned by owner when not nil) and writes its status as
// the kubelet does: waiting in ErrImagePull when failing, running otherwise.
func stuckPod(t *testing.T, e env, ns, name, image string, owner *metav1.OwnerReference, failing bool) *corev1.Pod {
	t.Helper()
	return createWithStatus(t, e, podOf(ns, name, image, owner), failing)
}

// podOf is the pod of stuckPod, not created yet.
func podOf(ns, name, image string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// createWithStatus creates p, whose one container is app, and writes its status as the kubelet
// does: waiting in ErrImagePull when failing, running otherwise.
func createWithStatus(t *testing.T, e env, p *corev1.Pod, failing bool) *corev1.Pod {
	t.Helper()
	created, err := e.cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := p.Spec.Containers[0].Image
	st := corev1.ContainerStatus{Name: "app", Image: image}
	if failing {
		created.Status.Phase = corev1.PodPending
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingErrImagePull, Message: "connection refused"}
	} else {
		created.Status.Phase = corev1.PodRunning
		st.Ready, st.Started = true, ptr.To(true)
		st.ImageID = image + "@sha256:0000000000000000000000000000000000000000000000000000000000000000"
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	}
	created.Status.ContainerStatuses = []corev1.ContainerStatus{st}
	updated, err := e.cs.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// pullFailed creates the kubelet's event for a failed pull of image by the pod.
func pullFailed(t *testing.T, e env, pod *corev1.Pod, image string) {
	t.Helper()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			FieldPath: "spec.containers{app}",
		},
		Reason:         missedpulls.ReasonFailed,
		Message:        fmt.Sprintf("Failed to pull image %q: failed to resolve reference: connection refused", image),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}
	if _, err := e.cs.CoreV1().Events(pod.Namespace).Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventsOn lists the events of reason on the object (kind, namespace, name).
func eventsOn(ctx context.Context, e env, kind, ns, name, reason string) ([]corev1.Event, error) {
	list, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func waitEvent(t *testing.T, e env, kind, ns, name, reason string, contains ...string) corev1.Event {
	t.Helper()
	var got corev1.Event
	eventually(t, fmt.Sprintf("a %s event on %s %s/%s", reason, kind, ns, name), func(ctx context.Context) error {
		evs, err := eventsOn(ctx, e, kind, ns, name, reason)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			ok := true
			for _, c := range contains {
				ok = ok && strings.Contains(ev.Message, c)
			}
			if ok {
				got = ev
				return nil
			}
		}
		return fmt.Errorf("%d events, none naming %q", len(evs), contains)
	})
	return got
}

func noEvent(t *testing.T, e env, kind, ns, name, reason string) {
	t.Helper()
	evs, err := eventsOn(t.Context(), e, kind, ns, name, reason)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) > 0 {
		t.Errorf("%s %s/%s has %d %s events, want none: %q", kind, ns, name, len(evs), reason, evs[0].Message)
	}
}

// routedApp is an OnFailure ImageAlternative n whose first entry is a dead registry and second a
// live one holding acme/app:v1; it returns the image of the dead registry and the candidate.
func routedApp(t *testing.T, e env, n string, live *testutil.Registry, build func(*testutil.ImageAlternativeBuilder)) (image, candidate string) {
	t.Helper()
	dead := deadRegistry(t)
	candidate = live.Push(t, "acme/app:v1")
	b := testutil.NewImageAlternative(n).Repository(dead + "/acme/app").Repository(live.Host + "/acme/app").Insecure()
	if build != nil {
		build(b)
	}
	ia := b.Build()
	create(t, e, &ia)
	return dead + "/acme/app:v1", candidate
}

// stuckPodWorld is where a stuck-pod test starts: the chart's recreate rights granted to the
// syncer, a resource named after the test (n) with spec.recreateStuckPods routing image, on a
// dead registry, to candidate, on a live one, and a namespace ns for the test's pods.
func stuckPodWorld(t *testing.T) (e env, n, image, candidate, ns string) {
	t.Helper()
	e = harness(t)
	grantRecreate(t, e)
	live := testutil.NewRegistry(t, "", "")
	n = name(t)
	image, candidate = routedApp(t, e, n, live, func(b *testutil.ImageAlternativeBuilder) { b.RecreateStuckPods() })
	return e, n, image, candidate, createNamespace(t, e, nil)
}

func missedPullOptions(allowDelete bool, age time.Duration) *missedpulls.Options {
	return &missedpulls.Options{AllowDelete: allowDelete, StuckPodAge: age, RecreateRate: 100, RecreateBurst: 100}
}

// A pod failing to pull an image a resource routes to an available candidate gets an
// ImagePullMissedRouting Warning naming the container, the image and the candidate, and so
// does the resource; the metric counts it once.
func TestMissedPullIsReportedOnThePodAndTheResource(t *testing.T) {
	e := harness(t)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, candidate := routedApp(t, e, n, live, nil)
	ns := createNamespace(t, e, nil)
	before := counter(t, metrics.MissedPulls.WithLabelValues("ImageAlternative", n))
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(false, time.Second)
	startSyncer(t, opts)

	pod := stuckPod(t, e, ns, "web", image, nil, true)
	pullFailed(t, e, pod, image)
	ev := waitEvent(t, e, "Pod", ns, "web", v1alpha1.EventImagePullMissedRouting, `"app"`, image, candidate, "ImageAlternative/"+n)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	waitEvent(t, e, "ImageAlternative", metav1.NamespaceDefault, n, v1alpha1.EventImagePullMissedRouting, ns+"/web", image, candidate)
	eventually(t, "the missed pull counted", func(context.Context) error {
		if got := counter(t, metrics.MissedPulls.WithLabelValues("ImageAlternative", n)) - before; got != 1 {
			return fmt.Errorf("counted %v", got)
		}
		return nil
	})
	// The kubelet reports again (back-off): no second report of the same (pod, container, candidate).
	pullFailed(t, e, pod, image)
	time.Sleep(2 * time.Second)
	if got := counter(t, metrics.MissedPulls.WithLabelValues("ImageAlternative", n)) - before; got != 1 {
		t.Errorf("counted %v after a second failure event, want 1", got)
	}
}

// Nothing is reported when the resource has no available candidate (every entry dead), nor on a
// forged event about a Running pod (events are anyone's to create in their namespace; the
// status is the kubelet's). A real missed pull in the same namespace, reported after them, is
// the control.
func TestMissedPullNeedsAnAvailableCandidateAndAFailingStatus(t *testing.T) {
	e := harness(t)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, _ := routedApp(t, e, n, live, nil)
	deadOnly := n + "-dead"
	deadImage := deadRegistry(t) + "/acme/other:v1"
	ia := testutil.NewImageAlternative(deadOnly).Repository(strings.TrimSuffix(deadImage, ":v1")).Repository(deadRegistry(t) + "/acme/other").Insecure().Build()
	create(t, e, &ia)
	ns := createNamespace(t, e, nil)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(false, time.Second)
	startSyncer(t, opts)

	unroutable := stuckPod(t, e, ns, "unroutable", deadImage, nil, true)
	pullFailed(t, e, unroutable, deadImage)
	running := stuckPod(t, e, ns, "running", image, nil, false)
	pullFailed(t, e, running, image) // forged
	control := stuckPod(t, e, ns, "control", image, nil, true)
	pullFailed(t, e, control, image)
	waitEvent(t, e, "Pod", ns, "control", v1alpha1.EventImagePullMissedRouting)
	time.Sleep(2 * time.Second) // the queue handed out the earlier pods first
	noEvent(t, e, "Pod", ns, "unroutable", v1alpha1.EventImagePullMissedRouting)
	noEvent(t, e, "Pod", ns, "running", v1alpha1.EventImagePullMissedRouting)
	noEvent(t, e, "ImageAlternative", metav1.NamespaceDefault, deadOnly, v1alpha1.EventImagePullMissedRouting)
}

// spec.recreateStuckPods: a pod a controller owns, failing for the stuck age, is deleted (the
// chart's policy admits the delete) and a StuckPodRecreated event goes on the resource. A pod
// no controller owns, failing as long, is reported but never deleted.
func TestStuckPodOwnedByAControllerIsDeleted(t *testing.T) {
	e, n, image, candidate, ns := stuckPodWorld(t)
	before := counter(t, metrics.StuckPodsRecreated.WithLabelValues("deleted"))
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, 2*time.Second)
	startSyncer(t, opts)

	bare := stuckPod(t, e, ns, "bare", image, nil, true)
	pullFailed(t, e, bare, image)
	owned := stuckPod(t, e, ns, "owned", image, replicaSet(t, e, ns, "owned"), true)
	pullFailed(t, e, owned, image)

	waitEvent(t, e, "Pod", ns, "bare", v1alpha1.EventImagePullMissedRouting, "no controller owns the pod")
	eventually(t, "the owned pod deleted", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "owned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (uid %s, deleting %v)", p.UID, p.DeletionTimestamp != nil)
	})
	waitEvent(t, e, "ImageAlternative", metav1.NamespaceDefault, n, v1alpha1.EventStuckPodRecreated, ns+"/owned", image, candidate)
	if got := counter(t, metrics.StuckPodsRecreated.WithLabelValues("deleted")) - before; got != 1 {
		t.Errorf("deleted counted %v, want 1", got)
	}
	// The bare pod has failed for more than the stuck age too: it is still there.
	pullFailed(t, e, bare, image)
	time.Sleep(3 * time.Second)
	p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "bare", metav1.GetOptions{})
	if err != nil || p.UID != bare.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the pod no controller owns: %v (deleting %v), want it untouched", err, p.DeletionTimestamp != nil)
	}
}

// Without spec.recreateStuckPods, or with it but a syncer not allowed to delete pods
// (--recreate-stuck-pods=false), a stuck pod a controller owns is reported and never deleted.
func TestStuckPodIsNotDeletedWithoutTheOptionOrThePermission(t *testing.T) {
	e := harness(t)
	grantRecreate(t, e)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, _ := routedApp(t, e, n, live, nil)
	optIn := n + "-in"
	imageIn, _ := routedApp(t, e, optIn, live, func(b *testutil.ImageAlternativeBuilder) { b.RecreateStuckPods() })

	for _, tc := range []struct {
		name, image string
		allowDelete bool
		note        string
	}{
		{"no-option", image, true, ""},
		{"no-permission", imageIn, false, "may not evict pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := createNamespace(t, e, nil)
			opts := syncerConfig()
			opts.MissedPulls = missedPullOptions(tc.allowDelete, time.Second)
			stop := startSyncer(t, opts)
			defer stop()
			pod := stuckPod(t, e, ns, "owned", tc.image, replicaSet(t, e, ns, "owned"), true)
			pullFailed(t, e, pod, tc.image)
			waitEvent(t, e, "Pod", ns, "owned", v1alpha1.EventImagePullMissedRouting, tc.note)
			time.Sleep(3 * time.Second) // three stuck ages
			pullFailed(t, e, pod, tc.image)
			time.Sleep(time.Second)
			p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "owned", metav1.GetOptions{})
			if err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
				t.Fatalf("the pod: %v, want it untouched", err)
			}
		})
	}
}

// The global rate limit holds back the second stuck pod: with a burst of one and a rate of one
// per hour, one of two stuck pods is deleted, the other stays and is counted rate-limited.
func TestStuckPodDeletesAreRateLimited(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	limited := counter(t, metrics.StuckPodsRecreated.WithLabelValues("rate-limited"))
	opts := syncerConfig()
	opts.MissedPulls = &missedpulls.Options{AllowDelete: true, StuckPodAge: time.Second, RecreateRate: 1.0 / 3600, RecreateBurst: 1}
	startSyncer(t, opts)

	pods := map[string]*corev1.Pod{}
	for _, p := range []string{"one", "two"} {
		pods[p] = stuckPod(t, e, ns, p, image, replicaSet(t, e, ns, p), true)
		pullFailed(t, e, pods[p], image)
	}
	eventually(t, "one pod deleted and the other held back", func(ctx context.Context) error {
		gone := 0
		for p := range pods {
			if _, err := e.cs.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				gone++
			}
		}
		if gone != 1 {
			return fmt.Errorf("%d deleted", gone)
		}
		if counter(t, metrics.StuckPodsRecreated.WithLabelValues("rate-limited")) == limited {
			return fmt.Errorf("no delete held back yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	gone := 0
	for p := range pods {
		if _, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), p, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			gone++
		}
	}
	if gone != 1 {
		t.Errorf("%d pods deleted, want 1", gone)
	}
}

// A dry-run resource never acts: no report and no delete for the pods only it would route,
// even with recreateStuckPods; an enforcing resource's missed pull next to it is the control.
func TestDryRunResourceReportsNoMissedPull(t *testing.T) {
	e := harness(t)
	grantRecreate(t, e)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	dryImage, _ := routedApp(t, e, n+"-dry", live, func(b *testutil.ImageAlternativeBuilder) { b.DryRun().RecreateStuckPods() })
	image, _ := routedApp(t, e, n, live, nil)
	ns := createNamespace(t, e, nil)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	startSyncer(t, opts)

	dry := stuckPod(t, e, ns, "dry", dryImage, replicaSet(t, e, ns, "dry"), true)
	pullFailed(t, e, dry, dryImage)
	control := stuckPod(t, e, ns, "control", image, nil, true)
	pullFailed(t, e, control, image)
	waitEvent(t, e, "Pod", ns, "control", v1alpha1.EventImagePullMissedRouting)
	time.Sleep(3 * time.Second)
	noEvent(t, e, "Pod", ns, "dry", v1alpha1.EventImagePullMissedRouting)
	noEvent(t, e, "ImageAlternative", metav1.NamespaceDefault, n+"-dry", v1alpha1.EventImagePullMissedRouting)
	if p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "dry", metav1.GetOptions{}); err != nil || p.UID != dry.UID {
		t.Fatalf("the dry-run resource's pod: %v, want it untouched", err)
	}
}
