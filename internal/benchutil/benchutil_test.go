package benchutil

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetricsSkipsCommentsAndUnparsableValues(t *testing.T) {
	in := `# HELP kuik_x a counter
# TYPE kuik_x counter
kuik_x{result="success"} 3
kuik_y 1.5e+06
broken
kuik_z notanumber
`
	got, err := ParseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{`kuik_x{result="success"}`: 3, "kuik_y": 1.5e6}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseMetrics (-want +got):\n%s", diff)
	}
}

func TestSumAddsTheSeriesOfAPrefixHoldingEverySubstring(t *testing.T) {
	m := Metrics{
		`kuik_probes_total{registry="a",result="ok"}`:   1,
		`kuik_probes_total{registry="a",result="fail"}`: 2,
		`kuik_probes_total{registry="b",result="ok"}`:   4,
		`other{registry="a"}`:                           8,
	}
	for name, c := range map[string]struct {
		prefix string
		subs   []string
		want   float64
	}{
		"every series of the prefix":     {"kuik_probes_total", nil, 7},
		"with one substring":             {"kuik_probes_total", []string{`registry="a"`}, 3},
		"with two substrings":            {"kuik_probes_total", []string{`registry="a"`, `result="ok"`}, 1},
		"nothing when the prefix is off": {"kuik_none", nil, 0},
	} {
		if got := m.Sum(c.prefix, c.subs...); got != c.want {
			t.Errorf("%s: Sum = %v, want %v", name, got, c.want)
		}
	}
}

func TestHistogramAddsTheSeriesOfEveryReplicaAndReadsTheirGrowth(t *testing.T) {
	scrape := func(at1, at25, inf float64) Metrics {
		return Metrics{
			`kuik_d_seconds_bucket{webhook="pods",le="0.5"}`:  at1,
			`kuik_d_seconds_bucket{webhook="pods",le="1"}`:    at1,
			`kuik_d_seconds_bucket{webhook="pods",le="2.5"}`:  at25,
			`kuik_d_seconds_bucket{webhook="pods",le="+Inf"}`: inf,
			`kuik_d_seconds_bucket{webhook="other",le="1"}`:   100,
			`kuik_d_seconds_count{webhook="pods"}`:            inf,
		}
	}
	before := scrape(10, 10, 10)
	after := scrape(58, 59, 60)
	got := after.Histogram("kuik_d_seconds", `webhook="pods"`).Since(before.Histogram("kuik_d_seconds", `webhook="pods"`))
	want := Histogram{LE: []float64{0.5, 1, 2.5, math.Inf(1)}, N: []float64{48, 48, 49, 50}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Histogram (-want +got):\n%s", diff)
	}
	if got.Count() != 50 || got.Over(1) != 2 || got.Over(2.5) != 1 {
		t.Errorf("Count %v, Over(1) %v, Over(2.5) %v; want 50, 2, 1", got.Count(), got.Over(1), got.Over(2.5))
	}
	// Rank 49.5 of 50: 49 are ≤ 2.5 s, so it lies in the +Inf bucket.
	if q := got.Quantile(0.99); q != 2.5 {
		t.Errorf("Quantile(0.99) = %v, want 2.5 (the highest finite bound)", q)
	}
	// Rank 24 of 50 lies in the first bucket, (0, 0.5]: 24/48 of the way.
	if q := got.Quantile(0.48); q != 0.25 {
		t.Errorf("Quantile(0.48) = %v, want 0.25", q)
	}
	if lo, hi := got.Slowest(); lo != 2.5 || !math.IsInf(hi, 1) {
		t.Errorf("Slowest = (%v, %v], want (2.5, +Inf]", lo, hi)
	}
	var none Histogram
	if none.Count() != 0 || none.Over(1) != 0 || none.Quantile(0.99) != 0 {
		t.Errorf("an empty histogram: Count %v, Over %v, Quantile %v; want 0", none.Count(), none.Over(1), none.Quantile(0.99))
	}
}

func TestHistogramQuantileInterpolatesWithinItsBucket(t *testing.T) {
	h := Histogram{LE: []float64{0.1, 1, 2.5, math.Inf(1)}, N: []float64{40, 49, 50, 50}}
	// Rank 49.5 lies halfway between the 49 at 1 s and the 50 at 2.5 s.
	if q := h.Quantile(0.99); q != 1.75 {
		t.Errorf("Quantile(0.99) = %v, want 1.75", q)
	}
	if lo, hi := h.Slowest(); lo != 1 || hi != 2.5 {
		t.Errorf("Slowest = (%v, %v], want (1, 2.5]", lo, hi)
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[int]time.Duration{0: 1, 50: 5, 90: 9, 99: 10, 100: 10} {
		if got := Percentile(d, p); got != want {
			t.Errorf("Percentile(%d) = %v, want %v", p, got, want)
		}
	}
}

func TestOverCountsOnlyLongerDurations(t *testing.T) {
	if got := Over([]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, 2*time.Second); got != 1 {
		t.Errorf("Over = %d, want 1", got)
	}
}

func TestRatioOfAZeroFloorIsZero(t *testing.T) {
	if got := Ratio(int64(3), 0); got != 0 {
		t.Errorf("Ratio(3, 0) = %v, want 0", got)
	}
	if got := Ratio(3*time.Second, 2*time.Second); got != 1.5 {
		t.Errorf("Ratio(3s, 2s) = %v, want 1.5", got)
	}
}

func TestParallelRunsEveryIndexOnceAndStopsAtTheFirstError(t *testing.T) {
	var sum atomic.Int64
	if err := Parallel(t.Context(), 100, 4, func(_ context.Context, i int) error {
		sum.Add(int64(i))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 4950 {
		t.Errorf("sum of the indexes %d, want 4950", sum.Load())
	}
	boom := errors.New("boom")
	err := Parallel(t.Context(), 100, 4, func(context.Context, int) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Parallel = %v, want %v", err, boom)
	}
}

func TestTBFailureBecomesTheErrorAndCleanupsRunLastFirst(t *testing.T) {
	tb := &TB{}
	var order []int
	tb.Cleanup(func() { order = append(order, 1) })
	tb.Cleanup(func() { order = append(order, 2) })
	err := func() (err error) {
		defer Recover(&err)
		tb.Fatalf("registry: %s", "down")
		return nil
	}()
	if err == nil || err.Error() != "registry: down" {
		t.Errorf("recovered %v, want registry: down", err)
	}
	tb.Close()
	if diff := cmp.Diff([]int{2, 1}, order); diff != "" {
		t.Errorf("cleanup order (-want +got):\n%s", diff)
	}
}

func TestPlainPodIsAboutThreeKiB(t *testing.T) {
	p := PlainPod("ns", "p", "registry.example/app:v1", 5)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 5<<9 || len(b) > 4<<10 {
		t.Errorf("pod of %d bytes of JSON, want about 3 KiB", len(b))
	}
	if p.Spec.Containers[0].Image != "registry.example/app:v1" || p.Labels["pod-template-hash"] != "5" {
		t.Errorf("pod %+v", p.ObjectMeta)
	}
}
