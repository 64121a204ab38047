package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
)

// failures collects wrong outcomes; the run goes on to report them all.
type failures struct {
	mu   sync.Mutex
	list []string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, fmt.Sprintf(format, args...))
}

func (f *failures) err() error {
	if len(f.list) == 0 {
		return nil
	}
	if len(f.list) > 20 {
		f.list = append(f.list[:20], fmt.Sprintf("... and %d more", len(f.list)-20))
	}
	return errors.New(strings.Join(f.list, "\n  "))
}

type world struct {
	cs                          kubernetes.Interface // admin, JSON
	proto                       kubernetes.Interface // admin, protobuf: bytes as they are
	cl                          client.Client
	tb                          *benchutil.TB
	reg                         *testutil.Registry
	downs                       []string
	webhookHealth, syncerHealth string
	syncerDone                  chan error
	fail                        *failures
}

// mutatingTimeout is the mutating webhook's timeoutSeconds, as the chart renders it.
func mutatingTimeout(hooks []*unstructured.Unstructured) (time.Duration, error) {
	for _, o := range hooks {
		if o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range list {
			switch s := h.(map[string]any)["timeoutSeconds"].(type) {
			case int64:
				return time.Duration(s) * time.Second, nil
			case int:
				return time.Duration(s) * time.Second, nil
			case float64:
				return time.Duration(s * float64(time.Second)), nil
			}
		}
	}
	return 0, errors.New("the chart's mutating webhook has no timeoutSeconds")
}

// waitReady waits until the webhook and the syncer answer /readyz.
func (w *world) waitReady(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return w.ready(ctx) == nil, nil
	})
}

func (w *world) ready(ctx context.Context) error {
	select {
	case err := <-w.syncerDone:
		w.syncerDone <- err
		return fmt.Errorf("the secret-syncer exited: %w", err)
	default:
	}
	for what, addr := range map[string]string{"webhook": w.webhookHealth, "secret-syncer": w.syncerHealth} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := benchutil.GetOK(ctx, "http://"+addr+path); err != nil {
				return fmt.Errorf("%s %s: %w", what, path, err)
			}
		}
	}
	return nil
}

func (w *world) checkAlive(ctx context.Context, when string) {
	if err := w.ready(ctx); err != nil {
		w.fail.add("kuik not alive and ready %s: %v", when, err)
		return
	}
	fmt.Printf("kuik alive and ready %s (webhook and secret-syncer /healthz and /readyz 200)\n", when)
}

// newWorld makes the clients (JSON, and protobuf so that bytes reach the API server as they
// are), kuik's namespace, the private registry and four addresses nothing listens on.
func newWorld(ctx context.Context, cp *testenv.ControlPlane, tb *benchutil.TB) (_ *world, err error) {
	admin := benchutil.Unthrottled(cp)
	w := &world{fail: &failures{}}
	if w.cs, err = kubernetes.NewForConfig(admin); err != nil {
		return nil, err
	}
	if w.proto, err = kubernetes.NewForConfig(benchutil.Protobuf(admin, "application/vnd.kubernetes.protobuf")); err != nil {
		return nil, err
	}
	if w.cl, err = client.New(admin, client.Options{Scheme: webhook.Scheme()}); err != nil {
		return nil, err
	}
	if err := benchutil.CreateNamespace(ctx, w.cs, crns, nil); err != nil {
		return nil, err
	}
	w.tb = tb
	w.reg = testutil.NewRegistry(tb, "puller", "s3cret")
	for range 4 {
		a, err := kuikenv.FreeAddr()
		if err != nil {
			return nil, err
		}
		w.downs = append(w.downs, a)
	}
	return w, nil
}
