package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const fbDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fallbackOptions is the syncer's identity with a short fallback delay.
func fallbackOptions(delay time.Duration) *syncer.Options {
	opts := syncerConfig()
	opts.FallbackDelay = delay
	return opts
}

// routingStatus reads a resource's status from the API server.
func routingStatus(ctx context.Context, e env, obj client.Object) (*v1alpha1.RoutingStatus, error) {
	switch o := obj.(type) {
	case *v1alpha1.ImageAlternative:
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, clientKey(o.Name), &got); err != nil {
			return nil, err
		}
		return &got.Status, nil
	case *v1alpha1.ImageMirror:
		var got v1alpha1.ImageMirror
		if err := e.cl.Get(ctx, clientKey(o.Name), &got); err != nil {
			return nil, err
		}
		return &got.Status.RoutingStatus, nil
	}
	return nil, fmt.Errorf("unexpected %T", obj)
}

// liveFallbacks is what a status says of the live fallbacks.
type liveFallbacks struct {
	Active      []v1alpha1.ActiveFallback
	Total, Pods int32
}

func fallbacksOf(s *v1alpha1.RoutingStatus) liveFallbacks {
	return liveFallbacks{Active: s.ActiveFallbacks, Total: s.Fallbacks, Pods: s.FallbackPods}
}

// fallbacksAre waits until the resource's status holds exactly these live fallbacks.
func fallbacksAre(t *testing.T, e env, obj client.Object, want liveFallbacks) *v1alpha1.RoutingStatus {
	t.Helper()
	var last *v1alpha1.RoutingStatus
	eventually(t, fmt.Sprintf("%s holds fallbacks %+v", obj.GetName(), want), func(ctx context.Context) error {
		s, err := routingStatus(ctx, e, obj)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, fallbacksOf(s), cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })); diff != "" {
			return fmt.Errorf("(-want +got):\n%s", diff)
		}
		last = s
		return nil
	})
	return last
}

// fallbackGauge reads kuik_secret_syncer_fallback_pods{kind,name}; false when the series does
// not exist.
func fallbackGauge(t *testing.T, kind, name string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.FallbackPods)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["kind"] == kind && l["name"] == name {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func gaugeIs(t *testing.T, kind, name string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("fallback gauge of %s/%s is %v", kind, name, want), func(context.Context) error {
		if v, ok := fallbackGauge(t, kind, name); !ok || v != want {
			return fmt.Errorf("is %v (present %v)", v, ok)
		}
		return nil
	})
}

