package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/testutil"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A mirror pod (the API server's copy of a kubelet's static pod: annotation
// kubernetes.io/config.mirror, its Node as controller) is never deleted: the kubelet recreates
// it from the same manifest, which no webhook changes, so every delete would be followed by
// another, every stuck age, for ever. Nor is a pod whose controller is a Node without the
// annotation: nothing recreates it. A pod a ReplicaSet owns, failing the same way, is deleted:
// the control.
func TestStuckMirrorPodIsNotDeleted(t *testing.T) {
	e, n, image, _, ns := stuckPodWorld(t)
	node, err := e.cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	nodeOwner := &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true)}
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	startSyncer(t, opts)

	mirror := stuckPodWith(t, e, ns, "static-web-"+n, image, nodeOwner, node.Name, map[string]string{corev1.MirrorPodAnnotationKey: "0123abcd"})
	pullFailed(t, e, mirror, image)
	nodeOwned := stuckPod(t, e, ns, "node-owned", image, nodeOwner, true)
	pullFailed(t, e, nodeOwned, image)
	control := stuckPod(t, e, ns, "control", image, replicaSet(t, e, ns, "control"), true)
	pullFailed(t, e, control, image)

	waitEvent(t, e, "Pod", ns, mirror.Name, v1alpha1.EventImagePullMissedRouting)
	waitEvent(t, e, "Pod", ns, nodeOwned.Name, v1alpha1.EventImagePullMissedRouting)
	eventually(t, "the ReplicaSet's pod deleted", func(ctx context.Context) error {
		if _, err := e.cs.CoreV1().Pods(ns).Get(ctx, "control", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		return nil
	})
	// Failing for three stuck ages, reported again.
	time.Sleep(3 * time.Second)
	pullFailed(t, e, mirror, image)
	pullFailed(t, e, nodeOwned, image)
	time.Sleep(2 * time.Second)
	for _, p := range []*corev1.Pod{mirror, nodeOwned} {
		got, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Errorf("pod %s: %v (deleting %v), want it untouched", p.Name, err, got != nil && got.DeletionTimestamp != nil)
		}
	}
}

// stuckPodWith is stuckPod (failing) bound to nodeName, with annotations.
func stuckPodWith(t *testing.T, e env, ns, name, image string, owner *metav1.OwnerReference, nodeName string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	p := podOf(ns, name, image, owner)
	p.Annotations, p.Spec.NodeName = annotations, nodeName
	return createWithStatus(t, e, p, true)
}

// Pods the rate limit holds back wait their turn: each is looked at again after as many token
// intervals as pods are held, not after one, so that N held pods cost about one check per
// delete instead of N (a thousand pods of a Deployment admitted during a webhook outage were
// each read and routed again every 5s, 200 reads a second, until the last was deleted). Twelve
// stuck pods at one delete a second: all are deleted, and the rate-limited checks stay within
// three per pod (each held pod checked every second, as before: 66 measured, 11 with turns).
func TestStuckPodsHeldBackByTheRateLimitWaitTheirTurn(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	const pods = 12
	limited := counter(t, metrics.StuckPodsRecreated.WithLabelValues("rate-limited"))
	opts := syncerConfig()
	opts.MissedPulls = &missedpulls.Options{AllowDelete: true, StuckPodAge: time.Second, RecreateRate: 1, RecreateBurst: 1}
	startSyncer(t, opts)

	for i := range pods {
		p := fmt.Sprintf("p%d", i)
		pullFailed(t, e, stuckPod(t, e, ns, p, image, replicaSet(t, e, ns, p), true), image)
	}
	eventually(t, "every stuck pod deleted", func(ctx context.Context) error {
		list, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		return nil
	})
	got := counter(t, metrics.StuckPodsRecreated.WithLabelValues("rate-limited")) - limited
	t.Logf("%v rate-limited checks for %d pods", got, pods)
	if got > 3*pods {
		t.Errorf("%v rate-limited checks for %d pods deleted one a second, want at most %d: held pods are looked at again before their turn", got, pods, 3*pods)
	}
}

// A long webhook outage: a stuck pod is deleted, its controller recreates it, the webhook is
// still down so the replacement fails on the same image. Deleting it again after one stuck age,
// and its replacement after another, for the whole outage, is churn that routes nothing and
// burns a Job's backoffLimit: each generation of a controller's pods (a pod created after one
// of them was deleted) doubles the stuck age. With a stuck age of 2s, the replacement is still
// there 3s after it was first reported, and deleted later (after 4s); a sibling created before
// the first delete (another replica) keeps the stuck age of 2s.
func TestStuckPodsOfAControllerDeletedAgainBackOff(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	opts := syncerConfig()
	opts.MissedPulls = &missedpulls.Options{AllowDelete: true, StuckPodAge: 2 * time.Second, RecreateRate: 100, RecreateBurst: 100}
	startSyncer(t, opts)

	owner := replicaSet(t, e, ns, "web")
	gone := func(name string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if _, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there: %w", name, err)
			}
			return nil
		}
	}
	first := stuckPod(t, e, ns, "web-1", image, owner, true)
	sibling := stuckPod(t, e, ns, "web-sibling", image, owner, true)
	time.Sleep(time.Second) // creation times are at the second: the replacement's is later
	pullFailed(t, e, first, image)
	eventually(t, "the first pod deleted", gone("web-1"))
	// Another replica, reported only now: not a replacement, the stuck age is not doubled.
	pullFailed(t, e, sibling, image)
	waitEvent(t, e, "Pod", ns, "web-sibling", v1alpha1.EventImagePullMissedRouting, "once failing for 2s")
	eventually(t, "the sibling deleted", gone("web-sibling"))

	// The replacement, created while the webhook is still down: the same image fails again.
	second := stuckPod(t, e, ns, "web-2", image, owner, true)
	pullFailed(t, e, second, image)
	waitEvent(t, e, "Pod", ns, "web-2", v1alpha1.EventImagePullMissedRouting)
	time.Sleep(3 * time.Second)
	p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "web-2", metav1.GetOptions{})
	if err != nil || p.UID != second.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the replacement 3s after it was reported: %v, want it there (a second generation: the stuck age is doubled)", err)
	}
	eventually(t, "the replacement deleted after the doubled stuck age", gone("web-2"))
	// The report names the stuck age that applies.
	waitEvent(t, e, "Pod", ns, "web-2", v1alpha1.EventImagePullMissedRouting, "once failing for 4s")
}

