// Package e2e_test proves kuik's whole chain the way a user lives it, on one real control plane
// (etcd, kube-apiserver, kube-controller-manager for garbage collection): the chart's CRDs,
// ServiceAccounts, RBAC, webhook configurations and ValidatingAdmissionPolicy applied; the
// webhook and the secret-syncer running in-process under the chart's ServiceAccount identities
// with the chart's flags; a private OCI registry behind basic auth. A pod is created, routed,
// its pull Secret written by the syncer, and its image pulled with the kubelet's rules for
// choosing a credential.
package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
)

// crns is the release namespace, kuik's cluster resource namespace.
const crns = "kuik-system"

// The private registry's only credential, and the secretRef Secret holding it.
const (
	registryUser     = "puller"
	registryPassword = "s3cret"
	registrySecret   = "private-registry"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logger.WithName("controller-runtime"))
	// The CRDs go in before kube-controller-manager starts (CRDs: true; identical to the chart's,
	// which setup applies over them): its garbage collector discovers resource kinds at start
	// and then only every 30 s, and does not collect dependents of a kind it does not know.
	os.Exit(testenv.Run(m, testenv.Options{CRDs: true, GarbageCollection: true}, &cp))
}

// world is what every test shares: kuik installed and running, and the private registry.
type world struct {
	cs    kubernetes.Interface // admin
	c     client.Client        // admin, knows the routing resources
	chart *kuikenv.Chart
	// registry is private (basic auth); registrySecret in crns holds its credential under its
	// host.
	registry *testutil.Registry
	// down is a 127.0.0.1 address where nothing listens: an unreachable upstream.
	down string
	// webhookTimeout is the chart's timeoutSeconds for the pod webhook.
	webhookTimeout time.Duration
	probeTimeout   time.Duration

	mu     sync.Mutex
	syncer *kuikenv.Process
}

var setupOnce = sync.OnceValues(setup)

func env(t *testing.T) *world {
	t.Helper()
	w, err := setupOnce()
	if err != nil {
		t.Fatalf("setting up kuik: %v", err)
	}
	captureLogs(t)
	return w
}

func setup() (*world, error) {
	ctx := context.Background()
	w := &world{}
	var err error
	if w.cs, err = kubernetes.NewForConfig(cp.Config()); err != nil {
		return nil, err
	}
	if w.c, err = client.New(cp.Config(), client.Options{Scheme: webhook.Scheme()}); err != nil {
		return nil, err
	}
	if w.chart, err = kuikenv.Render(crns); err != nil {
		return nil, err
	}
	// The chart's CRDs, as `helm install` creates them first (the same as config/crd).
	if err := testenv.Apply(ctx, cp.Config(), w.chart.CRDs()); err != nil {
		return nil, err
	}
	if _, err := w.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	w.registry = testutil.NewRegistry(panicTB{}, registryUser, registryPassword)
	if w.down, err = kuikenv.FreeAddr(); err != nil {
		return nil, err
	}
	_, err = w.cs.CoreV1().Secrets(crns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: registrySecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{w.registry.Host: registryUser + ":" + registryPassword})},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}

	port, err := kuikenv.FreePort()
	if err != nil {
		return nil, err
	}
	hooks, err := w.chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		if h.GetKind() == "MutatingWebhookConfiguration" {
			hs := h.Object["webhooks"].([]any)
			secs := hs[0].(map[string]any)["timeoutSeconds"]
			switch n := secs.(type) {
			case int64:
				w.webhookTimeout = time.Duration(n) * time.Second
			case float64:
				w.webhookTimeout = time.Duration(n * float64(time.Second))
			default:
				return nil, fmt.Errorf("the pod webhook's timeoutSeconds is %T %v", secs, secs)
			}
		}
	}
	var objs []*unstructured.Unstructured
	objs = append(objs, w.chart.Identity(kuikenv.ComponentWebhook)...)
	objs = append(objs, w.chart.Identity(kuikenv.ComponentSyncer)...)
	objs = append(objs, w.chart.AdmissionPolicy()...)
	objs = append(objs, hooks...)
	if err := testenv.Apply(ctx, cp.Config(), objs); err != nil {
		return nil, err
	}

	webhookCtx := logr.NewContext(ctx, logger.WithName("webhook"))
	if _, err := kuikenv.StartWebhook(webhookCtx, cp, w.chart, port, webhook.Config{}); err != nil {
		return nil, err
	}
	args, err := w.chart.Args(kuikenv.ComponentWebhook)
	if err != nil {
		return nil, err
	}
	if w.probeTimeout, err = time.ParseDuration(args["probe-timeout"]); err != nil {
		return nil, err
	}
	if w.syncer, err = startSyncer(w.chart); err != nil {
		return nil, err
	}
	return w, nil
}

// startSyncer runs a secret-syncer as the chart runs it (leader election, retention); only the
// resync is set beyond the test's reach, so a Secret restored after a restart was restored by
// the start, not by a periodic resync.
func startSyncer(chart *kuikenv.Chart) (*kuikenv.Process, error) {
	ctx := logr.NewContext(context.Background(), logger.WithName("secret-syncer"))
	return kuikenv.StartSyncer(ctx, cp, chart, syncer.Options{Config: syncer.Config{ResyncPeriod: time.Hour}})
}

// restartSyncer stops the running secret-syncer, calls while (the syncer is down), and starts
// a new one.
func (w *world) restartSyncer(t *testing.T, while func()) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.syncer.Stop(30 * time.Second); err != nil {
		t.Fatalf("stopping the secret-syncer: %v", err)
	}
	defer func() {
		var err error
		if w.syncer, err = startSyncer(w.chart); err != nil {
			t.Fatalf("restarting the secret-syncer: %v", err)
		}
	}()
	while()
}

// logs collects what kuik's processes log; a failing test prints what was logged during it.
var (
	logMu  sync.Mutex
	logBuf bytes.Buffer
	logger = funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&logBuf, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})
)

func captureLogs(t *testing.T) {
	logMu.Lock()
	from := logBuf.Len()
	logMu.Unlock()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logMu.Lock()
		defer logMu.Unlock()
		t.Logf("kuik's logs during the test:\n%s", logBuf.Bytes()[from:])
	})
}

// panicTB lets the shared registry be built outside a test; it fails loudly instead.
type panicTB struct{ testing.TB }

func (panicTB) Helper()                   {}
func (panicTB) Cleanup(func())            {}
func (panicTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (panicTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