// createdPod creates a pod and returns it as the API server stored it.
func createdPod(t *testing.T, e env, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := e.cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func deletePod(t *testing.T, e env, p *corev1.Pod) {
	t.Helper()
	if err := e.cs.CoreV1().Pods(p.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func oldest(pods ...*corev1.Pod) metav1.Time {
	t := pods[0].CreationTimestamp
	for _, p := range pods[1:] {
		if p.CreationTimestamp.Before(&t) {
			t = p.CreationTimestamp
		}
	}
	return t
}

// The syncer tells, on each resource, which repositories its live pods are routed away from
// and to: one item per (original, routedTo) repository pair, a tag and a digest of one
// repository counting together, with the number of live pods and the creation time of the
// oldest; the total of pairs and of pods; and the gauge. Only records the webhook could have
// written count: a forged one (an original the resource does not cover), a finished pod, a
// dry-run resource's and a policy-None mirror's records count for nothing. Pods going away
// bring the counts down, to none; a resource going away takes its gauge with it.
func TestLiveFallbacksCountVerifiedLivePods(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := testutil.NewImageAlternative(n).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	create(t, e, &ia)
	im := testutil.NewImageMirror(n, "registry.local/mirror/").NamespaceSelector(map[string]string{"scope": n}).Build()
	create(t, e, &im)
	dry := testutil.NewImageAlternative(n + "-dry").Repository("quay.io/acme/bar").Repository("registry.local/acme/bar").Build()
	dry.Spec.DryRun = true
	create(t, e, &dry)
	none := testutil.NewImageMirror(n+"-none", "registry.local/none/").Policy(v1alpha1.RewritePolicyNone).Build()
	create(t, e, &none)

	byIA, byIM := "ImageAlternative/"+n, "ImageMirror/"+n
	// The pods exist before the syncer starts: its first computation, which sets the gauge of
	// every resource, sees them all.
	p1 := createdPod(t, e, rewrittenPod(ns, "tag", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v1", byIA}}))
	p2 := createdPod(t, e, rewrittenPod(ns, "digest", map[string]string{
		"c": "registry.local/acme/foo@" + fbDigest,
		"m": "registry.local/mirror/docker.io/library/nginx:1.27",
	}, map[string]rewrite{"c": {"quay.io/acme/foo@" + fbDigest, byIA}, "m": {"nginx:1.27", byIM}}))
	createdPod(t, e, rewrittenPod(ns, "forged", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"docker.io/library/nginx:1", byIA}}))
	done := createdPod(t, e, rewrittenPod(ns, "done", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v1", byIA}}))
	done.Status.Phase = corev1.PodSucceeded
	if _, err := e.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createdPod(t, e, rewrittenPod(ns, "dry", map[string]string{"c": "registry.local/acme/bar:v1"},
		map[string]rewrite{"c": {"quay.io/acme/bar:v1", "ImageAlternative/" + dry.Name}}))
	createdPod(t, e, rewrittenPod(ns, "none", map[string]string{"c": "registry.local/none/docker.io/library/nginx:1"},
		map[string]rewrite{"c": {"nginx:1", "ImageMirror/" + none.Name}}))

	startSyncer(t, fallbackOptions(200*time.Millisecond))

	fallbacksAre(t, e, &ia, liveFallbacks{Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 2, Since: oldest(p1, p2)},
	}, Total: 1, Pods: 2})
	fallbacksAre(t, e, &im, liveFallbacks{Active: []v1alpha1.ActiveFallback{
		{Original: "docker.io/library/nginx", RoutedTo: "registry.local/mirror/docker.io/library/nginx", Pods: 1, Since: p2.CreationTimestamp},
	}, Total: 1, Pods: 1})
	gaugeIs(t, "ImageAlternative", n, 2)
	gaugeIs(t, "ImageMirror", n, 1)
	// Computed (the gauge is set), and nothing counts.
	gaugeIs(t, "ImageAlternative", dry.Name, 0)
	gaugeIs(t, "ImageMirror", none.Name, 0)
	fallbacksAre(t, e, &dry, liveFallbacks{})
	fallbacksAre(t, e, &none, liveFallbacks{})

	deletePod(t, e, p2)
	fallbacksAre(t, e, &ia, liveFallbacks{Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 1, Since: p1.CreationTimestamp},
	}, Total: 1, Pods: 1})
	fallbacksAre(t, e, &im, liveFallbacks{})
	gaugeIs(t, "ImageMirror", n, 0)
	deletePod(t, e, p1)
	fallbacksAre(t, e, &ia, liveFallbacks{})
	gaugeIs(t, "ImageAlternative", n, 0)

	if err := e.cl.Delete(t.Context(), &im); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted mirror's gauge is gone", func(context.Context) error {
		if v, ok := fallbackGauge(t, "ImageMirror", n); ok {
			return fmt.Errorf("still there, %v", v)
		}
		return nil
	})
}

