package policies_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// The kuik-pod-deletes policies (policies/pod-deletes.yaml), rendered with
// syncer.recreateStuckPods.jobs: the owner kinds are the chart's default ones plus Job.batch.
const podDeletesPolicy = "kuik-pod-deletes"

// recreateOwners and excludedNamespaces are the syncer's settings the chart renders the policies
// for: its --recreate-stuck-pod-owners (default) with --recreate-stuck-job-pods, and the
// namespaces it always leaves out (kube-system, the release namespace).
var (
	recreateOwners     = append(append([]schema.GroupKind{}, missedpulls.DefaultRecreateOwners...), missedpulls.JobKind)
	excludedNamespaces = map[string]bool{"kube-system": true, releaseNamespace: true}
)

var podDeletesOnce sync.Once

// setupPodDeletes installs the chart's three pod-deletes policies and their bindings, and grants
// the syncer's ServiceAccount delete on pods (the chart grants only evictions) and evictions, so
// that only the policies refuse.
func setupPodDeletes(t *testing.T) {
	t.Helper()
	setup(t)
	var err error
	podDeletesOnce.Do(func() { err = installPodDeletes(t.Context(), admin(t)) })
	if err != nil {
		t.Fatal(err)
	}
	// Policies bind asynchronously: the syncer's delete and unlabelled eviction of a pod no
	// controller owns are refused once the first two are (evictionAnswer waits for the third).
	ns := namespace(t)
	pod, err := admin(t).CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bind-probe"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syncer := syncerClient(t)
	for what, try := range map[string]func(context.Context) error{
		"delete": func(ctx context.Context) error {
			return syncer.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
		"unlabelled eviction": func(ctx context.Context) error {
			return syncer.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Namespace: ns, Name: pod.Name},
				DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
			})
		},
	} {
		var last error
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last = try(ctx)
			return last != nil && strings.Contains(last.Error(), "'"+podDeletesPolicy), nil
		}); err != nil {
			t.Fatalf("the pod-deletes policies never refused the syncer's %s (last: %v): %v", what, last, err)
		}
	}
}

func installPodDeletes(ctx context.Context, cs kubernetes.Interface) error {
	r, err := charts.Render(charts.Release{Name: "kuik", Namespace: releaseNamespace, Values: map[string]any{"syncer": map[string]any{
		"missedPulls":       map[string]any{"enabled": true},
		"recreateStuckPods": map[string]any{"enabled": true, "jobs": true},
	}}})
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, o := range r.Objects {
		if strings.HasPrefix(o.GetName(), podDeletesPolicy) && strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			objs = append(objs, o)
		}
	}
	if len(objs) != 6 {
		return fmt.Errorf("the chart renders %d pod-deletes objects, want three policies and their bindings", len(objs))
	}
	if err := testenv.Apply(ctx, cp.Config(), objs); err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-pod-deleter"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		},
	}
	return grant(ctx, cs, role, serviceAccount(syncerSA))
}

// podOwners creates, in a namespace, one controller of each kind a case names, and returns an
// ownerReference to each (controller: true), by kind.
type podOwners struct {
	t    *testing.T
	refs map[string]map[string]metav1.OwnerReference // namespace, kind
}

// Owner kinds of the cases besides the Kind of an object: none, a Job with no retry left, and
// an ImageAlternative (a controller of a kind of kuik's own group: no template).
const (
	noOwner         = "none"
	jobOutOfRetries = "Job, backoffLimit 0"
	kuikResource    = "ImageAlternative"
)

