package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func (b *bench) memory(ctx context.Context) error {
	pods, rewritten := *flagPods, min(*flagRewritten, *flagPods)
	names := b.names
	if len(names) == 0 {
		return errors.New("memory: -namespaces 0 leaves no namespace for the pods")
	}
	n := len(names)
	// The rewritten pods first, one namespace each as far as there are namespaces, then the
	// plain ones round-robin.
	rewrittenNS := map[string]struct{}{}
	for j := range rewritten {
		rewrittenNS[names[j%n]] = struct{}{}
	}
	t0 := time.Now()
	err := benchutil.Parallel(ctx, pods, *flagCreateWorkers, func(ctx context.Context, i int) error {
		ns := names[i%n]
		var p *corev1.Pod
		if i < rewritten {
			p = rewrittenPod(ns, fmt.Sprintf("p-%05d", i), "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i)
		} else {
			p = plainPod(ns, fmt.Sprintf("p-%05d", i), i)
		}
		_, err := b.create.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	fmt.Printf("\n== 5. Memory: %d pods (%d rewritten, in %d namespaces) spread over the %d Always namespaces (%d resources); created in %s (%.0f/s)\n",
		pods, rewritten, len(rewrittenNS), n, max(*flagResources, 1), time.Since(t0).Round(time.Second), float64(pods)/time.Since(t0).Seconds())

	dir, err := os.MkdirTemp("", "kuik-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin, err := benchutil.BuildBinary(ctx, dir, "./cmd/secret-syncer")
	if err != nil {
		return err
	}
	sub, err := startSubprocess(ctx, bin, b.cp.Kubeconfig, dir)
	if err != nil {
		return err
	}
	defer func() { sub.stop() }()
	t0 = time.Now()
	// Converged when every pair was applied (Always pairs, and the OnFailure pairs of the
	// rewritten pods' namespaces and of the latency samples) and the counters stand still.
	wantPairs := float64(max(*flagResources, 1)*n + len(rewrittenNS) + *flagSamples)
	if err := sub.converge(ctx, wantPairs, timeout(int(wantPairs)+pods/10)); err != nil {
		return err
	}
	port := sub.port
	converged := time.Since(t0)
	time.Sleep(5 * time.Second)
	rss, hwm, err := benchutil.ProcMemory(sub.cmd.Process.Pid)
	if err != nil {
		return err
	}
	m, _ := scrapePort(ctx, port)
	fmt.Printf("subprocess syncer converged in %s: %.0f pairs, %.0f applies\n", converged.Round(time.Millisecond),
		m["kuik_secret_syncer_pairs"], m[`kuik_secret_syncer_applies_total{result="success"}`])
	heap := ""
	if h, ok := m["go_memstats_heap_inuse_bytes"]; ok {
		heap = ", Go heap in use " + benchutil.MiB(int64(h))
	}
	fmt.Printf("RSS %s (peak %s)%s (goal RSS < 150 MiB)\n", benchutil.MiB(rss), benchutil.MiB(hwm), heap)
	if rss >= 150<<20 {
		fmt.Printf("FINDING: RSS over the 150 MiB goal\n")
	}
	if *flagHostile <= 0 {
		return nil
	}
	return b.hostile(ctx, sub, bin, dir, wantPairs, rss, int64(m["go_memstats_heap_inuse_bytes"]))
}

// subprocess is a secret-syncer binary run against the bench's control plane.
type subprocess struct {
	cmd  *exec.Cmd
	port int
	log  *os.File
}

func startSubprocess(ctx context.Context, bin, kubeconfig, dir string) (*subprocess, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+kubeconfig, "--cluster-resource-namespace="+crns,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--health-probe-bind-address=0",
		"--workers="+strconv.Itoa(*flagWorkers))
	logf, err := os.CreateTemp(dir, "syncer-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &subprocess{cmd: cmd, port: port, log: logf}, nil
}

func (s *subprocess) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = s.log.Close()
}

// converge waits until the syncer holds wantPairs pairs and its apply counters stand still.
func (s *subprocess) converge(ctx context.Context, wantPairs float64, limit time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		m, err := scrapePort(ctx, s.port)
		if err != nil {
			return false, nil
		}
		cur := fmt.Sprint(m[`kuik_secret_syncer_applies_total{result="success"}`]+m["kuik_secret_syncer_applies_skipped_total"], m["kuik_secret_syncer_queue_depth"])
		done := m["kuik_secret_syncer_pairs"] >= wantPairs && cur == last
		last = cur
		return done, nil
	})
	if err != nil {
		_ = s.log.Sync()
		return fmt.Errorf("subprocess syncer did not converge to %.0f pairs: %w\n%s", wantPairs, err, benchutil.Tail(s.log.Name()))
	}
	return nil
}

// settle waits for the counters to stand still, then measures the subprocess' memory.
func (s *subprocess) settle(ctx context.Context, wantPairs float64, limit time.Duration) (rss, hwm, heap int64, err error) {
	if err := s.converge(ctx, wantPairs, limit); err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(5 * time.Second)
	if rss, hwm, err = benchutil.ProcMemory(s.cmd.Process.Pid); err != nil {
		return 0, 0, 0, err
	}
	m, _ := scrapePort(ctx, s.port)
	return rss, hwm, int64(m["go_memstats_heap_inuse_bytes"]), nil
}

// hostile adds the pods of a tenant who wants the syncer's memory, and one pod re-annotated in
// a loop with invented names, then measures the syncer against the honest floor, and again
// after a restart.
func (b *bench) hostile(ctx context.Context, sub *subprocess, bin, dir string, wantPairs float64, floorRSS, floorHeap int64) error {
	names := b.names
	t0 := time.Now()
	err := benchutil.Parallel(ctx, *flagHostile, min(*flagCreateWorkers, 8), func(ctx context.Context, i int) error {
		ns := names[i%len(names)]
		_, err := b.create.CoreV1().Pods(ns).Create(ctx, fatPod(ns, fmt.Sprintf("fat-%05d", i), i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating hostile pods: %w", err)
	}
	created := time.Since(t0)
	ns := names[0]
	loop := rewrittenPod(ns, "reannotated", "quay.io/acme/bar:v1", "ImageAlternative/onfailure", 0)
	if _, err := b.create.CoreV1().Pods(ns).Create(ctx, loop, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the re-annotated pod: %w", err)
	}
	for round := range *flagReannotate {
		// Containers the pod lacks, each naming a resource that does not exist, new ones each
		// round (the original-images record only for the real container: the rewritten-by
		// annotation alone makes the fan-out, and both must fit the API server's 256 KiB).
		by, orig := map[string]string{"app": "ImageAlternative/onfailure"}, map[string]string{"app": "docker.io/acme/bar:v1"}
		for j := range *flagInvented {
			by[fmt.Sprintf("g%d", j)] = fmt.Sprintf("ImageAlternative/i%d-%d", round, j)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1alpha1.AnnotationRewrittenBy: mustJSON(by), v1alpha1.AnnotationOriginalImages: mustJSON(orig),
		}}})
		if err != nil {
			return err
		}
		if _, err := b.cs.CoreV1().Pods(ns).Patch(ctx, loop.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("re-annotating: %w", err)
		}
	}
	fmt.Printf("\n== 5b. Hostile pods: %d fat pods created in %s, one pod re-annotated %d times with %d invented names each\n",
		*flagHostile, created.Round(time.Second), *flagReannotate, *flagInvented)
	limit := timeout(int(wantPairs) + *flagHostile)
	rss, hwm, heap, err := sub.settle(ctx, wantPairs, limit)
	if err != nil {
		return err
	}
	fmt.Printf("RSS %s (peak %s), Go heap in use %s: %.2f× the honest RSS floor %s (heap %.2f×)\n",
		benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(heap), float64(rss)/float64(floorRSS), benchutil.MiB(floorRSS), benchutil.Ratio(heap, floorHeap))
	// A restart lists every pod again, the fat ones included.
	sub.stop()
	restarted, err := startSubprocess(ctx, bin, b.cp.Kubeconfig, dir)
	if err != nil {
		return err
	}
	defer restarted.stop()
	rss, hwm, heap, err = restarted.settle(ctx, wantPairs, limit)
	if err != nil {
		return err
	}
	fmt.Printf("after a restart: RSS %s (peak %s), Go heap in use %s: %.2f× the honest RSS floor (heap %.2f×)\n",
		benchutil.MiB(rss), benchutil.MiB(hwm), benchutil.MiB(heap), float64(rss)/float64(floorRSS), benchutil.Ratio(heap, floorHeap))
	if rss >= 150<<20 {
		fmt.Printf("FINDING: RSS over the 150 MiB goal with the hostile pods\n")
	}
	return nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fatPod is what any pod author may create: the rewritten label and a record, padded by
// testutil.FatPod.
func fatPod(ns, name string, i int) *corev1.Pod {
	return testutil.FatPod(rewrittenPod(ns, name, "quay.io/acme/bar:v1", "ImageAlternative/onfailure", i))
}

func scrapePort(ctx context.Context, port int) (benchutil.Metrics, error) {
	return benchutil.Scrape(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
}
