package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
)

// startPodCache runs, as the syncer's ServiceAccount, a cache configured as the syncer's
// (syncer.CacheOptions), so a test reads the pods exactly as the syncer keeps them.
func startPodCache(t *testing.T) cache.Cache {
	t.Helper()
	scheme, err := syncer.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := syncer.CacheOptions(crns)
	opts.Scheme = scheme
	c, err := cache.New(cp.ConfigAsServiceAccount(crns, serviceAccount), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(t.Context(), &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !c.WaitForCacheSync(t.Context()) {
		t.Fatal("pod cache did not sync")
	}
	return c
}

// cachedPod waits until the cache holds the pod at its resource version, and returns it.
func cachedPod(t *testing.T, c cache.Cache, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	var got corev1.Pod
	eventually(t, "the cache holds pod "+p.Name+" at "+p.ResourceVersion, func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return err
		}
		if got.ResourceVersion != p.ResourceVersion {
			return fmt.Errorf("at %s", got.ResourceVersion)
		}
		return nil
	})
	return &got
}

// A pod author decides nothing of the syncer's memory. A pod with a true record, ~2,000
// labels, a 250 KiB kuik.enix.io/ annotation and a 512 KiB image, admitted by the API server,
// is more than kuik could have written: it counts as not rewritten (no Secret for its record)
// and the cache keeps a stub of it (name, namespace, resource version). An honest pod next to
// it gets its entry, and is kept with its records, labels and rewritten container only.
func TestFatPodCountsAsNotRewrittenAndIsAStub(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.a": "a:pw"}))
	ia := testutil.NewImageAlternative(n).
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	ns := createNamespace(t, e, nil)
	author := podAuthor(t, e, n+"-author", ns)
	startSyncer(t, syncerConfig())
	podCache := startPodCache(t)

	by := "ImageAlternative/" + n
	record := map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}
	images := map[string]string{"c": "registry.a/acme/foo:v1"}
	createPodAs(t, author, testutil.FatPod(rewrittenPod(ns, "fat", images, record)))
	secretName := "kuik-inject-imagealternative-" + n
	absentFor(t, e, ns, secretName, 2*time.Second)

	honest := rewrittenPod(ns, "honest", images, record)
	honest.Labels["app"] = "web"
	honest.Annotations["kuik.enix.io/reason"] = `{"c":"OnFailure"}`
	honest.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	createPodAs(t, author, honest)
	secretHolds(t, e, ns, secretName, map[string]string{"registry.a/acme/foo": "a:pw"})

	fat, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "fat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fat.Labels) < 2000 || len(fat.Spec.Containers[1].Image) < 512<<10 {
		t.Fatalf("the API server admitted the fat pod with %d labels and an image of %d bytes", len(fat.Labels), len(fat.Spec.Containers[1].Image))
	}
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fat", ResourceVersion: fat.ResourceVersion}}
	if diff := cmp.Diff(want, cachedPod(t, podCache, fat)); diff != "" {
		t.Errorf("cached fat pod (-want +got):\n%s", diff)
	}

	got, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "honest", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: "honest", ResourceVersion: got.ResourceVersion, CreationTimestamp: got.CreationTimestamp,
			Labels: map[string]string{"kuik.enix.io/rewritten": "true", "app": "web"},
			Annotations: map[string]string{
				"kuik.enix.io/rewritten-by":    `{"c":"` + by + `"}`,
				"kuik.enix.io/original-images": `{"c":"quay.io/acme/foo:v1"}`,
			},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.a/acme/foo:v1"}}},
		Status: corev1.PodStatus{Phase: got.Status.Phase},
	}
	if diff := cmp.Diff(want, cachedPod(t, podCache, got)); diff != "" {
		t.Errorf("cached honest pod (-want +got):\n%s", diff)
	}
}

// pairAdds reads how many pairs the syncer's work queue has been given (the process-wide
// workqueue_adds_total of the queue named secret-syncer).
func pairAdds(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "workqueue_adds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "secret-syncer" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("no workqueue_adds_total for the secret-syncer queue")
	return 0
}

