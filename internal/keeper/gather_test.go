package keeper

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const (
	appImageID = "docker.io/library/nginx@sha256:0000000000000000000000000000000000000000000000000000000000000001"
	initImage  = "busybox:1.37"
)

func podTemplate(app string, images ...string) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}}
	t.Spec.InitContainers = []corev1.Container{{Name: "init", Image: initImage}}
	for i, img := range images {
		t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	return t
}

func jobTemplate(app string, images ...string) corev1.PodTemplateSpec {
	t := podTemplate(app, images...)
	t.Spec.RestartPolicy = corev1.RestartPolicyNever
	return t
}

func TestGatherReadsLivePodsNamespacesTemplatesAndKeepMirrors(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	ns := k.namespace(t, map[string]string{"team": "a"})
	_, g := k.startCache(t, release)

	// Pods: a running one with an init container, kuik's records and a foreign annotation; a
	// Succeeded one; one being deleted (held by a finalizer).
	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "running", Namespace: ns, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				v1alpha1.AnnotationOriginalImages:           `{"app":"nginx:1.27"}`,
				v1alpha1.AnnotationRewrittenBy:              `{"app":"ImageMirror/m"}`,
				"kubectl.kubernetes.io/last-applied-config": strings.Repeat("x", 4096),
			},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: initImage}},
			Containers:     []corev1.Container{{Name: "app", Image: "mirror.example/docker.io/library/nginx:1.27"}, {Name: "side", Image: "quay.io/acme/side:v1"}},
		},
	}
	done := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "done:1"}}},
	}
	deleting := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "deleting", Namespace: ns, Finalizers: []string{"kuik.enix.io/test"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "deleting:1"}}},
	}
	for _, p := range []*corev1.Pod{running, done, deleting} {
		if err := k.cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	running.Status = corev1.PodStatus{
		Phase:                 corev1.PodRunning,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Image: "docker.io/library/busybox:1.37", ImageID: "docker.io/library/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000002"}},
		ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", Image: "mirror.example/docker.io/library/nginx:1.27", ImageID: appImageID}},
	}
	done.Status.Phase = corev1.PodSucceeded
	for _, p := range []*corev1.Pod{running, done} {
		if err := k.cl.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.cl.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.cl.Patch(ctx, deleting, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})

	// Templates: a scaled-to-zero Deployment's ReplicaSet, a StatefulSet, a DaemonSet, a Job
	// and a suspended CronJob.
	objs := []client.Object{
		&appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rs"}},
				Template: podTemplate("rs", "rs:1"),
			},
		},
		&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sts"}},
				Template: podTemplate("sts", "sts:1"),
			},
		},
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
				Template: podTemplate("ds", "ds:1", "ds-side:1"),
			},
		},
		&batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: ns},
			Spec:       batchv1.JobSpec{Suspend: ptr.To(true), Template: jobTemplate("job", "job:1")},
		},
		&batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
			Spec: batchv1.CronJobSpec{
				Schedule: "0 3 * * *", Suspend: ptr.To(true),
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: jobTemplate("cron", "cron:1")}},
			},
		},
	}
	for _, o := range objs {
		if err := k.cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}

	// Routing: a keep-enabled mirror, one that only routes, an alternative with an insecure
	// entry.
	prefix := ns
	keepMirror := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-keep"},
		Spec: v1alpha1.ImageMirrorSpec{
			Destination: v1alpha1.MirrorDestination{Path: "mirror.example/", Insecure: true},
			Keep: &v1alpha1.MirrorKeep{
				Retention:      &metav1.Duration{Duration: 2 * time.Hour},
				CountTemplates: ptr.To(false),
				PrivateSources: v1alpha1.PrivateSourcesAllow,
				Push:           &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: "push"}}},
			},
		},
	}
	routeOnly := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-route"},
		Spec:       v1alpha1.ImageMirrorSpec{Destination: v1alpha1.MirrorDestination{Path: "route.example:5000/"}},
	}
	alt := &v1alpha1.ImageAlternative{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-alt"},
		Spec: v1alpha1.ImageAlternativeSpec{Alternatives: []v1alpha1.Alternative{
			{Repository: "nginx"},
			{Repository: "plain.example/acme/nginx", Insecure: true},
		}},
	}
	for _, o := range []client.Object{keepMirror, routeOnly, alt} {
		if err := k.cl.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
		t.Cleanup(func() { _ = k.cl.Delete(ctx, o) })
	}

	wantPods := []keep.Pod{{
		Namespace: ns, Name: "running", Labels: labels.Set{"app": "web"},
		Annotations: map[string]string{
			v1alpha1.AnnotationOriginalImages: `{"app":"nginx:1.27"}`,
			v1alpha1.AnnotationRewrittenBy:    `{"app":"ImageMirror/m"}`,
		},
		Containers: []keep.Container{
			{Name: "init", Image: initImage, ImageID: "docker.io/library/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000002", StatusImage: "docker.io/library/busybox:1.37"},
			{Name: "app", Image: "mirror.example/docker.io/library/nginx:1.27", ImageID: appImageID, StatusImage: "mirror.example/docker.io/library/nginx:1.27"},
			{Name: "side", Image: "quay.io/acme/side:v1"},
		},
	}}
	wantTemplates := []keep.Template{
		{Kind: keep.KindCronJob, Namespace: ns, Name: "nightly", Labels: labels.Set{"app": "cron"}, Images: []string{initImage, "cron:1"}},
		{Kind: keep.KindDaemonSet, Namespace: ns, Name: "agent", Labels: labels.Set{"app": "ds"}, Images: []string{initImage, "ds:1", "ds-side:1"}},
		// The API server adds the job's own labels to its template.
		{Kind: keep.KindJob, Namespace: ns, Name: "once", Labels: objs[3].(*batchv1.Job).Spec.Template.Labels, Images: []string{initImage, "job:1"}},
		{Kind: keep.KindReplicaSet, Namespace: ns, Name: "web-1", Labels: labels.Set{"app": "rs"}, Images: []string{initImage, "rs:1"}},
		{Kind: keep.KindStatefulSet, Namespace: ns, Name: "db", Labels: labels.Set{"app": "sts"}, Images: []string{initImage, "sts:1"}},
	}
	wantMirror := keep.Mirror{Name: prefix + "-keep", Destination: "mirror.example/", Retention: 2 * time.Hour, CountTemplates: false, AllowPrivateSources: true}

	var in Inputs
	eventuallyOK(t, func() error {
		var err error
		if in, err = g.Gather(ctx); err != nil {
			return err
		}
		pods := slices.DeleteFunc(slices.Clone(in.Snapshot.Pods), func(p keep.Pod) bool { return p.Namespace != ns })
		if d := cmp.Diff(wantPods, pods); d != "" {
			return fmt.Errorf("pods (-want +got):\n%s", d)
		}
		templates := slices.DeleteFunc(slices.Clone(in.Snapshot.Templates), func(t keep.Template) bool { return t.Namespace != ns })
		if d := cmp.Diff(wantTemplates, templates); d != "" {
			return fmt.Errorf("templates (-want +got):\n%s", d)
		}
		if _, ok := in.Specs[keepMirror.Name]; !ok {
			return fmt.Errorf("the keep-enabled mirror is not gathered yet: %v", in.Mirrors)
		}
		for _, h := range []string{"route.example:5000", "plain.example"} {
			if _, ok := in.DeclaredHosts[h]; !ok {
				return fmt.Errorf("the resource declaring %s is not gathered yet", h)
			}
		}
		return nil
	})

	if in.Index == nil || in.Index.Len() == 0 {
		t.Errorf("no routing index: %v", in.Index)
	}
	if d := cmp.Diff(labels.Set{"team": "a", corev1.LabelMetadataName: ns}, in.Snapshot.Namespaces[ns]); d != "" {
		t.Errorf("namespace labels (-want +got):\n%s", d)
	}
	i := slices.IndexFunc(in.Mirrors, func(m keep.Mirror) bool { return m.Name == wantMirror.Name })
	got := in.Mirrors[i]
	if got.Selects == nil || !got.Selects(nil, nil) {
		t.Errorf("the mirror's Selects does not select a pod its empty selectors select")
	}
	got.Selects = nil
	if d := cmp.Diff(wantMirror, got); d != "" {
		t.Errorf("mirror (-want +got):\n%s", d)
	}
	if slices.ContainsFunc(in.Mirrors, func(m keep.Mirror) bool { return m.Name == routeOnly.Name }) || in.Specs[routeOnly.Name] != nil {
		t.Errorf("a mirror without spec.keep is gathered: %v", in.Mirrors)
	}
	for _, h := range []string{"mirror.example", "route.example:5000", "index.docker.io", "plain.example"} {
		if _, ok := in.DeclaredHosts[h]; !ok {
			t.Errorf("host %s not declared: %v", h, in.DeclaredHosts)
		}
	}
	for h, want := range map[string]bool{"mirror.example": true, "plain.example": true, "route.example:5000": false, "index.docker.io": false} {
		if _, got := in.InsecureHosts[h]; got != want {
			t.Errorf("host %s insecure: %t, want %t", h, got, want)
		}
	}
	if !in.Safety.Synced || in.Safety.ListFailed {
		t.Errorf("safety %+v, want synced and no list failed", in.Safety)
	}
}

