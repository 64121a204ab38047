package benchutil

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
)

// Metrics is a Prometheus text exposition: each series (name and labels, as written) to its value.
type Metrics map[string]float64

// ParseMetrics reads a Prometheus text exposition; comment lines and unparsable values are
// skipped.
func ParseMetrics(r io.Reader) (Metrics, error) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	out := Metrics{}
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

// Scrape reads the metrics served at url; the caller bounds it through ctx.
func Scrape(ctx context.Context, url string) (Metrics, error) {
	b, err := Get(ctx, url)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(bytes.NewReader(b))
}

// APIServerMetrics reads kube-apiserver's own /metrics.
func APIServerMetrics(ctx context.Context, cs kubernetes.Interface) (Metrics, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver metrics: %w", err)
	}
	return ParseMetrics(strings.NewReader(string(b)))
}

// Sum adds the series whose name (with labels) starts with prefix and contains every one of
// subs.
func (m Metrics) Sum(prefix string, subs ...string) float64 {
	total := 0.0
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(k, s)
		}
		if ok {
			total += v
		}
	}
	return total
}

// Histogram is a Prometheus histogram read from a scrape: the cumulative count at each upper
// bound, sorted, +Inf last.
type Histogram struct {
	LE, N []float64
}

// Histogram adds the buckets of the histogram name whose series hold every one of subs.
func (m Metrics) Histogram(name string, subs ...string) Histogram {
	byLE := map[float64]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, name+"_bucket{") || !containsAll(k, subs) {
			continue
		}
		_, rest, ok := strings.Cut(k, `le="`)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(rest[:max(strings.IndexByte(rest, '"'), 0)], 64)
		if err != nil {
			continue
		}
		byLE[le] += v
	}
	var h Histogram
	for _, le := range slices.Sorted(maps.Keys(byLE)) {
		h.LE, h.N = append(h.LE, le), append(h.N, byLE[le])
	}
	return h
}

// Since is what h observed after before, a scrape of the same histogram (a series before
// lacks counts from zero).
func (h Histogram) Since(before Histogram) Histogram {
	out := Histogram{LE: slices.Clone(h.LE), N: slices.Clone(h.N)}
	for i, le := range out.LE {
		if j := slices.Index(before.LE, le); j >= 0 {
			out.N[i] -= before.N[j]
		}
	}
	return out
}

// Count is the number of observations.
func (h Histogram) Count() float64 {
	if len(h.N) == 0 {
		return 0
	}
	return h.N[len(h.N)-1]
}

// Over is the number of observations above bound, which must be one of the bucket bounds
// (otherwise every observation counts).
func (h Histogram) Over(bound float64) float64 {
	if i := slices.Index(h.LE, bound); i >= 0 {
		return h.Count() - h.N[i]
	}
	return h.Count()
}

// Quantile estimates the q-quantile as PromQL's histogram_quantile does: linearly within its
// bucket, the first bucket starting at 0; in the +Inf bucket, the highest finite bound. 0
// without observations.
func (h Histogram) Quantile(q float64) float64 {
	rank := q * h.Count()
	for i, n := range h.N {
		if n < rank || n == 0 {
			continue
		}
		if math.IsInf(h.LE[i], 1) {
			return h.LE[max(i-1, 0)]
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = h.LE[i-1], h.N[i-1]
		}
		return lo + (h.LE[i]-lo)*(rank-below)/(n-below)
	}
	return 0
}

// Slowest is the bucket holding the largest observation, as (lo, hi]; 0, 0 without
// observations.
func (h Histogram) Slowest() (lo, hi float64) {
	for i, n := range h.N {
		if n > 0 && n == h.Count() {
			if i > 0 {
				lo = h.LE[i-1]
			}
			return lo, h.LE[i]
		}
	}
	return 0, 0
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// Counter is the value of an in-process Prometheus counter.
func Counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// Gauge is the value of an in-process Prometheus gauge.
func Gauge(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}
