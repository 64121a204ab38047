package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Stuck-pod recreation evicts, through the Eviction API, only pods none of whose containers
// ever ran, of controllers that recreate them from a template, one pod per controller at a
// time; the kuik-pod-deletes policies bound the syncer's deletes and evictions the same way.

// What an admission policy sees of an eviction, asked of the real API server: a CREATE on the
// pods/eviction subresource, whose object is the Eviction (kind policy/v1 Eviction) and whose
// oldObject is null, so the pod is nowhere in the request; a DELETE of a pod has the pod as
// oldObject. The pod-deletes policies are built on this (policies/pod-deletes.yaml): the pod of
// an eviction is read from params.
func TestEvictionsReachAdmissionAsACreateOfTheEviction(t *testing.T) {
	e := harness(t)
	n := name(t)
	const user = "eviction-probe"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: n},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/eviction"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "probe", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				MessageExpression: `'seen: ' + request.operation + ' ' + request.resource.resource + '/' + request.?subResource.orValue('') +
					' kind=' + request.kind.?group.orValue('') + '/' + request.kind.version + '/' + request.kind.kind +
					' object=' + (object == null ? 'null' : object.kind + ' ' + object.metadata.name) +
					' oldObject=' + (oldObject == null ? 'null' : 'the pod ' + oldObject.metadata.name + ' phase=' + oldObject.status.phase)`,
			}},
		},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), n, metav1.DeleteOptions{})
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: n},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: n, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), n, metav1.DeleteOptions{})
	})
	cfg := rest.CopyConfig(cp.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	probe, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(t, e, nil)
	pod := stuckPod(t, e, ns, "web", "registry.invalid/x:1", replicaSet(t, e, ns, "web"), true)
	for what, tc := range map[string]struct {
		try  func(context.Context) error
		want string
	}{
		"an eviction": {
			try:  func(ctx context.Context) error { return probe.CoreV1().Pods(ns).EvictV1(ctx, eviction(pod, true)) },
			want: "seen: CREATE pods/eviction kind=policy/v1/Eviction object=Eviction web oldObject=null",
		},
		"a delete": {
			try: func(ctx context.Context) error {
				return probe.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			},
			want: "seen: DELETE pods/ kind=/v1/Pod object=null oldObject=the pod web phase=Pending",
		},
	} {
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last = tc.try(ctx)
			return last != nil && strings.Contains(last.Error(), "seen: "), nil
		}); err != nil {
			t.Fatalf("%s: the probe policy never answered (last: %v): %v", what, last, err)
		}
		if !strings.Contains(last.Error(), tc.want) {
			t.Errorf("%s: the API server shows the policy %v, want %q", what, last, tc.want)
		}
	}
}

// podStatus builds a pod's status as the kubelet writes it: phase, init container "init" (when
// not nil) and containers "app" and, when not nil, "sidecar".
type podStatus struct {
	phase         corev1.PodPhase
	init, app     corev1.ContainerStatus
	sidecar       *corev1.ContainerStatus
	initContainer bool
}

var (
	pulling = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingErrImagePull, Message: "connection refused"}}}
	backOff = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingImagePullBackOff}}}
	running = corev1.ContainerStatus{Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	done    = corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}
)

// restarted is a container status that ran before: a restart and a last state.
func restarted(st corev1.ContainerStatus) corev1.ContainerStatus {
	st.RestartCount = 1
	st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	return st
}

// podIn creates the pod of stuckPod with the status st (image for every container).
func podIn(t *testing.T, e env, ns, name, image string, owner *metav1.OwnerReference, st podStatus) *corev1.Pod {
	t.Helper()
	p := podOf(ns, name, image, owner)
	named := func(n string, s corev1.ContainerStatus) corev1.ContainerStatus {
		s.Name, s.Image = n, image
		if s.State.Running != nil || s.State.Terminated != nil {
			s.ImageID = image + "@sha256:0000000000000000000000000000000000000000000000000000000000000000"
		}
		return s
	}
	status := corev1.PodStatus{Phase: st.phase, ContainerStatuses: []corev1.ContainerStatus{named("app", st.app)}}
	if st.initContainer {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: image}}
		status.InitContainerStatuses = []corev1.ContainerStatus{named("init", st.init)}
	}
	if st.sidecar != nil {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: image})
		status.ContainerStatuses = append(status.ContainerStatuses, named("sidecar", *st.sidecar))
	}
	created, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = status
	updated, err := e.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// replicationController creates a ReplicationController of no replica: a controller of the core
// group, not among the syncer's owner kinds.
func replicationController(t *testing.T, e env, ns, name string) *metav1.OwnerReference {
	t.Helper()
	labels := map[string]string{"app": name}
	rc, err := e.cs.CoreV1().ReplicationControllers(ns).Create(t.Context(), &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To[int32](0), Selector: labels,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "ReplicationController", Name: rc.Name, UID: rc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// job creates a suspended Job (no controller runs here anyway) with backoffLimit.
func job(t *testing.T, e env, ns, name string, backoffLimit int32) *metav1.OwnerReference {
	t.Helper()
	j, err := e.cs.BatchV1().Jobs(ns).Create(t.Context(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(true), BackoffLimit: ptr.To(backoffLimit),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// The kuik-pod-deletes policies: the syncer's ServiceAccount may delete or evict a pod only
// when its controller is of a kind that recreates it (the chart's owners, and Job.batch with
// jobs), a container waits in ErrImagePull or ImagePullBackOff, and none of its init or
// regular containers ever ran — whatever its RBAC grants. An eviction must also name the pod's
// current uid and resourceVersion and carry the syncer's label. The API server decides
// (dry-run deletes and evictions); each refusal is polled until the API server's own pod cache
// holds the pod's last version.
func TestPodDeletesAndEvictionsAreBoundedByThePolicy(t *testing.T) {
	e := harness(t)
	grantRecreate(t, e)
	ns := createNamespace(t, e, nil)
	rs := replicaSet(t, e, ns, "owner")
	syncerCS, deleter := syncerClient(t), syncerDeleter(t)
	const (
		owners = "whose controller recreates them from a template"
		waits  = "with a container waiting in ErrImagePull or ImagePullBackOff"
		ran    = "Pending pods none of whose containers ever ran"
	)
	stuck := podStatus{phase: corev1.PodPending, app: pulling}
	tests := map[string]struct {
		owner func() *metav1.OwnerReference
		st    podStatus
		want  string // "" allowed, else the refusal
	}{
		"stuck: Pending, nothing ran, a ReplicaSet's":            {func() *metav1.OwnerReference { return rs }, stuck, ""},
		"stuck, a Job's (its retries are the syncer's to check)": {func() *metav1.OwnerReference { return job(t, e, ns, "job", 3) }, stuck, ""},
		"stuck, init container waiting":                          {func() *metav1.OwnerReference { return rs }, podStatus{phase: corev1.PodPending, initContainer: true, init: backOff, app: corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}, ""},
		"running":                                                {func() *metav1.OwnerReference { return rs }, podStatus{phase: corev1.PodRunning, app: running}, waits},
		"running, sidecar in ImagePullBackOff after a restart": {func() *metav1.OwnerReference { return rs },
			podStatus{phase: corev1.PodRunning, app: running, sidecar: ptr.To(restarted(backOff))}, ran},
		"Pending, but its init container ran":                     {func() *metav1.OwnerReference { return rs }, podStatus{phase: corev1.PodPending, initContainer: true, init: done, app: pulling}, ran},
		"Pending, but the container ran before":                   {func() *metav1.OwnerReference { return rs }, podStatus{phase: corev1.PodPending, app: restarted(pulling)}, ran},
		"stuck, no controller":                                    {func() *metav1.OwnerReference { return nil }, stuck, owners},
		"stuck, a ReplicationController's (not among the owners)": {func() *metav1.OwnerReference { return replicationController(t, e, ns, "rc") }, stuck, owners},
		"stuck, owner not controller": {func() *metav1.OwnerReference {
			return &metav1.OwnerReference{APIVersion: rs.APIVersion, Kind: rs.Kind, Name: rs.Name, UID: rs.UID}
		}, stuck, owners},
	}
	i := 0
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			i++
			pod := podIn(t, e, ns, fmt.Sprintf("p%d", i), "registry.invalid/x:1", tc.owner(), tc.st)
			for what, try := range map[string]func(context.Context) error{
				"delete": func(ctx context.Context) error {
					return deleter.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
				},
				"eviction": func(ctx context.Context) error { return syncerCS.CoreV1().Pods(ns).EvictV1(ctx, eviction(pod, true)) },
			} {
				want := tc.want
				var last error
				err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
					last = try(ctx)
					if want == "" {
						return last == nil, nil
					}
					return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "pod-deletes") && strings.Contains(last.Error(), want), nil
				})
				if err != nil && want == "" {
					t.Errorf("%s refused: %v", what, last)
				}
				if err != nil && want != "" {
					t.Errorf("%s: %v, want refused by the pod-deletes policies: %q", what, last, want)
				}
			}
		})
	}

	// The chart grants the syncer evictions, never deletes.
	if err := syncerCS.CoreV1().Pods(ns).Delete(t.Context(), "p1", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot delete resource "pods"`) {
		t.Errorf("the syncer deleting a pod: %v, want refused by RBAC", err)
	}

	// An eviction must name the version of the pod the API server holds, and carry the label
	// that selects it for the check of the pod.
	pod := podIn(t, e, ns, "versions", "registry.invalid/x:1", rs, stuck)
	stale := eviction(pod, true)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	pod, err := e.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unlabelled := eviction(pod, true)
	unlabelled.Labels = nil
	bare := eviction(pod, true)
	bare.DeleteOptions.Preconditions = nil
	for what, tc := range map[string]struct {
		ev   func() error
		want string
	}{
		"a stale resourceVersion": {func() error { return syncerCS.CoreV1().Pods(ns).EvictV1(t.Context(), stale) }, "the version of the pod the API server holds"},
		"no label":                {func() error { return syncerCS.CoreV1().Pods(ns).EvictV1(t.Context(), unlabelled) }, "labelled app.kubernetes.io/managed-by=kuik-secret-syncer"},
		"no preconditions":        {func() error { return syncerCS.CoreV1().Pods(ns).EvictV1(t.Context(), bare) }, "uid and resourceVersion"},
	} {
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			last = tc.ev()
			return apierrors.IsForbidden(last) && strings.Contains(last.Error(), tc.want), nil
		}); err != nil {
			t.Errorf("an eviction with %s: %v, want refused with %q", what, last, tc.want)
		}
	}
}

