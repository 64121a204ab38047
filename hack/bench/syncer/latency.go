package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testutil"
)

// onFailureLatency is phase 3: the time from an OnFailure pod's admission to its Secret, in
// -latency-samples namespaces of their own.
func (b *bench) onFailureLatency(ctx context.Context) error {
	// The pods' original, docker.io/acme/bar, stands for quay.io/acme/bar: the syncer counts only
	// records the webhook could have written.
	onFailure := testutil.NewImageAlternative("onfailure").Repository("docker.io/acme/bar").Repository("quay.io/acme/bar").SecretRef("creds").Build()
	if err := b.cl.Create(ctx, &onFailure); err != nil {
		return err
	}
	samples := *flagSamples
	latNS := make([]string, samples)
	err := benchutil.Parallel(ctx, samples, *flagCreateWorkers, func(ctx context.Context, i int) error {
		latNS[i] = fmt.Sprintf("lat-%04d", i)
		return benchutil.CreateNamespace(ctx, b.create, latNS[i], nil)
	})
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	sw, err := b.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kuik-inject-imagealternative-onfailure"})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	seen := map[string]chan struct{}{}
	for _, ns := range latNS {
		seen[ns] = make(chan struct{})
	}
	go func() {
		for ev := range sw.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			s := ev.Object.(*corev1.Secret)
			mu.Lock()
			if ch, ok := seen[s.Namespace]; ok {
				close(ch)
				delete(seen, s.Namespace)
			}
			mu.Unlock()
		}
	}()
	var lat []time.Duration
	for i, ns := range latNS {
		mu.Lock()
		ch := seen[ns]
		mu.Unlock()
		pod := rewrittenPod(ns, "p", "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
		if _, err := b.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		t0 := time.Now()
		select {
		case <-ch:
			lat = append(lat, time.Since(t0))
		case <-time.After(30 * time.Second):
			return fmt.Errorf("no secret in %s after 30s", ns)
		}
	}
	sw.Stop()
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Printf("\n== 3. OnFailure: pod admitted → Secret present (%d samples, debounce %s)\n", len(lat), *flagDebounce)
		fmt.Printf("p50 %s  p90 %s  p99 %s  max %s\n", pct(lat, 50), pct(lat, 90), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	}
	return nil
}
