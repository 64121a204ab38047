// Package integration_test runs the secret-syncer in-process against a real kube-apiserver,
// etcd and kube-controller-manager (internal/testenv), under the least-privilege identity of
// its ServiceAccount, impersonated so that RBAC is enforced.
package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/fakeprovider"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := testenv.Run(m, testenv.Options{GarbageCollection: true, CRDs: true}, &cp)
	fakeprovider.CleanupBuild()
	os.Exit(code)
}

const (
	crns           = "kuik-system"
	serviceAccount = "kuik-secret-syncer"
	pollTimeout    = 45 * time.Second
)

var setupOnce = sync.OnceValue(setup)

// env is the shared state of the package's tests.
type env struct {
	cs  kubernetes.Interface // admin
	cl  client.Client        // admin, knows the routing resources
	err error
}

func setup() env {
	var e env
	cfg := cp.Config()
	e.cs, e.err = kubernetes.NewForConfig(cfg)
	if e.err != nil {
		return e
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		e.err = err
		return e
	}
	if e.cl, e.err = client.New(cfg, client.Options{Scheme: scheme}); e.err != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.err = installRBAC(ctx, e.cs)
	return e
}

// chartValues are the chart values the syncer's RBAC is rendered with: the defaults and
// syncer.missedPulls.enabled and webhook.mutating.matchConditions (off by default), which the
// missed-pull and matchConditions tests need.
var chartValues = map[string]any{
	"syncer":  map[string]any{"missedPulls": map[string]any{"enabled": true}},
	"webhook": map[string]any{"mutating": map[string]any{"matchConditions": true}},
}

// installRBAC applies what the chart ships for the syncer: its ServiceAccount, ClusterRole,
// Role in the cluster resource namespace and their bindings, so the tests prove the chart's
// RBAC is enough, and nothing more is granted.
func installRBAC(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	chart, err := kuikenv.RenderValues(crns, chartValues)
	if err != nil {
		return err
	}
	sa, err := chart.ServiceAccount("secret-syncer")
	if err != nil {
		return err
	}
	if sa != serviceAccount {
		return fmt.Errorf("the chart names the syncer's ServiceAccount %q, the tests %q", sa, serviceAccount)
	}
	objs := chart.Identity("secret-syncer")
	if len(objs) != 7 {
		return fmt.Errorf("the chart renders %d RBAC objects for the syncer, want a ServiceAccount, a ClusterRole, a Role in %s, one in default for events, and their bindings", len(objs), crns)
	}
	return testenv.Apply(ctx, cp.Config(), objs)
}

func harness(t *testing.T) env {
	t.Helper()
	e := setupOnce()
	if e.err != nil {
		t.Fatalf("setting up: %v", e.err)
	}
	return e
}

// syncerConfig is the syncer's identity: its ServiceAccount, impersonated.
func syncerConfig() *syncer.Options {
	return &syncer.Options{
		Config: syncer.Config{
			ClusterResourceNamespace: crns,
			Debounce:                 50 * time.Millisecond,
			StatusDelay:              100 * time.Millisecond,
			ResyncPeriod:             time.Hour,
		},
		ManagerOptions: ctrlkit.ManagerOptions{MetricsBindAddress: "0", HealthProbeBindAddress: "0"},
	}
}

// startSyncer runs a syncer in-process as its ServiceAccount until the returned stop is
// called (also at cleanup). Its logs are printed if the test fails, or always with KUIK_SYNCER_LOG set.
func startSyncer(t *testing.T, opts *syncer.Options) (stop func()) {
	t.Helper()
	return startSyncerWith(t, opts, cp.ConfigAsServiceAccount(crns, serviceAccount), nil)
}