// An ephemeral container (kubectl debug) failing to pull a routable image is reported, but its
// pod is never deleted for it: ephemeral containers are not in the pod template, so the
// replacement would not have it, and the pod deleted is one an operator is debugging, whose
// own containers run. The pod-deletes policies refuse such a delete or eviction too. A pod
// whose regular container fails the same way is evicted: the control.
func TestStuckEphemeralContainerDeletesNoPod(t *testing.T) {
	e, _, image, _, ns := stuckPodWorld(t)
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(true, time.Second)
	startSyncer(t, opts)

	debugged := stuckPod(t, e, ns, "debugged", "registry.invalid/app:1", replicaSet(t, e, ns, "debugged"), false)
	debugged.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: image}}}
	debugged, err := e.cs.CoreV1().Pods(ns).UpdateEphemeralContainers(t.Context(), debugged.Name, debugged, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	debugged.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debug", Image: image, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "connection refused"},
	}}}
	if debugged, err = e.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), debugged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pullFailed(t, e, debugged, image)
	control := stuckPod(t, e, ns, "control", image, replicaSet(t, e, ns, "control"), true)
	pullFailed(t, e, control, image)

	waitEvent(t, e, "Pod", ns, "debugged", v1alpha1.EventImagePullMissedRouting, `"debug"`)
	eventually(t, "the control pod deleted", func(ctx context.Context) error {
		if _, err := e.cs.CoreV1().Pods(ns).Get(ctx, "control", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // three stuck ages
	pullFailed(t, e, debugged, image)
	time.Sleep(time.Second)
	p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "debugged", metav1.GetOptions{})
	if err != nil || p.UID != debugged.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the pod being debugged: %v, want it untouched", err)
	}
	// The policies: the syncer may neither delete (had it the right) nor evict it.
	err = syncerDeleter(t).CoreV1().Pods(ns).Delete(t.Context(), "debugged", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "pod-deletes") {
		t.Errorf("the syncer deleting a running pod whose ephemeral container fails to pull: %v, want refused by the pod-deletes policy", err)
	}
	err = syncerClient(t).CoreV1().Pods(ns).EvictV1(t.Context(), eviction(debugged, true))
	if err == nil || !strings.Contains(err.Error(), "pod-deletes") {
		t.Errorf("the syncer evicting a running pod whose ephemeral container fails to pull: %v, want refused by the pod-deletes policies", err)
	}
}

// The events of the cluster are never held all at once: the reflector's own pager and its
// watch-list temporary store (client-go's WatchListClient, on by default) keep every matching
// event until the list ends, and core/v1 events have no size limit but etcd's, so an author of
// large forged events chose the syncer's memory at each (re)list. The syncer lists by pages of
// at most 50, observing each page as it comes, and never asks for a watch-list. A missed pull
// whose event is behind 120 others, listed before the syncer started, is still reported.
func TestMissedPullEventsAreListedByPages(t *testing.T) {
	e := harness(t)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, candidate := routedApp(t, e, n, live, nil)
	ns := createNamespace(t, e, nil)
	for i := range 120 {
		pullFailed(t, e, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gone-%d", i)}}, image)
	}
	pod := stuckPod(t, e, ns, "web", image, nil, true)
	pullFailed(t, e, pod, image)

	var mu sync.Mutex
	var lists, watchLists []string
	cfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/api/v1/events") {
				mu.Lock()
				q := req.URL.Query()
				switch {
				case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
					watchLists = append(watchLists, req.URL.RawQuery)
				case q.Get("watch") != "true":
					lists = append(lists, req.URL.RawQuery)
				}
				mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	}
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(false, time.Second)
	startSyncerWith(t, opts, cfg, nil)

	waitEvent(t, e, "Pod", ns, "web", v1alpha1.EventImagePullMissedRouting, candidate)
	mu.Lock()
	defer mu.Unlock()
	if len(watchLists) > 0 {
		t.Errorf("the syncer asked for a watch-list of events (every matching event held at once): %q", watchLists)
	}
	continued := 0
	for _, q := range lists {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		if l, err := strconv.Atoi(v.Get("limit")); err != nil || l <= 0 || l > 50 {
			t.Errorf("an events list of limit %q, want at most 50: %s", v.Get("limit"), q)
		}
		if v.Get("continue") != "" {
			continued++
		}
	}
	if continued < 2 {
		t.Errorf("%d continued events lists for more than 120 events, want the pages followed: %q", continued, lists)
	}
}
