// Package node_test runs kuik's end-to-end scenarios on a real node (internal/testnode): the
// chart installed with helm and images built from source (internal/kuiknode), the webhook and
// the secret-syncer running as the chart's pods, and a kubelet whose containerd really pulls
// the routed images from a registry behind basic authentication. The tests assert what the
// kubelet does: pods Running, or ErrImagePull/ImagePullBackOff with the registry's 401 where
// kuik is absent.
package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/kuiknode"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testnode"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
)

var node *testnode.Node

func TestMain(m *testing.M) {
	// The tests' controller-runtime clients log nothing worth keeping.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testnode.Run(m, testnode.Options{}, &node))
}

// The private registry's only credential, and the secretRef Secret (release namespace)
// holding it.
const (
	registryUser     = "puller"
	registryPassword = "s3cret"
	registrySecret   = "private-registry"
)

// world is what every test shares: kuik installed on the node, and the private registry.
type world struct {
	n    *testnode.Node
	cs   kubernetes.Interface
	c    client.Client
	kuik *kuiknode.Kuik
	// registry is private (basic auth), on the node's address; registrySecret holds its
	// credential.
	registry *testutil.Registry
	// down is an address of the node where nothing listens: an upstream that refuses
	// connections.
	down string
	// provider is on the node's address and accepts only the fake credential provider's
	// credentials; kuik is installed with that provider (provider_test.go).
	provider *providerRegistry
	// privateTLS serves HTTPS with a certificate of a private CA, given to kuik through the
	// chart's caBundle.pem and to containerd through its hosts configuration; untrustedTLS with
	// one of a CA nobody was given. Both accept only the fake provider's credentials, whose
	// plugins (providers privateTLSProvider and untrustedTLSProvider) first call them over HTTPS
	// (cabundle_test.go).
	privateTLS, untrustedTLS *providerRegistry
}

var (
	setupMu sync.Mutex
	shared  *world
)

func env(t *testing.T) *world {
	t.Helper()
	n := testnode.Require(t, node)
	setupMu.Lock()
	defer setupMu.Unlock()
	if shared != nil {
		return shared
	}
	w, err := setup(t.Context(), n)
	if err != nil {
		t.Fatalf("installing kuik on the node: %v", err)
	}
	shared = w
	return w
}

func setup(ctx context.Context, n *testnode.Node) (*world, error) {
	w := &world{n: n}
	var err error
	if w.cs, err = kubernetes.NewForConfig(n.Config()); err != nil {
		return nil, err
	}
	if w.c, err = client.New(n.Config(), client.Options{Scheme: webhook.Scheme()}); err != nil {
		return nil, err
	}
	// Both registries live as long as the test binary (the node pulls kuik's images again if
	// a pod of it is replaced).
	images := testutil.NewRegistryAt(processTB{}, testnode.NodeIP+":0", "", "")
	if err := n.TrustPlainHTTP(images.Host); err != nil {
		return nil, err
	}
	w.registry = testutil.NewRegistryAt(processTB{}, testnode.NodeIP+":0", registryUser, registryPassword)
	if err := n.TrustPlainHTTP(w.registry.Host); err != nil {
		return nil, err
	}
	if w.down, err = freeAddr(); err != nil {
		return nil, err
	}
	if err := n.TrustPlainHTTP(w.down); err != nil {
		return nil, err
	}
	if w.provider, err = newProviderRegistry(testnode.NodeIP+":0", nil); err != nil {
		return nil, err
	}
	if err := n.TrustPlainHTTP(w.provider.Host); err != nil {
		return nil, err
	}
	privateCA, err := testenv.NewCA()
	if err != nil {
		return nil, err
	}
	otherCA, err := testenv.NewCA()
	if err != nil {
		return nil, err
	}
	if w.privateTLS, err = newProviderRegistry(testnode.NodeIP+":0", privateCA); err != nil {
		return nil, err
	}
	if err := n.TrustCA(w.privateTLS.Host, privateCA.PEM); err != nil {
		return nil, err
	}
	if w.untrustedTLS, err = newProviderRegistry(testnode.NodeIP+":0", otherCA); err != nil {
		return nil, err
	}
	providerValues, err := w.provider.chartValues(ctx, images.Host,
		w.privateTLS.providerConfig(privateTLSProvider, checkURL(w.privateTLS)),
		w.untrustedTLS.providerConfig(untrustedTLSProvider, checkURL(w.untrustedTLS)))
	if err != nil {
		return nil, err
	}
	providerValues["caBundle"] = map[string]any{"pem": string(privateCA.PEM)}
	providerValues["syncer"] = recreateStuckPodsValues() // missed_test.go
	if w.kuik, err = kuiknode.Install(ctx, n, kuiknode.Options{Registry: images.Host, Values: providerValues, Keeper: true}); err != nil {
		return nil, err
	}
	for _, tm := range w.kuik.Timings {
		fmt.Fprintf(os.Stderr, "kuik install: %-32s %6.2fs\n", tm.Name, tm.Since.Seconds())
	}
	_, err = w.cs.CoreV1().Secrets(w.kuik.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: registrySecret},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{w.registry.Host: registryUser + ":" + registryPassword})},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// freeAddr is an address of the node where nothing listens (it was free a moment ago).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", testnode.NodeIP+":0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	return addr, nil
}

// processTB lets the shared registries be built outside a test: they live as long as the test
// binary, and a failure to start one fails loudly.
type processTB struct{ testing.TB }

func (processTB) Helper()                   {}
func (processTB) Cleanup(func())            {}
func (processTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (processTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// namespace creates a namespace with these labels, waits for its default ServiceAccount, and
// deletes it when the test ends.
func (w *world) namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns, err := w.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	if err := testnode.WaitServiceAccount(t.Context(), w.cs, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// create creates a routing resource (or any object) as admin and deletes it at cleanup.
func (w *world) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := w.c.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() { _ = w.c.Delete(context.Background(), obj) })
}

// events joins the reason and message of the pod's events with one of these reasons (all when
// none).
func (w *world) events(t *testing.T, ns, name string, reasons ...string) string {
	t.Helper()
	list, err := testnode.PodEvents(context.Background(), w.cs, ns, name)
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range list {
		if len(reasons) == 0 || contains(reasons, e.Reason) {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(msgs, "\n")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// kuikState is printed when a test fails: where kuik's pods are.
func (w *world) kuikState(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kuik's pods:\n%s", w.kuik.Describe(context.Background(), w.cs))
		}
	})
}

// waitTimeout bounds each wait for the kubelet.
const waitTimeout = 2 * time.Minute

// dockerConfig is a .dockerconfigjson holding the private registry's credential.
func dockerConfig(host string) []byte {
	return testutil.DockerConfigJSON(map[string]string{host: registryUser + ":" + registryPassword})
}
