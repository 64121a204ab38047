package keeper

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/testenv"
)

// The control plane is started by the first test that needs one, so that the package's pure
// tests (the scheduler's) run without one, under -short too; TestMain stops it.
var (
	cpOnce  sync.Once
	cpValue *testenv.ControlPlane
	cpErr   error
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if cpValue != nil {
		cpValue.Stop()
	}
	os.Exit(code)
}

// controlPlane is the package's control plane, with kuik's CRDs; tests needing it skip under
// -short.
func controlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs a control plane")
	}
	cpOnce.Do(func() { cpValue, cpErr = testenv.Start(context.Background(), testenv.Options{CRDs: true}) })
	if cpErr != nil {
		t.Fatalf("starting the control plane: %v", cpErr)
	}
	return cpValue
}

// kube is an admin client set and controller-runtime client on the control plane.
type kube struct {
	cp *testenv.ControlPlane
	cs kubernetes.Interface
	cl client.Client
}

func newKube(t *testing.T) kube {
	t.Helper()
	cp := controlPlane(t)
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cp.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return kube{cp: cp, cs: cs, cl: cl}
}

var nsCounter atomic.Int32

// namespace creates a namespace of its own for a test, with labels.
func (k kube) namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("keeper-%d-%d", os.Getpid()%10000, nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := k.cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// startCache starts the keeper's cache (CacheOptions of namespace) with every informer the
// keeper runs, synced, and the gatherer over it.
func (k kube) startCache(t *testing.T, namespace string) (cache.Cache, *gatherer) {
	t.Helper()
	c, g := k.startCacheAs(t, k.cp.Config(), namespace)
	wctx, wcancel := context.WithTimeout(t.Context(), time.Minute)
	defer wcancel()
	if !c.WaitForCacheSync(wctx) {
		t.Fatal("the cache did not sync")
	}
	return c, g
}

// startCacheAs starts the keeper's cache with the identity of cfg, without waiting for it to
// sync.
func (k kube) startCacheAs(t *testing.T, cfg *rest.Config, namespace string) (cache.Cache, *gatherer) {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	opts := CacheOptions(namespace)
	opts.Scheme = scheme
	failures := &listFailures{now: time.Now}
	opts.DefaultWatchErrorHandler = failures.handler
	c, err := cache.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range watchedObjects() {
		if _, err := c.GetInformer(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Start(ctx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c, &gatherer{cache: c, failures: failures}
}

// eventuallyOK polls cond until it holds or a minute passes; cond's error says what is wrong.
func eventuallyOK(t *testing.T, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, last)
	}
}
