package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// scenario is one kind of pod.
type scenario struct {
	name string
	// image is the pod's image in round r.
	image func(r int) string
	// want is the image the admitted pod must have with the webhook installed.
	want func(r int) string
}

// batch is one scenario's pods of one round in one mode.
type batch struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration // webhook CPU over the batch
}

// tally is every batch of a scenario in one mode.
type tally struct {
	lat  []time.Duration
	wall time.Duration
	cpu  time.Duration
}

func (t *tally) add(b batch) {
	t.lat = append(t.lat, b.lat...)
	t.wall += b.wall
	t.cpu += b.cpu
}

func fixed(s string) func(int) string { return func(int) string { return s } }

func nsName(i int) string { return "bench-" + strconv.Itoa(i) }

// createBatch creates n pods of scenario s (round r; -1 is the warm-up) with concurrency
// creators, checks each admitted pod, then deletes them.
func createBatch(ctx context.Context, cs kubernetes.Interface, wh *webhookProcess, i int, s scenario, r, n int, m mode) (batch, error) {
	ns := nsName(i)
	image, want := s.image(max(r, 0)), s.want(max(r, 0))
	if r < 0 {
		image, want = s.image(*flagRounds), s.want(*flagRounds)
	}
	if m != modeKuik {
		want = image
	}
	lat := make([]time.Duration, n)
	cpu0, err := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	t0 := time.Now()
	err = benchutil.Parallel(ctx, n, *flagConcurrency, func(ctx context.Context, j int) error {
		p := benchutil.PlainPod(ns, fmt.Sprintf("r%d-%05d", r+1, j), image, j)
		t := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		lat[j] = time.Since(t)
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		return check(got, image, want)
	})
	wall := time.Since(t0)
	cpu1, cerr := wh.cpu()
	if err != nil {
		return batch{}, err
	}
	if cerr != nil {
		return batch{}, cerr
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return batch{}, fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	return batch{lat: lat, wall: wall, cpu: cpu1 - cpu0}, nil
}

// check verifies an admitted pod: its image is want, and it carries kuik's rewrite marks
// exactly when the webhook rewrote it.
func check(p *corev1.Pod, original, want string) error {
	if got := p.Spec.Containers[0].Image; got != want {
		return fmt.Errorf("pod %s admitted with image %s, want %s", p.Name, got, want)
	}
	rewritten := p.Labels[v1alpha1.LabelRewritten] == "true"
	if rewritten != (want != original) {
		return fmt.Errorf("pod %s: label %s=%q, rewritten %t", p.Name, v1alpha1.LabelRewritten, p.Labels[v1alpha1.LabelRewritten], want != original)
	}
	return nil
}