// Pairs are ordered by pods, then original, then routedTo; at most 32 are listed, and
// fallbacks gives the whole number.
func TestLiveFallbacksListTheTop32(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, nil)
	ia := testutil.NewImageAlternative(n).Group("quay.io/acme/").Group("registry.local/acme/").Build()
	create(t, e, &ia)
	by := "ImageAlternative/" + n
	startSyncer(t, fallbackOptions(200*time.Millisecond))

	img := func(i int) (original, current string) {
		return fmt.Sprintf("quay.io/acme/x%02d:1", i), fmt.Sprintf("registry.local/acme/x%02d:1", i)
	}
	images, rewrites := map[string]string{}, map[string]rewrite{}
	for i := range 40 {
		o, c := img(i)
		container := fmt.Sprintf("c%02d", i)
		images[container], rewrites[container] = c, rewrite{o, by}
	}
	wide := createdPod(t, e, rewrittenPod(ns, "wide", images, rewrites))
	one := func(name string, i int) *corev1.Pod {
		o, c := img(i)
		return createdPod(t, e, rewrittenPod(ns, name, map[string]string{"c": c}, map[string]rewrite{"c": {o, by}}))
	}
	a, b, c := one("x05-a", 5), one("x05-b", 5), one("x17-a", 17)

	item := func(i int, pods int32, since metav1.Time) v1alpha1.ActiveFallback {
		return v1alpha1.ActiveFallback{Original: fmt.Sprintf("quay.io/acme/x%02d", i), RoutedTo: fmt.Sprintf("registry.local/acme/x%02d", i), Pods: pods, Since: since}
	}
	want := liveFallbacks{Total: 40, Pods: 4, Active: []v1alpha1.ActiveFallback{item(5, 3, oldest(wide, a, b)), item(17, 2, oldest(wide, c))}}
	for i := 0; len(want.Active) < 32; i++ {
		if i != 5 && i != 17 {
			want.Active = append(want.Active, item(i, 1, wide.CreationTimestamp))
		}
	}
	fallbacksAre(t, e, &ia, want)

	deletePod(t, e, wide)
	fallbacksAre(t, e, &ia, liveFallbacks{Total: 2, Pods: 3, Active: []v1alpha1.ActiveFallback{item(5, 2, oldest(a, b)), item(17, 1, c.CreationTimestamp)}})
}

// A flood of pod changes makes few status writes: 200 counted pods created, then deleted, as
// fast as the API server takes them, cost at most one write of the live fallbacks per
// FallbackDelay (plus the first and the last), each of the three fields changing; and a pod
// change that changes nothing of them writes nothing at all. Writes are counted on a watch of
// the resource: every write of the fallbacks is a new resource version whose fields differ.
func TestLiveFallbacksFloodMakesFewWrites(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, nil)
	ia := testutil.NewImageAlternative(n).Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	create(t, e, &ia)
	by := "ImageAlternative/" + n

	const delay = time.Second
	// The first computation finds no pod and writes nothing.
	unchanged := startSyncerCountingUnchanged(t, n, delay, "a first computation")

	history := watchFallbacks(t, e, n)
	writesSoFar := func() int { return len(history()) - 1 }

	start := time.Now()
	const count = 200
	pods := make([]*corev1.Pod, count)
	inParallel(t, count, func(i int) error {
		p := rewrittenPod(ns, fmt.Sprintf("p%03d", i), map[string]string{"c": "registry.local/acme/foo:v1"},
			map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}})
		got, err := e.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		pods[i] = got
		return err
	})
	first := oldest(pods...)
	fallbacksAre(t, e, &ia, liveFallbacks{Total: 1, Pods: count, Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: count, Since: first},
	}})

	// Nothing that counts changes: a computation runs and writes nothing.
	before, err := routingStatusVersion(t.Context(), e, n)
	if err != nil {
		t.Fatal(err)
	}
	seen := unchanged.Load()
	createdPod(t, e, rewrittenPod(ns, "forged", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"docker.io/library/nginx:1", by}}))
	eventually(t, "a computation after the forged pod", func(context.Context) error {
		if unchanged.Load() == seen {
			return errors.New("none yet")
		}
		return nil
	})
	if after, err := routingStatusVersion(t.Context(), e, n); err != nil || after != before {
		t.Errorf("resource version %s after a change that counts for nothing, was %s (err %v): something was written", after, before, err)
	}

	inParallel(t, count, func(i int) error {
		return e.cs.CoreV1().Pods(ns).Delete(t.Context(), pods[i].Name, metav1.DeleteOptions{})
	})
	fallbacksAre(t, e, &ia, liveFallbacks{})
	elapsed := time.Since(start)
	eventually(t, "the watch saw the last write", func(context.Context) error {
		if h := history(); len(h) < 2 || !cmp.Equal(h[len(h)-1], liveFallbacks{}) {
			return fmt.Errorf("seen %d states", len(h))
		}
		return nil
	})
	got := writesSoFar()
	bound := int(math.Ceil(float64(elapsed)/float64(delay))) + 2
	t.Logf("%d pod creates and %d deletes in %s: %d writes of the live fallbacks (bound %d)", count, count, elapsed.Round(time.Millisecond), got, bound)
	if got < 2 || got > bound {
		t.Errorf("%d writes of the live fallbacks for %d pod events in %s, want 2 to %d (one per %s window, plus the first and the last)", got, 2*count, elapsed, bound, delay)
	}
}