func (o *podOwners) ref(ns, kind string) metav1.OwnerReference {
	t := o.t
	t.Helper()
	key := kind
	if r, ok := o.refs[ns][key]; ok {
		return r
	}
	ctx, cs := t.Context(), admin(t)
	name := strings.ToLower(strings.NewReplacer(",", "", " ", "-").Replace(kind))
	labels := map[string]string{"owner": name}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/x:1"}}},
	}
	meta := metav1.ObjectMeta{Namespace: ns, Name: name}
	var (
		apiVersion string
		obj        metav1.Object
		err        error
	)
	switch kind {
	case "ReplicaSet":
		obj, err = cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template,
		}}, metav1.CreateOptions{})
		apiVersion = "apps/v1"
	case "StatefulSet":
		obj, err = cs.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template,
		}}, metav1.CreateOptions{})
		apiVersion = "apps/v1"
	case "DaemonSet": // no controller runs here: it makes no pod
		obj, err = cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template,
		}}, metav1.CreateOptions{})
		apiVersion = "apps/v1"
	case "ReplicationController":
		obj, err = cs.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: meta, Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To[int32](0), Selector: labels, Template: &template,
		}}, metav1.CreateOptions{})
		apiVersion = "v1"
	case "Job", jobOutOfRetries:
		limit := int32(3)
		if kind == jobOutOfRetries {
			limit = 0
		}
		job := template.DeepCopy()
		job.Spec.RestartPolicy = corev1.RestartPolicyNever
		obj, err = cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{
			Suspend: ptr.To(true), BackoffLimit: ptr.To(limit), Template: *job,
		}}, metav1.CreateOptions{})
		kind, apiVersion = "Job", "batch/v1"
	case "Node":
		obj, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-node-"}}, metav1.CreateOptions{})
		apiVersion = "v1"
	case kuikResource:
		r := owner(t)
		apiVersion, obj = r.APIVersion, &metav1.ObjectMeta{Name: r.Name, UID: r.UID}
	default:
		t.Fatalf("no owner of kind %q", kind)
	}
	if err != nil {
		t.Fatalf("creating the %s owner in %s: %v", kind, ns, err)
	}
	r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), Controller: ptr.To(true)}
	if o.refs[ns] == nil {
		o.refs[ns] = map[string]metav1.OwnerReference{}
	}
	o.refs[ns][key] = r
	return r
}

// Container statuses as the kubelet writes them.
var (
	errImagePull     = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingErrImagePull}}}
	imagePullBackOff = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: missedpulls.WaitingImagePullBackOff}}}
	creating         = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	initializing     = corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	runningStatus    = corev1.ContainerStatus{Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	startedPulling   = corev1.ContainerStatus{Started: ptr.To(true), State: errImagePull.State}
	completed        = corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}
)

// ranBefore is st after a restart: a restart count and a last state.
func ranBefore(st corev1.ContainerStatus) corev1.ContainerStatus {
	st.RestartCount = 1
	st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	return st
}

// podCase is a pod the secret-syncer would evict or delete: what it is made of, and whether it
// may be (the Go predicate's answer, and the API server's unless differ says why not).
type podCase struct {
	// owner is the kind of the pod's owner (ReplicaSet when empty, noOwner for none);
	// notController makes its ownerReference no controller one.
	owner         string
	notController bool
	// ns is the pod's namespace ("" the test's own).
	ns    string
	phase corev1.PodPhase
	// init is the status of an init container (nil for none), app the one of the regular
	// container app, sidecar of a second regular container (nil for none), ephemeral of an
	// ephemeral container (nil for none).
	init, app, sidecar, ephemeral *corev1.ContainerStatus
	// image is the spec's image; statusImage what the kubelet reports ("" the same).
	image, statusImage  string
	labels, annotations map[string]string
	// node is the pod's spec.nodeName (a mirror pod must have one).
	node        string
	terminating bool
	// evictable is missedpulls.Evictable's answer, and its Job's retries
	// (missedpulls.JobHasRetries) for a Job's pod.
	evictable bool
	// differ, when not empty, is why the policies legitimately give the other answer.
	differ string
}

