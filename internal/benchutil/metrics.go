package benchutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
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