// watchFallbacks watches an ImageAlternative and returns the successive live fallbacks its
// status held, from the first event on: each change is one write of them.
func watchFallbacks(t *testing.T, e env, name string) (history func() []liveFallbacks) {
	t.Helper()
	wcl, err := client.NewWithWatch(cp.Config(), client.Options{Scheme: e.cl.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wcl.Watch(t.Context(), &v1alpha1.ImageAlternativeList{}, client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var (
		mu     sync.Mutex
		states []liveFallbacks
		first  = make(chan struct{})
	)
	go func() {
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*v1alpha1.ImageAlternative)
			if !ok || ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			mu.Lock()
			if cur := fallbacksOf(&o.Status); len(states) == 0 || !cmp.Equal(cur, states[len(states)-1]) {
				states = append(states, cur)
				if len(states) == 1 {
					close(first)
				}
			}
			mu.Unlock()
		}
	}()
	select {
	case <-first:
	case <-time.After(pollTimeout):
		t.Fatal("the watch of " + name + " sent nothing")
	}
	return func() []liveFallbacks {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(states)
	}
}

// startSyncerCountingUnchanged starts a syncer with the fallback delay and counts its
// computations of resource n's live fallbacks that found nothing to write; it returns once there
// is one (what names that wait).
func startSyncerCountingUnchanged(t *testing.T, n string, delay time.Duration, what string) *atomic.Int32 {
	t.Helper()
	var unchanged atomic.Int32
	startSyncerWith(t, fallbackOptions(delay), cp.ConfigAsServiceAccount(crns, serviceAccount), func(line string) {
		if strings.Contains(line, `"live fallbacks unchanged"`) && strings.Contains(line, `"name"="`+n+`"`) {
			unchanged.Add(1)
		}
	})
	eventually(t, what, func(context.Context) error {
		if unchanged.Load() == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	return &unchanged
}

func routingStatusVersion(ctx context.Context, e env, name string) (string, error) {
	var o v1alpha1.ImageAlternative
	if err := e.cl.Get(ctx, clientKey(name), &o); err != nil {
		return "", err
	}
	return o.ResourceVersion, nil
}

// inParallel runs fn for 0..n-1 on 8 goroutines, failing the test on the first error.
func inParallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int32
		errs = make(chan error, n)
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// The two writers of a resource's status keep each other's fields: the status writer's merge
// patch (conditions, entries, namespaces) leaves the live fallbacks as they are, and the
// fallbacks' patch leaves the rest.
func TestLiveFallbacksAndStatusKeepEachOthersFields(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, nil)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.local": "u:pw"}))
	ia := testutil.NewImageAlternative(n).Repository("quay.io/acme/foo").
		Repository("registry.local/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	by := "ImageAlternative/" + n
	history := watchFallbacks(t, e, n)
	startSyncer(t, fallbackOptions(200*time.Millisecond))

	p1 := createdPod(t, e, rewrittenPod(ns, "one", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
	secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{"registry.local/acme/foo": "u:pw"})
	one := liveFallbacks{Total: 1, Pods: 1, Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 1, Since: p1.CreationTimestamp},
	}}
	others := func(s *v1alpha1.RoutingStatus) string {
		ready := "none"
		for _, c := range s.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				ready = string(c.Status) + "/" + c.Reason
			}
		}
		return fmt.Sprintf("ready=%s entries=%d namespaces=%d", ready, s.Entries, s.Namespaces)
	}
	statusIs := func(wantFallbacks liveFallbacks, wantOthers string) {
		t.Helper()
		eventually(t, wantOthers, func(ctx context.Context) error {
			s, err := routingStatus(ctx, e, &ia)
			if err != nil {
				return err
			}
			if got := others(s); got != wantOthers {
				return fmt.Errorf("%s", got)
			}
			if diff := cmp.Diff(wantFallbacks, fallbacksOf(s), cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })); diff != "" {
				return fmt.Errorf("fallbacks (-want +got):\n%s", diff)
			}
			return nil
		})
	}
	statusIs(one, "ready=True/Synced entries=2 namespaces=1")

	// The status writer writes (Ready turns False) while the fallbacks are set: they stay.
	if err := e.cs.CoreV1().Secrets(crns).Delete(t.Context(), n+"-creds", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	statusIs(one, "ready=False/SecretNotFound entries=2 namespaces=1")

	// The fallbacks are written while the condition is False: it stays, and so do the counts.
	p2 := createdPod(t, e, rewrittenPod(ns, "two", map[string]string{"c": "registry.local/acme/foo:v2"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v2", by}}))
	two := liveFallbacks{Total: 1, Pods: 2, Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 2, Since: oldest(p1, p2)},
	}}
	statusIs(two, "ready=False/SecretNotFound entries=2 namespaces=1")

	// And once more the other way: the Secret is back, Ready turns True, the fallbacks stay.
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.local": "u:pw"}))
	statusIs(two, "ready=True/Synced entries=2 namespaces=1")

	// Never erased in between, even for a moment the syncer would have repaired.
	if diff := cmp.Diff([]liveFallbacks{{}, one, two}, history(), cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })); diff != "" {
		t.Errorf("successive live fallbacks (-want +got):\n%s", diff)
	}
}