// startSyncerWith runs a syncer with a client config of the test's making (the syncer's
// identity, with a transport wrapped to watch its requests), calling onLog, if not nil, with
// each of its log lines.
func startSyncerWith(t *testing.T, opts *syncer.Options, cfg *rest.Config, onLog func(line string)) (stop func()) {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := funcr.New(func(prefix, args string) {
		line := prefix + " " + args
		if onLog != nil {
			onLog(line)
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&buf, "%s %s\n", time.Now().Format("15:04:05.000"), line)
	}, funcr.Options{Verbosity: 1})
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- syncer.Run(ctx, cfg, *opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("syncer: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("syncer did not stop within 30s")
			}
			if t.Failed() || os.Getenv("KUIK_SYNCER_LOG") != "" {
				mu.Lock()
				t.Logf("syncer log:\n%s", buf.String())
				mu.Unlock()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// name turns a test name into a DNS label prefix.
func name(t *testing.T) string {
	n := nonName.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return strings.Trim(n, "-")
}

func createNamespace(t *testing.T, e env, labels map[string]string) string {
	t.Helper()
	ns, err := e.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name(t) + "-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

// putSecret creates or replaces a Secret in the cluster resource namespace.
func putSecret(t *testing.T, e env, s *corev1.Secret) {
	t.Helper()
	s.Namespace = crns
	_, err := e.cs.CoreV1().Secrets(crns).Create(t.Context(), s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = e.cs.CoreV1().Secrets(crns).Update(t.Context(), s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Secrets(crns).Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
}

func pullSecret(name string, auths map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(auths)},
	}
}

// create creates a routing resource and deletes it at cleanup.
func create(t *testing.T, e env, obj client.Object) {
	t.Helper()
	if err := e.cl.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), obj) })
}

// rewrite is what the webhook records of a container it rewrote: the original image and the
// resource that rewrote it ("ImageAlternative/<name>").
type rewrite struct{ original, by string }

// rewrittenPod is a pod as the webhook admits it (label, annotations, rewritten images), or as
// a pod author forging one writes it: images maps each container to its current image.
func rewrittenPod(ns, name string, images map[string]string, rewrites map[string]rewrite) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels: map[string]string{"kuik.enix.io/rewritten": "true"},
	}}
	orig, by := map[string]string{}, map[string]string{}
	for c, r := range rewrites {
		orig[c], by[c] = r.original, r.by
	}
	byJSON, _ := json.Marshal(by)
	origJSON, _ := json.Marshal(orig)
	p.Annotations = map[string]string{
		"kuik.enix.io/rewritten-by":    string(byJSON),
		"kuik.enix.io/original-images": string(origJSON),
	}
	for _, c := range sortedKeys(images) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: images[c]})
	}
	return p
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// appliesSucceeded reads the process-wide counter of successful applies.
func appliesSucceeded(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// authsOf decodes a pull Secret into auths key -> "user:password"; nil if the Secret is not a
// dockerconfigjson.
func authsOf(t *testing.T, s *corev1.Secret) map[string]string {
	t.Helper()
	var doc struct {
		Auths map[string]struct{ Username, Password string } `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		t.Fatalf("secret %s/%s: %v", s.Namespace, s.Name, err)
	}
	out := map[string]string{}
	for k, v := range doc.Auths {
		out[k] = v.Username + ":" + v.Password
	}
	return out
}

// eventually is testutil.Eventually with this package's pollTimeout.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	testutil.Eventually(t, pollTimeout, what, check)
}

// secretHolds waits until the Secret exists with exactly these auths.
func secretHolds(t *testing.T, e env, ns, name string, want map[string]string) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	eventually(t, fmt.Sprintf("secret %s/%s holds %v", ns, name, want), func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := authsOf(t, s); !equalMaps(a, want) {
			return fmt.Errorf("holds %v", a)
		}
		got = s
		return nil
	})
	return got
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// absentFor checks that a Secret does not appear within d.
func absentFor(t *testing.T, e env, ns, name string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, err := e.cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			t.Fatalf("secret %s/%s exists, want none", ns, name)
		}
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

// alwaysForScope creates the Secret <n>-creds (quay.io -> userPass) and an Always
// ImageAlternative n injecting it for quay.io/acme/foo into the namespaces labelled scope=n.
func alwaysForScope(t *testing.T, e env, n, userPass string) {
	t.Helper()
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": userPass}))
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
}