// The pods the secret-syncer may evict (missedpulls.Evictable, the rules the watcher applies
// before it evicts) and those the pod-deletes policies let it delete and evict: one table for
// both. Each pod is created, its status written as the kubelet would; then the Go predicate
// judges the pod read back, and the API server judges a dry-run delete and a dry-run eviction
// (as the syncer sends it: labelled, with uid and resourceVersion preconditions) by the
// syncer's ServiceAccount. Both answers must be the case's, unless the case says why the
// policies cannot tell.
func TestPodDeletesCasesAgreeWithTheSyncer(t *testing.T) {
	setupPodDeletes(t)
	stuck := func(c podCase) podCase {
		if c.owner == "" {
			c.owner = "ReplicaSet"
		}
		if c.phase == "" {
			c.phase = corev1.PodPending
		}
		if c.app == nil {
			c.app = &errImagePull
		}
		return c
	}
	cases := map[string]podCase{
		"stuck in ErrImagePull, a ReplicaSet's":    stuck(podCase{evictable: true}),
		"stuck in ImagePullBackOff":                stuck(podCase{app: &imagePullBackOff, evictable: true}),
		"a StatefulSet's":                          stuck(podCase{owner: "StatefulSet", evictable: true}),
		"a DaemonSet's":                            stuck(podCase{owner: "DaemonSet", evictable: true}),
		"a Job's with retries left":                stuck(podCase{owner: "Job", evictable: true}),
		"a ReplicationController's (not an owner)": stuck(podCase{owner: "ReplicationController"}),
		"an ImageAlternative's (not an owner)":     stuck(podCase{owner: kuikResource}),
		"no owner":                                 stuck(podCase{owner: noOwner}),
		"a ReplicaSet owns it, not as controller":  stuck(podCase{owner: "ReplicaSet", notController: true}),
		"a Job's without retries left": stuck(podCase{owner: jobOutOfRetries,
			differ: "no admission policy reads the Job: its retries are the syncer's to check"}),
		"init container stuck":                stuck(podCase{init: &errImagePull, app: &initializing, evictable: true}),
		"init container completed, app stuck": stuck(podCase{init: &completed}),
		"Running, app running":                stuck(podCase{phase: corev1.PodRunning, app: &runningStatus}),
		"Running, a sidecar restarting in ImagePullBackOff": stuck(podCase{phase: corev1.PodRunning, app: &runningStatus,
			sidecar: ptr.To(ranBefore(imagePullBackOff))}),
		"Pending, app ran before":                   stuck(podCase{app: ptr.To(ranBefore(errImagePull))}),
		"Pending, app started":                      stuck(podCase{app: &startedPulling}),
		"Pending, a sidecar running, app stuck":     stuck(podCase{sidecar: &runningStatus}),
		"Failed":                                    stuck(podCase{phase: corev1.PodFailed}),
		"Pending, no container waits for a pull":    stuck(podCase{app: &creating}),
		"only an ephemeral container fails":         stuck(podCase{app: &creating, ephemeral: &errImagePull}),
		"an ephemeral container fails, app stuck":   stuck(podCase{ephemeral: &errImagePull, evictable: true}),
		"the status names the spec's image in full": stuck(podCase{image: "nginx", statusImage: "docker.io/library/nginx:latest", evictable: true}),
		"the status names another image (the spec changed since)": stuck(podCase{statusImage: "registry.invalid/y:1",
			differ: "CEL does not normalize image references (nginx is docker.io/library/nginx:latest): the policies do not compare the status's image with the spec's"}),
		"labelled kuik.enix.io/skip":       stuck(podCase{labels: map[string]string{v1alpha1.LabelSkip: "true"}}),
		"labelled kuik.enix.io/skip=false": stuck(podCase{labels: map[string]string{v1alpha1.LabelSkip: "false"}, evictable: true}),
		"in kube-system":                   stuck(podCase{ns: "kube-system"}),
		"in the release namespace":         stuck(podCase{ns: releaseNamespace}),
		"being deleted":                    stuck(podCase{terminating: true}),
		"a mirror pod":                     stuck(podCase{annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}, node: "policy-node"}),
		"a Node's":                         stuck(podCase{owner: "Node"}),
	}
	ns := namespace(t)
	owners := &podOwners{t: t, refs: map[string]map[string]metav1.OwnerReference{}}
	i := 0
	for name, c := range cases {
		i++
		podName := fmt.Sprintf("p%d", i)
		t.Run(name, func(t *testing.T) {
			in := ns
			if c.ns != "" {
				in = c.ns
			}
			pod := createCasePod(t, owners, in, podName, c)
			goAnswer := missedpulls.Evictable(pod, recreateOwners, excludedNamespaces)
			if r := missedpulls.ControllerOf(pod); goAnswer && r != nil && missedpulls.OwnerKind(*r) == missedpulls.JobKind {
				job, err := admin(t).BatchV1().Jobs(in).Get(t.Context(), r.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				goAnswer = missedpulls.JobHasRetries(job)
			}
			if goAnswer != c.evictable {
				t.Errorf("missedpulls.Evictable = %v, want %v", goAnswer, c.evictable)
			}
			want := c.evictable != (c.differ != "")
			del, evict := deleteAnswer(t, pod), evictionAnswer(t, pod)
			for what, got := range map[string]string{"delete": del, "eviction": evict} {
				if (got == "") != want {
					t.Errorf("the API server's answer to the syncer's %s: %q, want admitted %v (the Go predicate: %v; differ: %q)", what, got, want, goAnswer, c.differ)
				}
			}
		})
	}
}

