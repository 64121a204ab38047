package keeper

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// realisticPod is pod i of a cluster of 100 namespaces running 5,000 images: an init container,
// an app and a sidecar, four labels, kuik's records on half of them and a kubectl annotation.
func realisticPod(i int) *corev1.Pod {
	app := i % 2500
	image := fmt.Sprintf("registry.example/team-%d/app-%d:v1.%d", app%50, app, app%7)
	side := fmt.Sprintf("registry.example/sidecars/proxy-%d:v2", app)
	id := func(img string) string {
		repo, _, _ := strings.Cut(img, ":")
		return fmt.Sprintf("%s@sha256:%064x", repo, len(img)*7919+app)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("app-%d-7d9f8b6c5d-%05d", app, i),
			Namespace:       fmt.Sprintf("team-%d", i%100),
			ResourceVersion: fmt.Sprint(100000 + i),
			UID:             "5f0e1c9a-0000-4000-8000-000000000000",
			Labels: map[string]string{
				"app.kubernetes.io/name": fmt.Sprintf("app-%d", app), "pod-template-hash": "7d9f8b6c5d",
				"team": fmt.Sprintf("team-%d", app%50), "version": "v1",
			},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1024)},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.37", Command: []string{"sh", "-c", "true"}}},
			Containers: []corev1.Container{
				{Name: "app", Image: image, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
				{Name: "proxy", Image: side},
			},
		},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Image: "docker.io/library/busybox:1.37", ImageID: id("docker.io/library/busybox:1.37")}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Image: image, ImageID: id(image)},
				{Name: "proxy", Image: side, ImageID: id(side)},
			},
		},
	}
	if i%2 == 0 {
		p.Annotations[v1alpha1.AnnotationOriginalImages] = fmt.Sprintf(`{"app":"quay.io/team/app-%d:v1"}`, app)
		p.Annotations[v1alpha1.AnnotationRewrittenBy] = `{"app":"ImageAlternative/quay"}`
	}
	return p
}

