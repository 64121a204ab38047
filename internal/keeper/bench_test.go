package keeper

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// BenchmarkUnchangedPass is a plan pass over 50,000 pods running 5,000 images, all kept
// already: it must queue nothing (0 registry requests). It reports the heap the keeper holds
// with its inputs, after a GC.
func BenchmarkUnchangedPass(b *testing.B) {
	const pods, images = 50_000, 5_000
	mirror := testutil.NewImageMirror("keep", "mirror.local/kuik/").Policy(v1alpha1.RewritePolicyAlways).Build()
	mirror.Spec.Keep = &v1alpha1.MirrorKeep{}
	ix, errs := routing.NewIndex(nil, []v1alpha1.ImageMirror{mirror})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	in := Inputs{
		Index:   ix,
		Mirrors: []keep.Mirror{{Name: "keep", Destination: mirror.Spec.Destination.Path, CountTemplates: true}},
		Specs:   map[string]*v1alpha1.ImageMirror{"keep": &mirror},
		Snapshot: keep.Snapshot{
			Namespaces: map[string]labels.Set{"default": {"kubernetes.io/metadata.name": "default"}},
		},
		Safety:        keep.Safety{Synced: true},
		DeclaredHosts: map[string]struct{}{},
	}
	for i := range pods {
		img := fmt.Sprintf("registry.example/team/app-%d:1.%d", i%images, i%images)
		in.Snapshot.Pods = append(in.Snapshot.Pods, keep.Pod{
			Namespace: "default", Name: fmt.Sprintf("pod-%d", i), Labels: labels.Set{"app": fmt.Sprint(i % images)},
			Containers: []keep.Container{{Name: "app", Image: img}},
		})
	}
	k := NewKeeper(Options{Workers: 4}, Deps{
		Gather: func(context.Context) (Inputs, error) { return in, nil },
		Store:  &memStore{},
	})
	ctx := context.Background()
	if err := k.planPass(ctx); err != nil {
		b.Fatal(err)
	}
	// As if every copy had succeeded.
	k.mu.Lock()
	if len(k.items) != images {
		b.Fatalf("%d items, want %d", len(k.items), images)
	}
	for _, it := range k.items {
		it.present, it.digest, it.queued = true, "sha256:"+fmt.Sprintf("%064d", 0), false
	}
	k.q = newQueue()
	k.mu.Unlock()

	b.ResetTimer()
	for b.Loop() {
		if err := k.planPass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	k.mu.Lock()
	queued := 0
	for _, it := range k.items {
		if it.queued {
			queued++
		}
	}
	k.mu.Unlock()
	if queued != 0 {
		b.Fatalf("an unchanged pass queued %d copies", queued)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	runtime.KeepAlive(in)
}