// A pod re-annotated in a loop with invented names queues nothing for them: neither records
// of containers the pod lacks nor records naming resources that do not exist reach the work
// queue (before, each update queued one pair per invented name). The real record keeps
// working: a resource created afterwards under one of the names finds the pod.
func TestReannotatedPodQueuesNoInventedPair(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.a": "a:pw"}))
	real := testutil.NewImageAlternative(n).
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &real)
	ns := createNamespace(t, e, nil)
	startSyncer(t, syncerConfig())

	by := "ImageAlternative/" + n
	images := map[string]string{"c": "registry.a/acme/foo:v1"}
	containers := make([]string, 30)
	for i := range containers {
		containers[i] = fmt.Sprintf("d%02d", i)
		images[containers[i]] = "registry.b/mirror/quay.io/acme/bar:v1"
	}
	pod := rewrittenPod(ns, "loop", images, map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}})
	if _, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secretName := "kuik-inject-imagealternative-" + n
	secretHolds(t, e, ns, secretName, map[string]string{"registry.a/acme/foo": "a:pw"})

	// annotate writes the records of the real container and of the invented ones.
	annotate := func(round int, invented map[string]string) {
		t.Helper()
		by := map[string]string{"c": by}
		orig := map[string]string{"c": "quay.io/acme/foo:v1"}
		for c, r := range invented {
			by[c], orig[c] = r, "quay.io/acme/bar:v1"
		}
		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			"kuik.enix.io/rewritten-by":    string(mustJSON(by)),
			"kuik.enix.io/original-images": string(mustJSON(orig)),
		}}}
		b, err := json.Marshal(patch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cs.CoreV1().Pods(ns).Patch(t.Context(), "loop", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	// settled waits until the syncer has handled every pod event before now: pod events come in
	// order, so once a pod created now, in a namespace of its own, has its Secret, the loop's
	// events were handled.
	settled := func() {
		t.Helper()
		sentinel := createNamespace(t, e, nil)
		p := rewrittenPod(sentinel, "sentinel", map[string]string{"c": "registry.a/acme/foo:v1"},
			map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}})
		if _, err := e.cs.CoreV1().Pods(sentinel).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		secretHolds(t, e, sentinel, secretName, map[string]string{"registry.a/acme/foo": "a:pw"})
	}
	settled()

	const rounds = 20
	for _, phase := range []struct {
		what   string
		invent func(round int) map[string]string
	}{
		{"containers the pod lacks", func(round int) map[string]string {
			m := map[string]string{}
			for i := range 300 {
				m[fmt.Sprintf("ghost-%03d", i)] = fmt.Sprintf("ImageAlternative/invented-%d-%d", round, i)
			}
			return m
		}},
		{"resources that do not exist", func(round int) map[string]string {
			m := map[string]string{}
			for i, c := range containers {
				m[c] = fmt.Sprintf("ImageMirror/invented-%d-%d", round, i)
			}
			return m
		}},
	} {
		before := pairAdds(t)
		for round := range rounds {
			annotate(round, phase.invent(round))
		}
		settled()
		// The real pair, re-decided for each update at most twice (the debounce's leading
		// and trailing edges), and the sentinel's pairs.
		added := pairAdds(t) - before
		t.Logf("%s: %d updates queued %.0f pairs", phase.what, rounds, added)
		if added > 3*rounds+10 {
			t.Errorf("%s: %d updates queued %.0f pairs, want at most %d: the invented names were queued", phase.what, rounds, added, 3*rounds+10)
		}
	}
	// The records of existing containers naming a resource that does not exist yet stay in
	// the cache: the resource, once created, finds the pod.
	putSecret(t, e, pullSecret(n+"-late-creds", map[string]string{"registry.b": "b:pw"}))
	late := testutil.NewImageMirror(fmt.Sprintf("invented-%d-0", rounds-1), "registry.b/mirror/").SecretRef(n + "-late-creds").Build()
	create(t, e, &late)
	secretHolds(t, e, ns, "kuik-inject-imagemirror-"+late.Name, map[string]string{"registry.b/mirror": "b:pw"})
}