// TestFiftyThousandPodsFitTheMemoryBudget measures what the pod informer's store holds for
// 50,000 pods: the keeper's RSS budget for them is 150 MiB, with the Go heap growing to twice
// its live size between collections.
func TestFiftyThousandPodsFitTheMemoryBudget(t *testing.T) {
	const pods = 50000
	store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range pods {
		obj, err := TransformPod(realisticPod(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d pods: %.1f MiB live in the store, %d bytes a pod", pods, float64(live)/(1<<20), live/pods)
	if limit := int64(40 << 20); live > limit {
		t.Errorf("%d pods hold %.1f MiB, over %d MiB", pods, float64(live)/(1<<20), limit>>20)
	}
	runtime.KeepAlive(store)
}

func TestTransformsKeepWhatKeepReadsAndAreIdempotent(t *testing.T) {
	p := realisticPod(0)
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1.37"}}}
	p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "debug", Image: "docker.io/library/busybox:1.37", ImageID: "docker.io/library/busybox@sha256:" + strings.Repeat("0", 64)}}
	now := metav1.Now()
	p.DeletionTimestamp = &now
	p.Annotations[v1alpha1.AnnotationDryRun] = strings.Repeat("z", routing.MaxRecordBytes+1)
	obj, err := TransformPod(p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := TransformPod(obj)
	if err != nil || again != obj {
		t.Fatalf("a cached pod transformed again: %v, %v", again, err)
	}
	got := obj.(*cachedPod)
	var containers []keep.Container
	for i := range got.Containers {
		containers = append(containers, got.Containers[i].container())
	}
	wantContainers := []keep.Container{
		{Name: "init", Image: "busybox:1.37", ImageID: p.Status.InitContainerStatuses[0].ImageID, StatusImage: "docker.io/library/busybox:1.37"},
		{Name: "app", Image: p.Spec.Containers[0].Image, ImageID: p.Status.ContainerStatuses[0].ImageID, StatusImage: p.Spec.Containers[0].Image},
		{Name: "proxy", Image: p.Spec.Containers[1].Image, ImageID: p.Status.ContainerStatuses[1].ImageID, StatusImage: p.Spec.Containers[1].Image},
		{Name: "debug", Image: "busybox:1.37", ImageID: p.Status.EphemeralContainerStatuses[0].ImageID, StatusImage: "docker.io/library/busybox:1.37"},
	}
	if d := cmp.Diff(wantContainers, containers); d != "" {
		t.Errorf("containers (-want +got):\n%s", d)
	}
	wantAnnotations := map[string]string{
		v1alpha1.AnnotationOriginalImages: p.Annotations[v1alpha1.AnnotationOriginalImages],
		v1alpha1.AnnotationRewrittenBy:    p.Annotations[v1alpha1.AnnotationRewrittenBy],
	}
	if d := cmp.Diff(wantAnnotations, got.Annotations.get()); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
	if got.live() || !got.Deleting {
		t.Error("a pod being deleted counts as live")
	}
	if key, err := toolscache.MetaNamespaceKeyFunc(got); err != nil || key != p.Namespace+"/"+p.Name {
		t.Errorf("store key %q, %v", key, err)
	}
	if _, err := TransformPod(&corev1.Secret{}); err == nil {
		t.Error("a Secret transformed as a pod")
	}

	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "i", Image: "init:1"}},
			Containers:     []corev1.Container{{Name: "c", Image: "app:1"}},
		},
	}
	meta := metav1.ObjectMeta{Name: "w", Namespace: "ns"}
	for kind, obj := range map[keep.TemplateKind]any{
		keep.KindReplicaSet:  &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Template: tmpl}},
		keep.KindStatefulSet: &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Template: tmpl}},
		keep.KindDaemonSet:   &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Template: tmpl}},
		keep.KindJob:         &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: tmpl}},
		keep.KindCronJob:     &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}},
	} {
		out, err := transformTemplate(kind)(obj)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := transformTemplate(kind)(out); err != nil || again != out {
			t.Errorf("%s: a cached template transformed again: %v, %v", kind, again, err)
		}
		want := keep.Template{Kind: kind, Namespace: "ns", Name: "w", Labels: map[string]string{"app": "x"}, Images: []string{"init:1", "app:1"}}
		if d := cmp.Diff(want, out.(*cachedTemplate).template()); d != "" {
			t.Errorf("%s (-want +got):\n%s", kind, d)
		}
	}
}

func TestHostOfReadsPathsAsTheKubeletDoes(t *testing.T) {
	for path, want := range map[string]string{
		"nginx":                          "index.docker.io",
		"docker.io/library/nginx":        "index.docker.io",
		"quay.io/acme/":                  "quay.io",
		"registry.tld":                   "registry.tld",
		"registry.local:5000/":           "registry.local:5000",
		"mirror.example/kept/":           "mirror.example",
		"localhost:5000/acme/app":        "localhost:5000",
		"not a path":                     "",
		"UPPER.example/Invalid/Path:tag": "",
	} {
		if got := hostOf(path); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestListFailuresHoldForTwoMinutes(t *testing.T) {
	clock := time.Unix(0, 0)
	f := &listFailures{now: func() time.Time { return clock }}
	if f.failed() {
		t.Fatal("failed before any failure")
	}
	f.record(apierrors.NewResourceExpired("too old resource version"))
	f.record(io.EOF)
	if f.failed() {
		t.Error("an expired or closed watch counts as a failed list")
	}
	f.record(apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("denied")))
	if !f.failed() {
		t.Error("a forbidden list does not count")
	}
	clock = clock.Add(time.Minute)
	if !f.failed() {
		t.Error("a failure a minute ago does not count")
	}
	clock = clock.Add(2 * time.Minute)
	if f.failed() {
		t.Error("a failure three minutes ago still counts")
	}
}
