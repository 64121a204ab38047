package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const managedBy = "kuik-secret-syncer"

// Under Always the Secret lands in every namespace the namespaceSelector selects, before any
// pod, whatever the podSelector; a namespace leaving the scope keeps an emptied Secret.
func TestAlwaysPlacementFollowsNamespaceScope(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "q:pw", "registry.local:5000": "l:pw"}))
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"scope": n}).PodSelector(map[string]string{"app": "never-matches"}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").
		Repository("registry.local:5000/acme/foo").SecretRef(n + "-creds").
		Repository("ghcr.io/acme/foo").Build()
	create(t, e, &ia)
	in := createNamespace(t, e, map[string]string{"scope": n})
	out := createNamespace(t, e, nil)
	startSyncer(t, syncerConfig())

	secretName := "kuik-inject-imagealternative-" + n
	want := map[string]string{"quay.io/acme/foo": "q:pw", "registry.local:5000/acme/foo": "l:pw"}
	s := secretHolds(t, e, in, secretName, want)
	if s.Type != corev1.SecretTypeDockerConfigJson || s.Labels["app.kubernetes.io/managed-by"] != managedBy {
		t.Errorf("secret type %q labels %v", s.Type, s.Labels)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "ImageAlternative" || s.OwnerReferences[0].Name != n || s.OwnerReferences[0].UID != ia.UID {
		t.Errorf("ownerReferences = %+v, want the ImageAlternative", s.OwnerReferences)
	}
	if len(s.ManagedFields) != 1 || s.ManagedFields[0].Manager != managedBy || s.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managedFields = %+v, want one Apply by %s", s.ManagedFields, managedBy)
	}
	absentFor(t, e, out, secretName, time.Second)

	// The namespace enters the scope.
	label(t, e, out, map[string]string{"scope": n})
	secretHolds(t, e, out, secretName, want)
	// The first leaves it: the Secret stays, emptied.
	label(t, e, in, map[string]string{"scope": "elsewhere"})
	emptied := secretHolds(t, e, in, secretName, map[string]string{})
	if got := string(emptied.Data[corev1.DockerConfigJsonKey]); got != `{"auths":{}}` {
		t.Errorf("emptied secret holds %s, want {\"auths\":{}}", got)
	}

	eventually(t, "status", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&ia), &got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonSynced ||
			got.Status.ObservedGeneration != got.Generation || got.Status.Entries != 3 || got.Status.Namespaces != 1 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
}

func label(t *testing.T, e env, ns string, labels map[string]string) {
	t.Helper()
	b := fmt.Appendf(nil, `{"metadata":{"labels":%s}}`, mustJSON(labels))
	if _, err := e.cs.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Under OnFailure the Secret appears with the first rewritten pod, holds the entries the live
// pods use, and keeps an entry no pod uses any more for the retention (fake clock).
func TestOnFailureFollowsLivePodsWithRetention(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "q:pw", "registry.tld": "m:pw"}))
	ia := testutil.NewImageAlternative(n).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").
		Repository("quay.io/acme/bar").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	im := testutil.NewImageMirror(n, "registry.tld/mirror/").SecretRef(n + "-creds").Build()
	create(t, e, &im)
	ns := createNamespace(t, e, nil)

	clk := clocktesting.NewFakeClock(time.Now())
	opts := syncerConfig()
	opts.Clock = clk
	opts.ResyncPeriod = 500 * time.Millisecond // re-decides after the clock steps
	startSyncer(t, opts)

	secretName := "kuik-inject-imagealternative-" + n
	absentFor(t, e, ns, secretName, time.Second)

	createPod(t, e, rewrittenPod(ns, "p1", map[string]string{"app": "quay.io/acme/foo:v1", "side": "nginx"}, map[string]rewrite{"app": {"quay.io/acme/bar:v1", "ImageAlternative/" + n}}))
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "q:pw"})
	absentFor(t, e, ns, "kuik-inject-imagemirror-"+n, 500*time.Millisecond)

	createPod(t, e, rewrittenPod(ns, "p2", map[string]string{"app": "quay.io/acme/bar:v1", "m": "registry.tld/mirror/docker.io/library/redis:7"},
		map[string]rewrite{"app": {"quay.io/acme/foo:v1", "ImageAlternative/" + n}, "m": {"redis:7", "ImageMirror/" + n}}))
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "q:pw", "quay.io/acme/bar": "q:pw"})
	secretHolds(t, e, ns, "kuik-inject-imagemirror-"+n, map[string]string{"registry.tld/mirror": "m:pw"})

	// p1 goes: its entry stays for the retention, across resyncs.
	if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several resyncs
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "q:pw", "quay.io/acme/bar": "q:pw"})
	clk.Step(14 * time.Minute)
	time.Sleep(time.Second)
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "q:pw", "quay.io/acme/bar": "q:pw"})
	clk.Step(2 * time.Minute)
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/bar": "q:pw"})

	// p2 finishes: a finished pod is not live; after the retention the Secret is emptied.
	p2, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), "p2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2.Status.Phase = corev1.PodSucceeded
	if _, err := e.cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), p2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/bar": "q:pw"})
	clk.Step(16 * time.Minute)
	secretHolds(t, e, ns, secretName, map[string]string{})
	secretHolds(t, e, ns, "kuik-inject-imagemirror-"+n, map[string]string{})
}