// A Running pod whose sidecar restarts in ImagePullBackOff (imagePullPolicy Always, a :latest
// tag) during the outage serves: it is reported, never evicted. Nor is a Pending pod whose init
// container ran. A stuck pod that never ran, next to them, is evicted: the control.
func TestStuckPodThatRanIsNotEvicted(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	startSyncer(t, opts)

	serving := podIn(t, e, ns, "serving", image, replicaSet(t, e, ns, "serving"), podStatus{phase: corev1.PodRunning, app: running, sidecar: ptr.To(restarted(backOff))})
	initRan := podIn(t, e, ns, "init-ran", image, replicaSet(t, e, ns, "init-ran"), podStatus{phase: corev1.PodPending, initContainer: true, init: done, app: pulling})
	control := podIn(t, e, ns, "control", image, replicaSet(t, e, ns, "control"), podStatus{phase: corev1.PodPending, app: pulling})
	for _, p := range []*corev1.Pod{serving, initRan, control} {
		pullFailed(t, e, p, image)
	}
	waitEvent(t, e, "Pod", ns, "serving", v1alpha1.EventImagePullMissedRouting, `"sidecar"`, "one of its containers has run")
	waitEvent(t, e, "Pod", ns, "init-ran", v1alpha1.EventImagePullMissedRouting, `"app"`, "one of its containers has run")
	eventually(t, "the control pod evicted", gonePod(e, ns, "control"))
	time.Sleep(3 * time.Second) // three stuck ages
	pullFailed(t, e, serving, image)
	pullFailed(t, e, initRan, image)
	time.Sleep(time.Second)
	untouched(t, e, serving, initRan)
}

