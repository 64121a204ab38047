package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/enix/kuik/internal/metrics"
)

// metricsPage lists each binary's metrics, from its collectors, with the dashboard panels that
// chart them.
func metricsPage(root string) (string, error) {
	type binary struct {
		name    string
		metrics []metricDoc
	}
	var bins []binary
	histograms := map[string]bool{}
	for _, b := range []struct {
		name string
		cols []prometheus.Collector
	}{
		{"webhook", metrics.WebhookCollectors()},
		{"secret-syncer", metrics.SyncerCollectors()},
		{"keeper", metrics.KeeperCollectors()},
	} {
		ms, err := describe(b.cols)
		if err != nil {
			return "", fmt.Errorf("%s: %w", b.name, err)
		}
		for _, m := range ms {
			histograms[m.name] = m.typ == "histogram"
		}
		bins = append(bins, binary{b.name, ms})
	}
	panels, err := dashboardPanels(filepath.Join(root, "charts", "kuik", "files", "dashboards", "kuik.json"), histograms)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("The metrics each binary exports on `--metrics-bind-address`, from internal/metrics.\n" +
		"A histogram's series are `<name>_bucket`, `<name>_sum` and `<name>_count`.\n" +
		"The panels are those of the chart's Grafana dashboard (charts/kuik/files/dashboards).\n" +
		"controller-runtime's own metrics (`workqueue_*`, `rest_client_*`, `leader_election_master_status`) are exported too.\n")
	for _, bin := range bins {
		fmt.Fprintf(&b, "\n## %s\n\n| Metric | Type | Labels | Description | Dashboard panels |\n|--------|------|--------|-------------|------------------|\n", bin.name)
		for _, m := range bin.metrics {
			var ls []string
			for _, l := range m.labels {
				ls = append(ls, "`"+l+"`")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", m.name, m.typ, strings.Join(ls, ", "), cell(m.help), cell(strings.Join(panels[m.name], "; ")))
		}
	}
	return b.String(), nil
}

type metricDoc struct {
	name, typ, help string
	// labels in the order the vector declares them.
	labels []string
}

// describe registers cols in a fresh registry and gathers them. A vector gathers nothing before
// its first child, so each gets one, labelled "0", "1"... in its labels' order, deleted after.
func describe(cols []prometheus.Collector) ([]metricDoc, error) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cols {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering %T: %w", c, err)
		}
		if v := vecOf(c); v != nil {
			vals, err := firstChild(v)
			if err != nil {
				return nil, err
			}
			defer v.DeleteLabelValues(vals...)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var out []metricDoc
	for _, f := range fams {
		if len(f.GetMetric()) != 1 {
			return nil, fmt.Errorf("%s: %d series gathered, want 1", f.GetName(), len(f.GetMetric()))
		}
		lps := f.GetMetric()[0].GetLabel()
		labels := make([]string, len(lps))
		for _, lp := range lps {
			i, err := strconv.Atoi(lp.GetValue())
			if err != nil || i < 0 || i >= len(labels) {
				return nil, fmt.Errorf("%s: label %s=%q is not one docgen set", f.GetName(), lp.GetName(), lp.GetValue())
			}
			labels[i] = lp.GetName()
		}
		out = append(out, metricDoc{name: f.GetName(), typ: typeName(f.GetType()), help: f.GetHelp(), labels: labels})
	}
	return out, nil
}

// vecOf is the metric vector under c, nil for a single metric.
func vecOf(c prometheus.Collector) *prometheus.MetricVec {
	switch v := c.(type) {
	case *prometheus.CounterVec:
		return v.MetricVec
	case *prometheus.GaugeVec:
		return v.MetricVec
	case *prometheus.HistogramVec:
		return v.MetricVec
	case *prometheus.SummaryVec:
		return v.MetricVec
	}
	return nil
}

// firstChild makes v's child labelled "0", "1"... and returns those values.
func firstChild(v *prometheus.MetricVec) ([]string, error) {
	var vals []string
	for i := range 16 {
		if _, err := v.GetMetricWithLabelValues(vals...); err == nil {
			return vals, nil
		}
		vals = append(vals, strconv.Itoa(i))
	}
	return nil, errors.New("a metric vector with more than 15 labels")
}

func typeName(t dto.MetricType) string {
	return strings.ToLower(t.String())
}

// dashboardPanels maps each metric name a target expression of the dashboard names (one of
// histograms by its series) to the titles of the panels that hold it.
func dashboardPanels(path string, histograms map[string]bool) (map[string][]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string][]string{}
	var walk func([]json.RawMessage) error
	walk = func(ps []json.RawMessage) error {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, t := range p.Targets {
				for _, tok := range identRE.FindAllString(t.Expr, -1) {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if base, ok := strings.CutSuffix(tok, suffix); ok && histograms[base] {
							tok = base
						}
					}
					if !slices.Contains(out[tok], p.Title) {
						out[tok] = append(out[tok], p.Title)
					}
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(d.Panels)
}

var identRE = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
