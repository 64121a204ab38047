package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// inProcSyncer is the secret-syncer run in-process, with a transport counting its Secret
// applies.
type inProcSyncer struct {
	applyRequests, firstApply, lastApply atomic.Int64
	stop                                 context.CancelFunc
	done                                 chan error
}

// convergence is phase 1: R Always resources reaching every namespace, against a bare client
// doing the same applies before and after (the floor). It leaves the syncer running and
// returns it with the resource version of the last Secret list.
func (b *bench) convergence(ctx context.Context) (_ *inProcSyncer, rv string, err error) {
	n, nres := len(b.names), max(*flagResources, 1)
	// 1. Floor: a bare client, same concurrency, applying exactly what the syncer applies (the
	// same labels, type, data and a controller ownerReference), built by the syncer's own
	// functions, under other names.
	b.data = testutil.DockerConfigJSON(map[string]string{"quay.io/acme/foo": "user:password"})
	floor1, err := b.floor(ctx, "bench-floor-1", nres)
	if err != nil {
		return nil, "", err
	}
	if *flagResync == 0 {
		// A resync during phase 1 would compete with the second floor, one during the storm
		// would hide the hash skips.
		*flagResync = max(time.Minute, 4*floor1).Round(time.Second)
	}
	fmt.Printf("syncer resync period %s\n", *flagResync)

	sy := b.startSyncer(ctx)
	defer func() {
		if err != nil {
			sy.stop()
		}
	}()
	time.Sleep(2 * time.Second) // informers synced, nothing to do yet

	before := benchutil.Counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))
	var always []v1alpha1.ImageAlternative
	for r := range nres {
		always = append(always, testutil.NewImageAlternative(fmt.Sprintf("always-%d", r)).Policy(v1alpha1.RewritePolicyAlways).
			NamespaceSelector(map[string]string{"bench": "always"}).
			Repository("quay.io/acme/foo").SecretRef("creds").Build())
	}
	if *flagCPUProfile != "" {
		f, err := os.Create(*flagCPUProfile)
		if err != nil {
			return nil, "", err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, "", err
		}
	}
	pairs := nres * n
	t0 := time.Now()
	for i := range always {
		if err := b.cl.Create(ctx, &always[i]); err != nil {
			return nil, "", err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout(pairs), true, func(context.Context) (bool, error) {
		return benchutil.Counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))-before >= float64(pairs), nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("convergence: %d of %d applies: %w", int(benchutil.Counter(metrics.SyncerApplies.WithLabelValues(metrics.ResultSuccess))-before), pairs, err)
	}
	converge := time.Since(t0)
	pprof.StopCPUProfile()
	applySpan := fmt.Sprintf("first apply request at +%s, last at +%s",
		time.Duration(sy.firstApply.Load()-t0.UnixNano()).Round(time.Millisecond), time.Duration(sy.lastApply.Load()-t0.UnixNano()).Round(time.Millisecond))
	floor2, err := b.floor(ctx, "bench-floor-2", nres)
	if err != nil {
		return nil, "", err
	}
	for i := range always {
		if rv, err = b.checkSecrets(ctx, routing.PullSecretName(routing.KindImageAlternative, always[i].Name)); err != nil {
			return nil, "", err
		}
	}
	floorMean := (floor1 + floor2) / 2
	fmt.Printf("\n== 1. Always convergence: %d resources x %d namespaces = %d Secrets (%d workers, debounce %s)\n", nres, n, pairs, *flagWorkers, *flagDebounce)
	fmt.Printf("floor (bare client, %d applies): %s before, %s after; mean %s\n", pairs, floor1.Round(time.Millisecond), floor2.Round(time.Millisecond), floorMean.Round(time.Millisecond))
	fmt.Printf("syncer: %s to %d Secrets (%.0f/s), every one present with the expected content; %s\n", converge.Round(time.Millisecond), pairs, float64(pairs)/converge.Seconds(), applySpan)
	fmt.Printf("ratio syncer/floor: %.2fx against the mean floor, %.2fx against the faster run (goal <= 1.15x)\n",
		float64(converge)/float64(floorMean), float64(converge)/float64(min(floor1, floor2)))
	return sy, rv, nil
}

// startSyncer runs the syncer in-process with the bench's flags and a transport counting its
// Secret apply requests.
func (b *bench) startSyncer(ctx context.Context) *inProcSyncer {
	sy := &inProcSyncer{}
	scfg := rest.CopyConfig(b.admin)
	scfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/secrets/") && r.Header.Get("Content-Type") == string(types.ApplyPatchType) {
				now := time.Now().UnixNano()
				if sy.applyRequests.Add(1) == 1 {
					sy.firstApply.Store(now)
				}
				sy.lastApply.Store(now)
			}
			return rt.RoundTrip(r)
		})
	}
	sctx, stop := context.WithCancel(ctx)
	sy.stop, sy.done = stop, make(chan error, 1)
	go func() {
		sy.done <- syncer.Run(sctx, scfg, syncer.Options{
			Config: syncer.Config{
				ClusterResourceNamespace: crns,
				Workers:                  *flagWorkers,
				Debounce:                 *flagDebounce,
				ResyncPeriod:             *flagResync,
			},
			ManagerOptions: ctrlkit.ManagerOptions{MetricsBindAddress: "0"},
		})
	}()
	return sy
}

// floor applies, with a bare client and the syncer's concurrency, the Secrets res resources
// named prefix-<r> would have in every namespace, and returns how long it took.
func (b *bench) floor(ctx context.Context, prefix string, res int) (time.Duration, error) {
	owners := make([]*syncer.Resource, res)
	for r := range owners {
		name := fmt.Sprintf("%s-%d", prefix, r)
		owners[r] = &syncer.Resource{Kind: routing.KindImageAlternative, Name: name, UID: types.UID(name)}
	}
	n := len(b.names)
	t0 := time.Now()
	err := benchutil.Parallel(ctx, res*n, *flagWorkers, func(ctx context.Context, i int) error {
		ns := b.names[i%n]
		ac := syncer.ApplyConfiguration(syncer.DesiredSecret(owners[i/n], ns, b.data))
		_, err := b.cs.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "bench", Force: true})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("floor %s: %w", prefix, err)
	}
	return time.Since(t0), nil
}

// checkSecrets checks that the Secret name exists in every Always namespace with exactly the
// expected content, and returns the resource version of the list.
func (b *bench) checkSecrets(ctx context.Context, name string) (string, error) {
	list, err := b.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		return "", fmt.Errorf("listing secrets %s: %w", name, err)
	}
	got := map[string]*corev1.Secret{}
	for i := range list.Items {
		got[list.Items[i].Namespace] = &list.Items[i]
	}
	var missing, wrong []string
	for _, ns := range b.names {
		s, ok := got[ns]
		switch {
		case !ok:
			missing = append(missing, ns)
		case s.Type != corev1.SecretTypeDockerConfigJson || string(s.Data[corev1.DockerConfigJsonKey]) != string(b.data):
			wrong = append(wrong, ns)
		}
	}
	if len(missing) > 0 || len(wrong) > 0 {
		return "", fmt.Errorf("secret %s: missing in %d namespaces %s, wrong content in %d %s", name, len(missing), head(missing), len(wrong), head(wrong))
	}
	return list.ResourceVersion, nil
}

func head(s []string) string {
	if len(s) > 5 {
		return fmt.Sprint(s[:5]) + "..."
	}
	return fmt.Sprint(s)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