// gonePod is nil once the pod is gone (or replaced).
func gonePod(e env, ns, name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if _, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there: %w", name, err)
		}
		return nil
	}
}

// untouched fails the test unless each pod is there, the same and not being deleted.
func untouched(t *testing.T, e env, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		got, err := e.cs.CoreV1().Pods(p.Namespace).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Errorf("pod %s: %v (deleting %v), want it untouched", p.Name, err, got != nil && got.DeletionTimestamp != nil)
		}
	}
}

// A controller is recreated from only when it recreates its pods from a template: a
// ReplicationController is not among the default owners (--recreate-stuck-pod-owners), so its
// stuck pod is reported only; a Job's pod is evicted only with --recreate-stuck-job-pods and
// while the Job has retries left: not with backoffLimit 0 (the Job would fail for good). The
// pod of a Job with retries left is evicted, and goes through the Eviction API (the API server
// marks it DisruptionTarget, EvictionByEvictionAPI, before it deletes it).
func TestStuckPodIsEvictedOnlyWhenItsControllerRecreatesIt(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	opts.MissedPulls.RecreateJobs = true
	startSyncer(t, opts)

	stuck := podStatus{phase: corev1.PodPending, app: pulling}
	byRC := podIn(t, e, ns, "rc", image, replicationController(t, e, ns, "rc"), stuck)
	lastTry := podIn(t, e, ns, "last-try", image, job(t, e, ns, "last-try", 0), stuck)
	// Bound to a node that has no kubelet: the eviction leaves it terminating, with the
	// condition the API server writes.
	retried := podOf(ns, "retried", image, job(t, e, ns, "retried", 2))
	retried.Spec.NodeName = "no-kubelet"
	retried = createWithStatus(t, e, retried, true)
	for _, p := range []*corev1.Pod{byRC, lastTry, retried} {
		pullFailed(t, e, p, image)
	}
	waitEvent(t, e, "Pod", ns, "rc", v1alpha1.EventImagePullMissedRouting, "a ReplicationController, is not one the secret-syncer counts on")
	eventually(t, "the pod of the Job with retries left evicted", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, "retried", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("not deleting yet")
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI" {
				return nil
			}
		}
		return fmt.Errorf("deleting, but not by an eviction: conditions %+v", p.Status.Conditions)
	})
	forceDelete(t, e, retried)
	time.Sleep(3 * time.Second) // three stuck ages
	pullFailed(t, e, byRC, image)
	pullFailed(t, e, lastTry, image)
	time.Sleep(time.Second)
	untouched(t, e, byRC, lastTry)
}

