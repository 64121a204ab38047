package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// podKind is one kind of bad (or floor) pod.
type podKind struct {
	name      string
	namespace string
	protobuf  bool
	build     func(i int) *corev1.Pod
}

func (w *world) pods(ctx context.Context, timeout, budget time.Duration) error {
	n := *flagPods
	r := *flagResources
	hundred := func(i int) *corev1.Pod {
		p := basePod("hundred")
		for k := range 100 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%03d", k), Image: w.original((i*100+k)%r) + ":v1"})
		}
		return p
	}
	covered := func(i int) *corev1.Pod {
		p := basePod("covered")
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: w.original(i%r) + ":v1"}}
		return p
	}
	utf8Annotations := func(p *corev1.Pod) *corev1.Pod {
		p.Labels[v1alpha1.LabelRewritten] = "true"
		p.Annotations = map[string]string{
			v1alpha1.AnnotationOriginalImages: "{\"app\":\"" + w.original(1) + ":v1\xff\xfe\"}",
			v1alpha1.AnnotationRewrittenBy:    "{\"app\":\"ImageAlternative/flood-\xc3\x28\"}",
			v1alpha1.AnnotationReason:         "\xed\xa0\x80\xff",
			"kuik.enix.io/other":              "\xf0\x28\x8c\x28",
			"example.com/user":                "caf\xe9",
		}
		return p
	}
	kinds := []podKind{
		{name: "floor: plain, uncovered", namespace: nsPlain, build: func(int) *corev1.Pod { return basePod("plain") }},
		{name: "covered, 1 container", namespace: nsFlood, build: covered},
		{name: "100 containers, covered", namespace: nsFlood, build: hundred},
		{name: "4 KiB images", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := basePod("long-image")
			p.Spec.Containers = []corev1.Container{
				{Name: "tag", Image: w.original(i%r) + ":" + strings.Repeat("t", 4096)},
				{Name: "path", Image: w.downs[0] + "/acme/" + strings.Repeat("p/", 2048) + "app:v1"},
				{Name: "digest", Image: w.original(i%r) + "@sha256:" + strings.Repeat("0", 4096)},
			}
			return p
		}},
		{name: "invalid UTF-8 in kuik annotations, protobuf, covered", namespace: nsFlood, protobuf: true, build: func(i int) *corev1.Pod { return utf8Annotations(covered(i)) }},
		{name: "invalid UTF-8 in kuik annotations, protobuf, uncovered", namespace: nsPlain, protobuf: true, build: func(int) *corev1.Pod { return utf8Annotations(basePod("plain-utf8")) }},
		{name: "invalid UTF-8 in kuik annotations, JSON, covered", namespace: nsFlood, build: func(i int) *corev1.Pod { return utf8Annotations(covered(i)) }},
		{name: "annotations at 256 KiB - 1 KiB, covered", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := covered(i)
			p.Annotations = map[string]string{"example.com/blob": strings.Repeat("b", 256*1024-1024-len("example.com/blob"))}
			return p
		}},
		{name: "annotations at 256 KiB - 64 B, covered", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := covered(i)
			p.Annotations = map[string]string{"example.com/blob": strings.Repeat("b", 256*1024-64-len("example.com/blob"))}
			return p
		}},
		{name: "100 containers under every ImageMirror", namespace: nsMirrored, build: hundred},
	}
	fmt.Printf("\n== 2. Pods through the API server (%d per kind, %d workers); admission budget %s, timeoutSeconds %s\n", n, *flagWorkers, budget, timeout)
	fmt.Printf("%-56s %-40s %s\n", "kind", "create latency p50 / p99 / max", "outcome")
	var floor time.Duration
	for _, k := range kinds {
		var mu sync.Mutex
		var lat []time.Duration
		var refused, rewritten, containers atomic.Int64
		var firstErr atomic.Value
		reasons := map[string]int{}
		cs := w.cs
		if k.protobuf {
			cs = w.proto
		}
		_ = benchutil.Parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
			p := k.build(i)
			t := time.Now()
			got, err := cs.CoreV1().Pods(k.namespace).Create(ctx, p, metav1.CreateOptions{})
			took := time.Since(t)
			mu.Lock()
			lat = append(lat, took)
			mu.Unlock()
			if err != nil {
				refused.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return nil
			}
			for j, c := range got.Spec.Containers {
				containers.Add(1)
				if c.Image != p.Spec.Containers[j].Image {
					rewritten.Add(1)
				}
			}
			var rs map[string]string
			_ = json.Unmarshal([]byte(got.Annotations[v1alpha1.AnnotationReason]), &rs)
			mu.Lock()
			for _, r := range rs {
				reasons[r]++
			}
			mu.Unlock()
			return nil
		})
		slices.Sort(lat)
		p50 := pct(lat, 50)
		if floor == 0 {
			floor = p50
		}
		outcome := fmt.Sprintf("%d/%d containers rewritten", rewritten.Load(), containers.Load())
		if len(reasons) > 0 {
			var rs []string
			for r, c := range reasons {
				rs = append(rs, fmt.Sprintf("%s %d", r, c))
			}
			slices.Sort(rs)
			outcome += " (reasons: " + strings.Join(rs, ", ") + ")"
		}
		if refused.Load() > 0 {
			outcome = fmt.Sprintf("%d/%d pods REFUSED: %v", refused.Load(), n, firstErr.Load())
			w.fail.add("%s: %d pods refused: %v", k.name, refused.Load(), firstErr.Load())
		}
		// A timing, not an outcome: printed, never a failure. Past timeoutSeconds the API server
		// gives up on the webhook and (failurePolicy Ignore) admits the pod unrouted.
		over := ""
		if n := benchutil.Over(lat, timeout); n > 0 {
			over = fmt.Sprintf(" %d OVER timeoutSeconds", n)
		}
		fmt.Printf("%-56s %-40s %s\n", k.name, fmt.Sprintf("%s / %s / %s (%.2fx floor p50)%s", p50, pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond), float64(p50)/float64(floor), over), outcome)
		w.checkAlive(ctx, "after "+k.name)
	}
	return nil
}

func basePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/team/app:v1"}}},
	}
}