// createCasePod creates the pod of c and writes its status, and returns it as the API server
// holds it then.
func createCasePod(t *testing.T, owners *podOwners, ns, name string, c podCase) *corev1.Pod {
	t.Helper()
	ctx, cs := t.Context(), admin(t)
	image := c.image
	if image == "" {
		image = "registry.invalid/x:1"
	}
	statusImage := c.statusImage
	if statusImage == "" {
		statusImage = image
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: c.labels, Annotations: c.annotations},
		Spec:       corev1.PodSpec{NodeName: c.node, Containers: []corev1.Container{{Name: "app", Image: image}}},
	}
	if c.owner != noOwner {
		r := owners.ref(ns, c.owner)
		if c.notController {
			r.Controller = ptr.To(false)
		}
		p.OwnerReferences = []metav1.OwnerReference{r}
	}
	if c.terminating {
		p.Finalizers = []string{"kuik.enix.io/policy-test"}
	}
	named := func(n string, st corev1.ContainerStatus) corev1.ContainerStatus {
		st.Name, st.Image = n, statusImage
		if st.State.Running != nil || st.State.Terminated != nil {
			st.ImageID = statusImage + "@sha256:0000000000000000000000000000000000000000000000000000000000000000"
		}
		return st
	}
	status := corev1.PodStatus{Phase: c.phase, ContainerStatuses: []corev1.ContainerStatus{named("app", *c.app)}}
	if c.init != nil {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: image}}
		status.InitContainerStatuses = []corev1.ContainerStatus{named("init", *c.init)}
	}
	if c.sidecar != nil {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: image})
		status.ContainerStatuses = append(status.ContainerStatuses, named("sidecar", *c.sidecar))
	}
	got, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the pod: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if c.terminating {
			_, _ = cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		_ = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	if c.ephemeral != nil {
		got.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: image, TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
		}}}
		if got, err = cs.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, name, got, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("adding an ephemeral container: %v", err)
		}
		status.EphemeralContainerStatuses = []corev1.ContainerStatus{named("debug", *c.ephemeral)}
	}
	got.Status = status
	if got, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the pod's status: %v", err)
	}
	if c.terminating {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("the pod is not being deleted: %v", err)
		}
	}
	return got
}

// deleteAnswer is the pod-deletes policy's refusal of the syncer's dry-run delete of pod, ""
// when admitted. The pod is the request's oldObject, read from storage: no wait.
func deleteAnswer(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	err := syncerClient(t).CoreV1().Pods(pod.Namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{
		DryRun: []string{metav1.DryRunAll}, Preconditions: &metav1.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion},
	})
	return policyAnswer(t, "delete", err)
}

// msgVersion is the evicted-pods policy's refusal when the pod it holds is not the version the
// eviction names.
const msgVersion = "the version of the pod the API server holds"

// evictionAnswer is the pod-deletes policies' refusal of the syncer's dry-run eviction of pod,
// "" when admitted. The evicted-pods policy reads the pod from the API server's pod informer:
// the answer is taken once the informer holds the pod (an eviction naming another version of it
// is refused) and this version of it (the eviction naming it is not refused for its version).
func evictionAnswer(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	syncer := syncerClient(t)
	evict := func(ctx context.Context, rv string) error {
		uid := pod.UID
		return syncer.CoreV1().Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer}},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}, Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}},
		})
	}
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = evict(ctx, "1")
		return last != nil && strings.Contains(last.Error(), msgVersion), nil
	}); err != nil {
		t.Fatalf("the evicted-pods policy never saw the pod (last: %v): %v", last, err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = evict(ctx, pod.ResourceVersion)
		return last == nil || !strings.Contains(last.Error(), msgVersion), nil
	}); err != nil {
		t.Fatalf("the evicted-pods policy never saw the pod's last version (last: %v): %v", last, err)
	}
	return policyAnswer(t, "eviction", last)
}

// policyAnswer is err's message when the pod-deletes policies refused, "" when err is nil; any
// other error fails the test.
func policyAnswer(t *testing.T, what string, err error) string {
	t.Helper()
	switch {
	case err == nil:
		return ""
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+podDeletesPolicy):
		return err.Error()
	}
	t.Fatalf("the syncer's %s: %v, want admitted or refused by the pod-deletes policies", what, err)
	return ""
}