// forceDelete deletes a pod at once (grace period 0), as the kubelet would once it stopped.
func forceDelete(t *testing.T, e env, p *corev1.Pod) {
	t.Helper()
	if err := e.cs.CoreV1().Pods(p.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// At most one pod per controller is being evicted: two stuck replicas of one ReplicaSet, bound
// to a node that has no kubelet so that an evicted pod stays terminating; the second is not
// evicted while the first is still there (for three stuck ages), and is once it is gone.
func TestStuckPodsOfOneControllerAreEvictedOneAtATime(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	startSyncer(t, opts)

	owner := replicaSet(t, e, ns, "web")
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"web-a", "web-b"} {
		p := podOf(ns, name, image, owner)
		p.Spec.NodeName = "no-kubelet"
		pods[name] = createWithStatus(t, e, p, true)
		pullFailed(t, e, pods[name], image)
	}
	terminating := func(ctx context.Context) ([]string, error) {
		var out []string
		for name, p := range pods {
			got, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, err
			case got.UID == p.UID && got.DeletionTimestamp != nil:
				out = append(out, name)
			}
		}
		return out, nil
	}
	var first string
	eventually(t, "one replica evicted", func(ctx context.Context) error {
		evicted, err := terminating(ctx)
		if err != nil || len(evicted) == 0 {
			return fmt.Errorf("evicted %q: %w", evicted, err)
		}
		first = evicted[0]
		return nil
	})
	time.Sleep(3 * time.Second) // three stuck ages
	for _, p := range pods {
		pullFailed(t, e, p, image)
	}
	time.Sleep(time.Second)
	if evicted, err := terminating(t.Context()); err != nil || len(evicted) != 1 {
		t.Fatalf("evicted %q (%v) while %s was still terminating, want only it", evicted, err, first)
	}
	forceDelete(t, e, pods[first])
	second := "web-a"
	if first == second {
		second = "web-b"
	}
	pullFailed(t, e, pods[second], image)
	eventually(t, "the second replica evicted once the first is gone", func(ctx context.Context) error {
		evicted, err := terminating(ctx)
		if err != nil || len(evicted) != 1 || evicted[0] != second {
			return fmt.Errorf("evicted %q: %w", evicted, err)
		}
		return nil
	})
	forceDelete(t, e, pods[second])
}