// A new leader computes the same live fallbacks from the same pods (since is a creation time,
// not a time of observation), so a restart writes nothing.
func TestLiveFallbacksSurviveARestartWithoutAWrite(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, nil)
	ia := testutil.NewImageAlternative(n).Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").Build()
	create(t, e, &ia)
	by := "ImageAlternative/" + n
	p := createdPod(t, e, rewrittenPod(ns, "p", map[string]string{"c": "registry.local/acme/foo:v1"},
		map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
	stop := startSyncer(t, fallbackOptions(200*time.Millisecond))
	want := liveFallbacks{Total: 1, Pods: 1, Active: []v1alpha1.ActiveFallback{
		{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 1, Since: p.CreationTimestamp},
	}}
	fallbacksAre(t, e, &ia, want)
	stop()
	before, err := routingStatusVersion(t.Context(), e, n)
	if err != nil {
		t.Fatal(err)
	}

	startSyncerCountingUnchanged(t, n, 200*time.Millisecond, "the new leader's first computation")
	gaugeIs(t, "ImageAlternative", n, 1)
	if after, err := routingStatusVersion(t.Context(), e, n); err != nil || after != before {
		t.Errorf("resource version %s after the restart, was %s (err %v): the new leader wrote", after, before, err)
	}
	fallbacksAre(t, e, &ia, want)
}