func TestTheCacheHoldsOnlyKuikAnnotationsOfPods(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	ns := k.namespace(t, nil)
	c, g := k.startCache(t, release)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Annotations: map[string]string{
			v1alpha1.AnnotationReason: `{"app":"Always"}`,
			"example.com/big":         strings.Repeat("y", 8192),
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx", Env: []corev1.EnvVar{{Name: "SECRET", Value: "v"}}}}},
	}
	if err := k.cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	st, err := g.store(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	var cached any
	eventuallyOK(t, func() error {
		var ok bool
		if cached, ok, err = st.GetByKey(ns + "/p"); err != nil {
			return err
		}
		if !ok {
			return errors.New("not cached yet")
		}
		return nil
	})
	want := &cachedPod{
		cachedMeta:  cachedMeta{Name: "p", Namespace: ns, ResourceVersion: cached.(*cachedPod).ResourceVersion},
		Annotations: &stringMap{m: map[string]string{v1alpha1.AnnotationReason: `{"app":"Always"}`}},
		Phase:       corev1.PodPending,
	}
	got := cached.(*cachedPod)
	if d := cmp.Diff(want, got, cmp.AllowUnexported(cachedPod{}, stringMap{}), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Containers" }, cmp.Ignore())); d != "" {
		t.Errorf("cached pod (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]keep.Container{{Name: "app", Image: "nginx"}}, []keep.Container{got.Containers[0].container()}); d != "" || len(got.Containers) != 1 {
		t.Errorf("cached containers (-want +got):\n%s", d)
	}
	// The client's reader cannot list the compact pods: nothing but Gather reads them.
	if err := c.List(ctx, &corev1.PodList{}); err == nil {
		t.Error("listing pods through the cache's reader succeeded")
	}
}

func TestTheCacheRefusesSecretsAndConfigMapsOfOtherNamespaces(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	other := k.namespace(t, nil)
	c, _ := k.startCache(t, release)
	for _, ns := range []string{release, other} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, StringData: map[string]string{"k": "v"}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns}}
		for _, o := range []client.Object{s, cm} {
			if err := k.cl.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventuallyOK(t, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: release, Name: "s"}, &corev1.Secret{}); err != nil {
			return err
		}
		return c.Get(ctx, client.ObjectKey{Namespace: release, Name: "cm"}, &corev1.ConfigMap{})
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: "s"}, &corev1.Secret{}); err == nil {
		t.Error("read a Secret of another namespace")
	}
	if err := c.List(ctx, &corev1.SecretList{}, client.InNamespace(other)); err == nil {
		t.Error("listed the Secrets of another namespace")
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: "cm"}, &corev1.ConfigMap{}); err == nil {
		t.Error("read a ConfigMap of another namespace")
	}
	var all corev1.SecretList
	if err := c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Items {
		if s.Namespace != release {
			t.Errorf("the cache holds Secret %s/%s", s.Namespace, s.Name)
		}
	}
}

func TestGatherSaysWhenTheCacheIsNotSyncedAndAListFailed(t *testing.T) {
	k := newKube(t)
	release := k.namespace(t, nil)
	// An identity with no rights: every list is forbidden.
	_, g := k.startCacheAs(t, k.cp.ConfigAs("kuik-nobody"), release)
	eventuallyOK(t, func() error {
		in, err := g.Gather(t.Context())
		if err != nil {
			return err
		}
		if in.Safety.Synced || !in.Safety.ListFailed {
			return fmt.Errorf("safety %+v, want unsynced and a failed list", in.Safety)
		}
		if len(in.Snapshot.Pods) != 0 || len(in.Mirrors) != 0 {
			return fmt.Errorf("an unsynced cache gave %d pods and %d mirrors", len(in.Snapshot.Pods), len(in.Mirrors))
		}
		return nil
	})
}