func createPod(t *testing.T, e env, p *corev1.Pod) {
	t.Helper()
	if _, err := e.cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Each bad secretRef leaves its entry out with a reason and one event; the others are written.
func TestBadSecretRefsLeaveEntriesOutWithOneEventEach(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-good", map[string]string{"quay.io": "q:pw"}))
	putSecret(t, e, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n + "-opaque"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}})
	putSecret(t, e, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n + "-broken"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"quay.io":{"username":"u","password":"p"}},"HttpHeaders":{"X-Meta":1}}`)}})
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/missing").SecretRef(n + "-missing").
		Repository("quay.io/acme/opaque").SecretRef(n + "-opaque").
		Repository("quay.io/acme/broken").SecretRef(n + "-broken").
		Repository("ghcr.io/acme/nocred").SecretRef(n + "-good").
		Repository("quay.io/acme/good").SecretRef(n + "-good").
		Repository("quay.io/acme/provider").Provider("ecr").Inject(true).Build()
	create(t, e, &ia)
	ns := createNamespace(t, e, map[string]string{"scope": n})
	opts := syncerConfig()
	opts.ResyncPeriod = 300 * time.Millisecond
	startSyncer(t, opts)

	secretName := "kuik-inject-imagealternative-" + n
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/good": "q:pw"})

	wantReasons := map[string]bool{
		v1alpha1.ReasonSecretNotFound: true, v1alpha1.ReasonNotDockerConfig: true, v1alpha1.ReasonInvalidDockerConfig: true,
		v1alpha1.ReasonNoCredentialForPath: true, v1alpha1.ReasonProviderNotConfigured: true,
	}
	eventually(t, "one event per cause", func(ctx context.Context) error {
		evs := injectionEvents(ctx, t, e.cs, ia.UID)
		if len(evs) != len(wantReasons) {
			return fmt.Errorf("%d events", len(evs))
		}
		for _, ev := range evs {
			if ev.Type != corev1.EventTypeWarning {
				return fmt.Errorf("event %q is %s", ev.Message, ev.Type)
			}
			found := false
			for r := range wantReasons {
				found = found || strings.Contains(ev.Message, ": "+r+": ")
			}
			if !found {
				return fmt.Errorf("event message %q names no expected reason", ev.Message)
			}
		}
		return nil
	})
	eventually(t, "status Ready False", func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(&ia), &got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonSecretNotFound {
			return fmt.Errorf("condition %+v", c)
		}
		for r := range wantReasons {
			if !strings.Contains(c.Message, r) {
				return fmt.Errorf("message %q does not name %s", c.Message, r)
			}
		}
		return nil
	})

	// Many resyncs later, still one event per cause: no flood.
	time.Sleep(3 * time.Second)
	evs := injectionEvents(t.Context(), t, e.cs, ia.UID)
	if len(evs) != len(wantReasons) {
		t.Errorf("%d events after resyncs, want %d", len(evs), len(wantReasons))
	}
	for _, ev := range evs {
		if ev.Series != nil || ev.Count > 1 {
			t.Errorf("event %q repeated: series %+v count %d", ev.Message, ev.Series, ev.Count)
		}
	}

	// Resyncs write no status when nothing changed.
	var before, after v1alpha1.ImageAlternative
	if err := e.cl.Get(t.Context(), client.ObjectKeyFromObject(&ia), &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := e.cl.Get(t.Context(), client.ObjectKeyFromObject(&ia), &after); err != nil {
		t.Fatal(err)
	}
	if before.ResourceVersion != after.ResourceVersion {
		t.Errorf("resource written during resyncs that changed nothing: %s → %s", before.ResourceVersion, after.ResourceVersion)
	}

	// The missing Secret appears: its entry is written.
	putSecret(t, e, pullSecret(n+"-missing", map[string]string{"quay.io/acme": "m:pw"}))
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/good": "q:pw", "quay.io/acme/missing": "m:pw"})
}

func injectionEvents(ctx context.Context, t *testing.T, cs kubernetes.Interface, uid types.UID) []corev1.Event {
	t.Helper()
	list, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid)})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.Reason == v1alpha1.EventPullSecretInjectionFailed {
			out = append(out, ev)
		}
	}
	return out
}

// Rotating the secretRef Secret updates the resource's Secret in every namespace.
func TestSecretRefRotationUpdatesEveryPair(t *testing.T) {
	e := harness(t)
	n := name(t)
	alwaysForScope(t, e, n, "u:old")
	var namespaces []string
	for range 3 {
		namespaces = append(namespaces, createNamespace(t, e, map[string]string{"scope": n}))
	}
	startSyncer(t, syncerConfig())
	secretName := "kuik-inject-imagealternative-" + n
	for _, ns := range namespaces {
		secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "u:old"})
	}
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "u:new"}))
	for _, ns := range namespaces {
		secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "u:new"})
	}
}

// A Secret someone deletes or edits is restored at the next resync.
func TestResyncRestoresDeletedOrEditedSecret(t *testing.T) {
	e := harness(t)
	n := name(t)
	alwaysForScope(t, e, n, "u:pw")
	ns := createNamespace(t, e, map[string]string{"scope": n})
	opts := syncerConfig()
	opts.ResyncPeriod = time.Second
	startSyncer(t, opts)
	secretName := "kuik-inject-imagealternative-" + n
	want := map[string]string{"quay.io/acme/foo": "u:pw"}
	secretHolds(t, e, ns, secretName, want)

	if err := e.cs.CoreV1().Secrets(ns).Delete(t.Context(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, ns, secretName, want)

	s, err := e.cs.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[corev1.DockerConfigJsonKey] = testutil.DockerConfigJSON(map[string]string{"quay.io/acme/foo": "mallory:pw"})
	if _, err := e.cs.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, ns, secretName, want)
}

// After a restart every pair is applied once; the Secrets that did not change keep their
// resourceVersion (the API server makes an identical apply a no-op), one deleted while the
// syncer was stopped is back.
func TestRestartAppliesEveryPairOnce(t *testing.T) {
	e := harness(t)
	n := name(t)
	alwaysForScope(t, e, n, "u:pw")
	var namespaces []string
	for range 3 {
		namespaces = append(namespaces, createNamespace(t, e, map[string]string{"scope": n}))
	}
	secretName := "kuik-inject-imagealternative-" + n
	want := map[string]string{"quay.io/acme/foo": "u:pw"}

	stop := startSyncer(t, syncerConfig())
	versions := map[string]string{}
	for _, ns := range namespaces {
		versions[ns] = secretHolds(t, e, ns, secretName, want).ResourceVersion
	}
	stop()

	if err := e.cs.CoreV1().Secrets(namespaces[0]).Delete(t.Context(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := appliesSucceeded(t)
	startSyncer(t, syncerConfig()) // resync in an hour: only the start applies
	secretHolds(t, e, namespaces[0], secretName, want)
	eventually(t, "every pair applied once", func(context.Context) error {
		if got := appliesSucceeded(t) - before; got != float64(len(namespaces)) {
			return fmt.Errorf("%v applies", got)
		}
		return nil
	})
	for _, ns := range namespaces[1:] {
		s, err := e.cs.CoreV1().Secrets(ns).Get(t.Context(), secretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.ResourceVersion != versions[ns] {
			t.Errorf("secret in %s: resourceVersion %s → %s, want unchanged", ns, versions[ns], s.ResourceVersion)
		}
	}
}

// Deleting a resource garbage-collects its Secrets in every namespace (ownerReference).
func TestDeletedResourceSecretsAreGarbageCollected(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.tld": "u:pw"}))
	im := testutil.NewImageMirror(n, "registry.tld/mirror/").Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"scope": n}).SecretRef(n + "-creds").Build()
	create(t, e, &im)
	var namespaces []string
	for range 3 {
		namespaces = append(namespaces, createNamespace(t, e, map[string]string{"scope": n}))
	}
	startSyncer(t, syncerConfig())
	secretName := "kuik-inject-imagemirror-" + n
	for _, ns := range namespaces {
		secretHolds(t, e, ns, secretName, map[string]string{"registry.tld/mirror": "u:pw"})
	}
	if err := e.cl.Delete(t.Context(), &im); err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		eventually(t, "secret garbage-collected in "+ns, func(ctx context.Context) error {
			_, err := e.cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return errors.New("still there")
		})
	}
}

// The syncer's identity reads Secrets in its own namespace only, and cannot delete any.
func TestIdentityCannotReadSecretsOutsideItsNamespace(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, nil)
	if _, err := e.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "u:pw"}))
	as, err := kubernetes.NewForConfig(cp.ConfigAsServiceAccount(crns, serviceAccount))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	forbidden := map[string]func() error{
		"get in another namespace":  func() error { _, err := as.CoreV1().Secrets(ns).Get(ctx, "private", metav1.GetOptions{}); return err },
		"list in another namespace": func() error { _, err := as.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"list cluster-wide":         func() error { _, err := as.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); return err },
		"watch cluster-wide": func() error {
			w, err := as.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"delete": func() error { return as.CoreV1().Secrets(ns).Delete(ctx, "private", metav1.DeleteOptions{}) },
		"update": func() error {
			_, err := as.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: ns}}, metav1.UpdateOptions{})
			return err
		},
	}
	for what, call := range forbidden {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
	if _, err := as.CoreV1().Secrets(crns).Get(ctx, n+"-creds", metav1.GetOptions{}); err != nil {
		t.Errorf("get in the cluster resource namespace: %v", err)
	}
}

// With leader election, a standby takes over when the leader stops.
func TestStandbyTakesOverWhenLeaderStops(t *testing.T) {
	e := harness(t)
	n := name(t)
	alwaysForScope(t, e, n, "u:pw")
	first := createNamespace(t, e, map[string]string{"scope": n})
	opts := syncerConfig()
	opts.LeaderElection = true
	opts.LeaderElectionID = n
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	secretName := "kuik-inject-imagealternative-" + n
	want := map[string]string{"quay.io/acme/foo": "u:pw"}

	stopLeader := startSyncer(t, opts)
	secretHolds(t, e, first, secretName, want)
	startSyncer(t, opts) // the standby
	stopLeader()

	second := createNamespace(t, e, map[string]string{"scope": n})
	secretHolds(t, e, second, secretName, want)
	lease, err := e.cs.CoordinationV1().Leases(crns).Get(t.Context(), n, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("lease %s has no holder", n)
	}
	// Leader election's events land on the Lease, in the syncer's namespace: the chart's RBAC
	// lets it create them there.
	eventually(t, "leader election events on the Lease", func(ctx context.Context) error {
		list, err := e.cs.CoreV1().Events(crns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease,involvedObject.name=" + n})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return errors.New("no event")
		}
		return nil
	})
}

// The controller logs through the logger the syncer is started with (the one -v and --zap-*
// configure), its V(1) lines included: the manager's runnables get a context of their own.
func TestSyncerLogsThroughTheLoggerItIsGiven(t *testing.T) {
	e := harness(t)
	n := name(t)
	alwaysForScope(t, e, n, "u:pw")
	ns := createNamespace(t, e, map[string]string{"scope": n})
	var log appliedLog
	var started atomic.Bool
	startSyncerWith(t, syncerConfig(), cp.ConfigAsServiceAccount(crns, serviceAccount), func(line string) {
		if strings.Contains(line, `"msg"="started"`) {
			started.Store(true)
		}
		log.observe(line)
	})
	secretName := "kuik-inject-imagealternative-" + n
	secretHolds(t, e, ns, secretName, map[string]string{"quay.io/acme/foo": "u:pw"})
	waitApplied(t, &log, ns, secretName) // V(1)
	if !started.Load() {
		t.Error(`no "started" line from the controller`)
	}
}
