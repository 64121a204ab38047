package keeper

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestNewManagerTakesTheLeaseAndStartsTheKeeper(t *testing.T) {
	k := newKube(t)
	release := k.namespace(t, nil)
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Namespace: release,
		ManagerOptions: ctrlkit.ManagerOptions{
			LeaderElection: true, MetricsBindAddress: "0", HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		},
		PlanInterval: DefaultPlanInterval, SelfHealInterval: DefaultSelfHealInterval, SweepInterval: DefaultSweepInterval,
		StatusInterval: DefaultStatusInterval, Workers: DefaultWorkers, StallTimeout: DefaultStallTimeout,
	}
	mgr, err := NewManager(t.Context(), k.cp.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()

	// The Lease of the default ID, in the release namespace, held by this manager (released
	// again if the manager stopped).
	eventuallyOK(t, func() error {
		var lease coordinationv1.Lease
		if err := k.cl.Get(t.Context(), client.ObjectKey{Namespace: release, Name: DefaultLeaderElectionID}, &lease); err != nil {
			return err
		}
		select {
		case err := <-errc:
			errc <- err
			return nil
		default:
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the lease has no holder")
		}
		return nil
	})

	// The manager runs until cancelled, ready.
	ready := func() error {
		select {
		case err := <-errc:
			errc <- err
			return nil
		default:
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0]), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	}
	eventuallyOK(t, ready)
	select {
	case err := <-errc:
		t.Fatalf("the manager stopped: %v", err)
	case <-time.After(time.Second):
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("the manager stopped with %v", err)
	}
}

func TestInformerEventsTriggerPlanPasses(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	release := k.namespace(t, nil)
	c, _ := k.startCache(t, release)
	var mu sync.Mutex
	triggers := 0
	if err := addTriggers(ctx, c, func() { mu.Lock(); triggers++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return triggers }
	// The informers hand the handlers what they hold, then every change.
	eventuallyOK(t, func() error {
		if count() == 0 {
			return errors.New("no trigger yet")
		}
		return nil
	})
	for name, obj := range map[string]client.Object{
		"a pod":          &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: release}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}},
		"a ReplicaSet":   &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs", Namespace: release}, Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rs"}}, Template: podTemplate("rs", "rs:1")}},
		"a namespace":    &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release + "-more"}},
		"an ImageMirror": &v1alpha1.ImageMirror{ObjectMeta: metav1.ObjectMeta{Name: release + "-trigger"}, Spec: v1alpha1.ImageMirrorSpec{Destination: v1alpha1.MirrorDestination{Path: "mirror.example/"}}},
	} {
		before := count()
		if err := k.cl.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		eventuallyOK(t, func() error {
			if count() == before {
				return fmt.Errorf("creating %s triggered no pass", name)
			}
			return nil
		})
	}
}
