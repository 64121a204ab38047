package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/testutil"
)

// monitoringOn turns on the ServiceMonitors (whose Services name the jobs), the PrometheusRule
// and the dashboard, and the keeper (whose alerts render only with it).
var monitoringOn = map[string]any{"metrics": map[string]any{
	"serviceMonitor":   map[string]any{"enabled": true},
	"prometheusRule":   map[string]any{"enabled": true},
	"grafanaDashboard": map[string]any{"enabled": true},
}, "keeper": map[string]any{"enabled": true}}

// Metrics kuik's rules and dashboard may name that neither kuik nor controller-runtime exports.
// Each is proven elsewhere: the API server's by TestAPIServerReportsKuikFailOpens, up is the
// series Prometheus itself writes for every target.
var foreignMetrics = map[string]string{
	"apiserver_admission_webhook_fail_open_count": "kube-apiserver",
	"up": "Prometheus",
}

// notCharted are the metrics of internal/metrics that no dashboard panel shows, on purpose,
// each with the reason (a histogram by its name, without _bucket). Every other metric kuik exports
// must appear in a panel's expression: a new metric fails TestMonitoringExpressionsNameExportedMetrics
// until it is charted or listed here.
var notCharted = map[string]string{}

// targetLabels are the labels Prometheus (with the Prometheus Operator's ServiceMonitors) puts on
// every scraped series, next to the metric's own.
var targetLabels = []string{"job", "namespace", "instance", "pod", "service", "container", "endpoint"}

// component is which of kuik's scrape jobs exports a metric ("" for none of them).
func component(metric string) string {
	switch {
	case strings.HasPrefix(metric, "kuik_webhook_"), strings.HasPrefix(metric, "kuik_registry_"):
		return "webhook"
	case strings.HasPrefix(metric, "kuik_secret_syncer_"), metric == "leader_election_master_status":
		return "secret-syncer"
	case strings.HasPrefix(metric, "kuik_keeper_"):
		return "keeper"
	}
	return ""
}

// catalog is every metric an expression may select, with the labels its series carry.
type catalog struct {
	labels map[string]map[string]bool
	// jobs are the job label values of kuik's components ("webhook", "secret-syncer", "keeper").
	jobs map[string]string
}

// capture is a Registerer that keeps what is registered.
type capture struct{ cs []prometheus.Collector }

func (c *capture) Register(col prometheus.Collector) error { c.cs = append(c.cs, col); return nil }
func (c *capture) MustRegister(cols ...prometheus.Collector) {
	c.cs = append(c.cs, cols...)
}
func (c *capture) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^{}]*)\}\}$`)

// kuikCatalog is what kuik's binaries export (their collectors, described) and what
// controller-runtime's registry holds once a leader elector exists, as in the secret-syncer.
func kuikCatalog(t *testing.T, r *charts.Rendered) *catalog {
	t.Helper()
	c := &catalog{labels: map[string]map[string]bool{}, jobs: jobs(t, r)}
	add := func(name string, ls ...string) {
		if c.labels[name] == nil {
			c.labels[name] = map[string]bool{}
		}
		for _, l := range append(ls, targetLabels...) {
			c.labels[name][l] = true
		}
	}
	reg := &capture{}
	if err := metrics.RegisterSyncer(reg); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterKeeper(reg); err != nil {
		t.Fatal(err)
	}
	// A fresh registry refuses two collectors of one name, as the binaries' would.
	fresh := prometheus.NewRegistry()
	for _, col := range append(metrics.WebhookCollectors(), reg.cs...) {
		if err := fresh.Register(col); err != nil {
			t.Fatalf("registering %T: %v", col, err)
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			name, err := strconv.Unquote(m[1])
			if err != nil {
				t.Fatal(err)
			}
			var ls []string
			if m[2] != "" {
				ls = strings.Split(m[2], ",")
			}
			switch metricType(t, col) {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", append(ls, "le")...)
				add(name+"_sum", ls...)
				add(name+"_count", ls...)
			case dto.MetricType_SUMMARY:
				add(name, append(ls, "quantile")...)
				add(name+"_sum", ls...)
				add(name+"_count", ls...)
			default:
				add(name, ls...)
			}
		}
	}

	// The secret-syncer's leader elector (controller-runtime's, client-go's underneath) sets
	// leader_election_master_status{name} as soon as it is made; it contacts nothing until run.
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          &resourcelock.LeaseLock{Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: "test"}},
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(_ context.Context) {}, OnStoppedLeading: func() {}},
		Name:      "catalog",
	}); err != nil {
		t.Fatal(err)
	}
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		ls := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = true
			}
		}
		names := slices.Collect(maps.Keys(ls))
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			add(f.GetName()+"_bucket", append(names, "le")...)
			add(f.GetName()+"_sum", names...)
			add(f.GetName()+"_count", names...)
		default:
			add(f.GetName(), names...)
		}
	}
	if c.labels["leader_election_master_status"] == nil {
		t.Fatal("controller-runtime's registry has no leader_election_master_status")
	}
	// The foreign metrics' own labels: the API server's counter has name and type.
	add("apiserver_admission_webhook_fail_open_count", "name", "type")
	add("up")
	return c
}

// metricType tells a histogram or a summary (whose series have suffixes) from the rest: a vector
// by its Go type (it collects nothing before its first child), a single metric by what it writes.
func metricType(t *testing.T, col prometheus.Collector) dto.MetricType {
	t.Helper()
	switch col.(type) {
	case *prometheus.HistogramVec:
		return dto.MetricType_HISTOGRAM
	case *prometheus.SummaryVec:
		return dto.MetricType_SUMMARY
	case *prometheus.CounterVec, *prometheus.GaugeVec:
		return dto.MetricType_UNTYPED
	}
	ch := make(chan prometheus.Metric, 16)
	go func() { col.Collect(ch); close(ch) }()
	out := dto.MetricType_UNTYPED
	for m := range ch {
		var w dto.Metric
		if err := m.Write(&w); err != nil {
			t.Fatal(err)
		}
		switch {
		case w.Histogram != nil:
			out = dto.MetricType_HISTOGRAM
		case w.Summary != nil:
			out = dto.MetricType_SUMMARY
		}
	}
	return out
}

// jobs returns the job label each kuik component's series get: the Prometheus Operator names
// the job after the Service a ServiceMonitor selects.
func jobs(t *testing.T, r *charts.Rendered) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sm := range r.OfKind("ServiceMonitor") {
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		for _, svc := range r.OfKind("Service") {
			l := svc.GetLabels()
			match := true
			for k, v := range sel {
				match = match && l[k] == v
			}
			if match {
				out[sel["app.kubernetes.io/component"]] = svc.GetName()
			}
		}
	}
	if out["webhook"] == "" || out["secret-syncer"] == "" {
		t.Fatalf("no job for each component: %v", out)
	}
	return out
}

// promExpr is one PromQL expression of the chart, with what it is used for.
type promExpr struct {
	where string
	expr  string
	// legend holds the labels a dashboard target's legend or an alert's annotations use.
	legend []string
	// discovery marks a dashboard variable's query, which finds the jobs rather than being
	// restricted to one.
	discovery bool
}

var (
	legendRE  = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	labelsRE  = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	grafanaRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)
)

// ruleExprs returns the alerts of the rendered PrometheusRule, after validating its groups
// with Prometheus' own rule-file checks.
func ruleExprs(t *testing.T, r *charts.Rendered) ([]promExpr, *rulefmt.RuleGroups) {
	t.Helper()
	prs := r.OfKind("PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(prs))
	}
	if prs[0].GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion %s", prs[0].GetAPIVersion())
	}
	spec, ok := prs[0].Object["spec"].(map[string]any)
	if !ok {
		t.Fatal("PrometheusRule has no spec")
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rule groups: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var out []promExpr
	for _, g := range groups.Groups {
		for _, rule := range g.Rules {
			e := promExpr{where: "alert " + rule.Alert, expr: rule.Expr}
			for _, k := range []string{"summary", "description"} {
				if rule.Annotations[k] == "" {
					t.Errorf("alert %s has no %s", rule.Alert, k)
				}
			}
			if !strings.Contains(rule.Annotations["description"], "kubectl ") {
				t.Errorf("alert %s: its description tells no command to look with", rule.Alert)
			}
			if rule.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity", rule.Alert)
			}
			for _, a := range rule.Annotations {
				for _, m := range labelsRE.FindAllStringSubmatch(a, -1) {
					e.legend = append(e.legend, m[1])
				}
			}
			out = append(out, e)
		}
	}
	return out, groups
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Title      string                   `json:"title"`
	Type       string                   `json:"type"`
	Datasource *datasourceRef           `json:"datasource"`
	Targets    []struct {
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// dashboardExprs returns the expressions of the dashboard's targets and variables, with
// Grafana's variables replaced by values of the rendered release.
func dashboardExprs(t *testing.T, r *charts.Rendered, c *catalog) []promExpr {
	t.Helper()
	var cm *unstructured.Unstructured
	for _, o := range r.OfKind("ConfigMap") {
		if o.GetLabels()["grafana_dashboard"] == "1" {
			if cm != nil {
				t.Fatal("two dashboard ConfigMaps")
			}
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap labelled grafana_dashboard: \"1\"")
	}
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "kuik.json")
	file, err := os.ReadFile(filepath.Join(charts.Dir(), "files", "dashboards", "kuik.json"))
	if err != nil {
		t.Fatal(err)
	}
	if raw != string(file) {
		t.Error("the ConfigMap does not hold files/dashboards/kuik.json as it is")
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard has no uid or title")
	}

	vars := map[string]string{
		"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
	}
	defined := map[string]bool{}
	var out []promExpr
	for _, v := range d.Templating.List {
		defined[v.Name] = true
		switch v.Type {
		case "datasource":
			if string(v.Query) != `"prometheus"` {
				t.Errorf("variable %s is not a Prometheus data source: %s", v.Name, v.Query)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				t.Errorf("variable %s does not query the datasource variable", v.Name)
			}
			m := labelValuesRE.FindStringSubmatch(v.Definition)
			if m == nil {
				t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
				continue
			}
			out = append(out, promExpr{where: "variable " + v.Name, expr: m[1], legend: []string{m[2]}, discovery: true})
		default:
			t.Errorf("variable %s of type %s", v.Name, v.Type)
		}
	}
	for name, val := range map[string]string{"datasource": "", "namespace": ns, "webhook_job": c.jobs["webhook"], "syncer_job": c.jobs["secret-syncer"], "keeper_job": c.jobs["keeper"]} {
		if !defined[name] {
			t.Errorf("dashboard has no variable %s", name)
		}
		vars[name] = val
	}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q lies outside Grafana's 24 columns: %+v", p.Title, g)
			}
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no target", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the datasource variable", p.Title)
			}
			for i, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q target %d does not use the datasource variable", p.Title, i)
				}
				e := promExpr{where: fmt.Sprintf("panel %q target %d", p.Title, i), expr: tg.Expr}
				for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
					e.legend = append(e.legend, m[1])
				}
				out = append(out, e)
			}
		}
	}
	walk(d.Panels)
	for i := range out {
		out[i].expr = grafanaRE.ReplaceAllStringFunc(out[i].expr, func(s string) string {
			name := grafanaRE.FindStringSubmatch(s)[1]
			v, ok := vars[name]
			if !ok {
				t.Errorf("%s: unknown Grafana variable $%s", out[i].where, name)
			}
			return v
		})
	}
	return out
}

// check parses an expression and returns what is wrong with it: a metric kuik does not
// export, a label its series do not carry, a kuik metric not restricted to its component's
// job, a legend or annotation label the result does not have.
func (c *catalog) check(e promExpr) []string {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %q: %v", e.where, e.expr, err)}
	}
	var problems []string
	bad := func(format string, a ...any) {
		problems = append(problems, e.where+": "+fmt.Sprintf(format, a...))
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := n.Name
			for _, m := range n.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					if m.Type != labels.MatchEqual {
						bad("selects metrics by a %s matcher on __name__: %s", m.Type, m)
					}
					name = m.Value
				}
			}
			ls, ok := c.labels[name]
			if !ok {
				bad("metric %q is not one kuik exports", name)
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !ls[m.Name] {
					bad("metric %s has no label %q", name, m.Name)
				}
			}
			if comp := component(name); comp != "" && !e.discovery {
				own, other := c.jobs[comp], c.jobs["webhook"]
				if comp == "webhook" {
					other = c.jobs["secret-syncer"]
				}
				job := false
				for _, m := range n.LabelMatchers {
					if m.Name == "job" {
						job = m.Matches(own) && !m.Matches(other)
					}
				}
				if !job {
					bad("%s is not restricted to the %s job %q", n, comp, own)
				}
			}
		case *parser.AggregateExpr:
			if n.Without {
				break
			}
			have := c.labelsUnder(n.Expr)
			for _, l := range n.Grouping {
				if !have[l] {
					bad("groups by %q, which none of its series has", l)
				}
			}
		case *parser.BinaryExpr:
			if n.VectorMatching == nil {
				break
			}
			have := c.labelsUnder(n)
			for _, l := range n.VectorMatching.MatchingLabels {
				if !have[l] {
					bad("matches on %q, which none of its series has", l)
				}
			}
		}
		return nil
	})
	if out, known := outLabels(expr, c); known {
		for _, l := range e.legend {
			if !out[l] {
				bad("uses label %q, which its result (%v) does not have", l, sortedKeys(out))
			}
		}
	} else if len(e.legend) > 0 {
		bad("uses labels %v of a result whose labels cannot be told", e.legend)
	}
	return problems
}

// labelsUnder returns the labels of every series an expression selects.
func (c *catalog) labelsUnder(n parser.Node) map[string]bool {
	out := map[string]bool{}
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for l := range c.labels[vs.Name] {
				out[l] = true
			}
		}
		return nil
	})
	return out
}

// outLabels returns the labels of an expression's result, when they can be told.
func outLabels(n parser.Expr, c *catalog) (map[string]bool, bool) {
	switch n := n.(type) {
	case *parser.ParenExpr:
		return outLabels(n.Expr, c)
	case *parser.VectorSelector:
		return c.labelsUnder(n), true
	case *parser.MatrixSelector:
		return outLabels(n.VectorSelector, c)
	case *parser.AggregateExpr:
		if n.Without {
			return nil, false
		}
		out := map[string]bool{}
		for _, l := range n.Grouping {
			out[l] = true
		}
		return out, true
	case *parser.Call:
		switch n.Func.Name {
		case "histogram_quantile":
			out, ok := outLabels(n.Args[1], c)
			delete(out, "le")
			return out, ok
		case "rate", "increase", "irate", "delta", "deriv":
			out, ok := outLabels(n.Args[0], c)
			delete(out, model.MetricNameLabel)
			return out, ok
		case "absent":
			// The equality matchers of its selector.
			out := map[string]bool{}
			if vs, ok := n.Args[0].(*parser.VectorSelector); ok {
				for _, m := range vs.LabelMatchers {
					if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
						out[m.Name] = true
					}
				}
			}
			return out, true
		}
		return nil, false
	case *parser.BinaryExpr:
		l, lok := outLabels(n.LHS, c)
		if n.RHS.Type() == parser.ValueTypeScalar || n.VectorMatching == nil {
			return l, lok
		}
		r, rok := outLabels(n.RHS, c)
		switch n.Op {
		case parser.LUNLESS:
			return l, lok
		case parser.LOR:
			// Either side's series: only labels both have are sure.
			out := map[string]bool{}
			for k := range l {
				if r[k] {
					out[k] = true
				}
			}
			return out, lok && rok
		}
		if n.VectorMatching.Card == parser.CardOneToOne && len(n.VectorMatching.MatchingLabels) > 0 && n.VectorMatching.On {
			out := map[string]bool{}
			for _, k := range n.VectorMatching.MatchingLabels {
				out[k] = true
			}
			return out, true
		}
		return l, lok
	}
	return nil, false
}

func sortedKeys(m map[string]bool) []string {
	out := slices.Collect(maps.Keys(m))
	sort.Strings(out)
	return out
}

// webhookNames are the names of the webhooks of the rendered webhook configurations.
func webhookNames(t *testing.T, r *charts.Rendered) []string {
	t.Helper()
	var names []string
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		for _, o := range r.OfKind(kind) {
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				if n, ok := h.(map[string]any)["name"].(string); ok {
					names = append(names, n)
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no webhooks rendered")
	}
	return names
}

// failOpenSelectors are the selectors of apiserver_admission_webhook_fail_open_count in exprs.
func failOpenSelectors(t *testing.T, exprs []promExpr) []*parser.VectorSelector {
	t.Helper()
	var out []*parser.VectorSelector
	for _, e := range exprs {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr)
		if err != nil {
			continue // reported by check
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && vs.Name == "apiserver_admission_webhook_fail_open_count" {
				out = append(out, vs)
			}
			return nil
		})
	}
	return out
}

// Every PromQL expression of the PrometheusRule and of the dashboard parses with Prometheus'
// parser, the rule groups pass Prometheus' rule-file checks, and every metric they select is one
// kuik exports (or one of the short foreignMetrics list) with the labels they use, restricted to
// the job of the component that exports it.
func TestMonitoringExpressionsNameExportedMetrics(t *testing.T) {
	r := render(t, monitoringOn)
	c := kuikCatalog(t, r)
	rules, _ := ruleExprs(t, r)
	dash := dashboardExprs(t, r, c)
	if len(rules) < 9 || len(dash) < 30 {
		t.Fatalf("%d alerts and %d dashboard expressions: the rendering lost some", len(rules), len(dash))
	}
	selected := map[string]bool{}
	for _, e := range append(rules, dash...) {
		for _, p := range c.check(e) {
			t.Error(p)
		}
		if expr, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr); err == nil {
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					selected[vs.Name] = true
				}
				return nil
			})
		}
	}
	// The dashboard shows every metric kuik exports (a histogram by its buckets).
	inDashboard := map[string]bool{}
	for _, e := range dash {
		if expr, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr); err == nil {
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					inDashboard[vs.Name] = true
				}
				return nil
			})
		}
	}
	for name := range c.labels {
		if !strings.HasPrefix(name, "kuik_") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") && c.labels[strings.TrimSuffix(name, "_count")+"_bucket"] != nil {
			continue
		}
		if _, ok := notCharted[strings.TrimSuffix(name, "_bucket")]; ok {
			if inDashboard[name] {
				t.Errorf("notCharted lists %s, which a panel shows: drop it from the list", name)
			}
			continue
		}
		if !inDashboard[name] {
			t.Errorf("no panel of the dashboard shows %s: add one to charts/kuik/files/dashboards/kuik.json, or list it in notCharted with the reason", name)
		}
	}
	for name := range notCharted {
		if c.labels[name] == nil && c.labels[name+"_bucket"] == nil {
			t.Errorf("notCharted lists %s, which kuik does not export: drop it", name)
		}
	}
	for name := range foreignMetrics {
		if !selected[name] {
			t.Errorf("foreignMetrics allows %s, which nothing selects: drop it", name)
		}
	}

	// The alerts the issue asks for, on the metrics that count each.
	wantAlerts := map[string]string{
		"KuikWebhookAdmissionErrors":      "kuik_webhook_admission_errors_total",
		"KuikWebhookFailOpen":             "apiserver_admission_webhook_fail_open_count",
		"KuikPullSecretInjectionFailures": "kuik_secret_syncer_injection_failures_total",
		"KuikProviderCredentialExpiring":  "kuik_secret_syncer_provider_credential_expiry_timestamp_seconds",
		"KuikMissedPulls":                 "kuik_secret_syncer_missed_pulls_total",
		"KuikProbeLimitReached":           `kuik_registry_probes_skipped_total{`,
		"KuikWebhookDown":                 "up{",
		"KuikRoutingResourcesWaiting":     "kuik_webhook_routing_resources_waiting{",
		"KuikSecretSyncerDown":            "up{",
		"KuikSecretSyncerNoLeader":        "leader_election_master_status{",
		"KuikKeeperCopiesFailing":         "kuik_keeper_copies_total{",
		"KuikKeeperRegistryFrozen":        "kuik_keeper_budget_remaining{",
		"KuikKeeperGarbageCollectionHeld": "kuik_keeper_gc_held_total{",
		"KuikKeeperKeptTagsDisappearing":  `kuik_keeper_self_heal_checks_total{`,
		"KuikKeeperDown":                  "up{",
	}
	got := map[string]string{}
	for _, e := range rules {
		got[strings.TrimPrefix(e.where, "alert ")] = e.expr
	}
	for alert, metric := range wantAlerts {
		if !strings.Contains(got[alert], metric) {
			t.Errorf("alert %s: %q does not select %s", alert, got[alert], metric)
		}
	}
	if !strings.Contains(got["KuikProbeLimitReached"], `reason="limit"`) {
		t.Errorf("KuikProbeLimitReached counts more than the bound's skips: %s", got["KuikProbeLimitReached"])
	}

	// The API server's fail-open counter is selected for kuik's webhooks only: every webhook
	// the chart renders, and no look-alike (the dots are not wildcards).
	sels := failOpenSelectors(t, append(rules, dash...))
	if len(sels) < 2 {
		t.Fatalf("%d selectors of the API server's fail-open counter, want the alert's and the dashboard's", len(sels))
	}
	for _, vs := range sels {
		for _, name := range webhookNames(t, r) {
			if !matchesAll(vs, map[string]string{"name": name, "type": "admit"}) {
				t.Errorf("%s does not select the fail-opens of webhook %s", vs, name)
			}
			if lookalike := strings.ReplaceAll(name, ".", "x"); matchesAll(vs, map[string]string{"name": lookalike, "type": "admit"}) {
				t.Errorf("%s selects the fail-opens of webhook %s too", vs, lookalike)
			}
		}
		if matchesAll(vs, map[string]string{"name": "pods.other.example.com", "type": "admit"}) {
			t.Errorf("%s selects another webhook's fail-opens", vs)
		}
	}
}

// matchesAll reports whether a series with those labels (and the selector's metric name) is one
// the selector selects.
func matchesAll(vs *parser.VectorSelector, ls map[string]string) bool {
	for _, m := range vs.LabelMatchers {
		v := ls[m.Name]
		if m.Name == model.MetricNameLabel {
			v = vs.Name
		}
		if !m.Matches(v) {
			return false
		}
	}
	return true
}

// The checks fail on the mistakes they are there for: a metric name with a typo, a label the
// metric does not have, a kuik metric on the other component's job, a legend or annotation label
// the result lacks, an expression that does not parse.
func TestMonitoringCheckCatchesMistakes(t *testing.T) {
	r := render(t, monitoringOn)
	c := kuikCatalog(t, r)
	wh := fmt.Sprintf(`job=%q,namespace=%q`, c.jobs["webhook"], ns)
	sy := fmt.Sprintf(`job=%q,namespace=%q`, c.jobs["secret-syncer"], ns)
	good := promExpr{where: "good", expr: `sum by (stage) (rate(kuik_webhook_admission_errors_total{` + wh + `}[5m]))`, legend: []string{"stage"}}
	if p := c.check(good); len(p) != 0 {
		t.Fatalf("a correct expression is refused: %v", p)
	}
	for _, e := range []promExpr{
		{where: "typo", expr: `sum(rate(kuik_webhook_admision_errors_total{` + wh + `}[5m]))`},
		{where: "by name", expr: `sum(rate({__name__="kuik_webhook_admissions_totl",` + wh + `}[5m]))`},
		{where: "regex name", expr: `sum(rate({__name__=~"kuik_webhook_.*",` + wh + `}[5m]))`},
		{where: "not kuik's", expr: `sum(rate(http_requests_total{` + wh + `}[5m]))`},
		{where: "bucket of a counter", expr: `sum(rate(kuik_webhook_admissions_total_bucket{` + wh + `}[5m]))`},
		{where: "label", expr: `sum(rate(kuik_webhook_admission_errors_total{` + wh + `,stag="route"}[5m]))`},
		{where: "grouping", expr: `sum by (stagee) (rate(kuik_webhook_admission_errors_total{` + wh + `}[5m]))`},
		{where: "legend", expr: good.expr, legend: []string{"result"}},
		{where: "wrong job", expr: `sum(rate(kuik_webhook_admission_errors_total{` + sy + `}[5m]))`},
		{where: "no job", expr: `sum(kuik_secret_syncer_pairs{namespace="x"})`},
		{where: "any job", expr: `sum(kuik_secret_syncer_pairs{job=~".+"})`},
		{where: "syntax", expr: `sum by (stage) (rate(kuik_webhook_admission_errors_total{` + wh + `}[5m])`},
	} {
		if p := c.check(e); len(p) == 0 {
			t.Errorf("%s: %q passes the checks", e.where, e.expr)
		}
	}
}

// With the defaults the chart renders neither the PrometheusRule nor the dashboard; each
// value turns on its own object only.
func TestMonitoringObjectsAreOptional(t *testing.T) {
	dashboards := func(r *charts.Rendered) int {
		n := 0
		for _, o := range r.OfKind("ConfigMap") {
			if _, ok, _ := unstructured.NestedString(o.Object, "data", "kuik.json"); ok {
				n++
			}
		}
		return n
	}
	off := render(t, nil)
	if n := len(off.OfKind("PrometheusRule")); n != 0 {
		t.Errorf("%d PrometheusRules by default", n)
	}
	if n := dashboards(off); n != 0 {
		t.Errorf("%d dashboard ConfigMaps by default", n)
	}
	if strings.Contains(off.Manifest, "grafana_dashboard") || strings.Contains(off.Manifest, "monitoring.coreos.com") {
		t.Error("the default rendering mentions monitoring objects")
	}
	explicitlyOff := render(t, map[string]any{"metrics": map[string]any{
		"serviceMonitor":   map[string]any{"enabled": true},
		"prometheusRule":   map[string]any{"enabled": false},
		"grafanaDashboard": map[string]any{"enabled": false},
	}})
	if n, d := len(explicitlyOff.OfKind("PrometheusRule")), dashboards(explicitlyOff); n != 0 || d != 0 {
		t.Errorf("disabled: %d PrometheusRules, %d dashboards", n, d)
	}
	onlyRule := render(t, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
	if n, d := len(onlyRule.OfKind("PrometheusRule")), dashboards(onlyRule); n != 1 || d != 0 {
		t.Errorf("prometheusRule only: %d PrometheusRules, %d dashboards", n, d)
	}
	onlyDash := render(t, map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}})
	if n, d := len(onlyDash.OfKind("PrometheusRule")), dashboards(onlyDash); n != 0 || d != 1 {
		t.Errorf("grafanaDashboard only: %d PrometheusRules, %d dashboards", n, d)
	}
	if msgs := charts.Lint(ns, monitoringOn); len(msgs) != 0 {
		t.Errorf("helm lint: %v", msgs)
	}
}

// The values shape the objects: namespace, labels and annotations of both, the sidecar's label,
// thresholds, windows and for durations, an alert turned off, custom series selectors, and no
// leader alert without leader election.
func TestMonitoringValues(t *testing.T) {
	r := render(t, map[string]any{
		"syncer": map[string]any{"leaderElection": false},
		"metrics": map[string]any{
			"prometheusRule": map[string]any{
				"enabled":          true,
				"namespace":        "monitoring",
				"additionalLabels": map[string]any{"release": "prom"},
				"alertLabels":      map[string]any{"team": "platform"},
				"webhookSelector":  `job="kuik-webhook",cluster="a"`,
				"syncerSelector":   `job="kuik-syncer"`,
				"alerts": map[string]any{
					"missedPulls":              map[string]any{"enabled": false},
					"webhookAdmissionErrors":   map[string]any{"threshold": 3, "window": "15m", "for": "2m", "severity": "critical"},
					"providerCredentialExpiry": map[string]any{"thresholdSeconds": 7200},
				},
			},
			"grafanaDashboard": map[string]any{
				"enabled":     true,
				"namespace":   "grafana",
				"label":       "kuik.example.com/dashboard",
				"labelValue":  "yes",
				"labels":      map[string]any{"extra": "x"},
				"annotations": map[string]any{"grafana_folder": "kuik"},
			},
		},
	})
	pr := r.OfKind("PrometheusRule")
	if len(pr) != 1 {
		t.Fatalf("%d PrometheusRules", len(pr))
	}
	if pr[0].GetNamespace() != "monitoring" || pr[0].GetLabels()["release"] != "prom" {
		t.Errorf("PrometheusRule namespace %q labels %v", pr[0].GetNamespace(), pr[0].GetLabels())
	}
	_, groups := ruleExprs(t, r)
	alerts := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, rule := range g.Rules {
			alerts[rule.Alert] = rule
			if rule.Labels["team"] != "platform" {
				t.Errorf("alert %s labels %v", rule.Alert, rule.Labels)
			}
		}
	}
	for _, gone := range []string{"KuikMissedPulls", "KuikSecretSyncerNoLeader"} {
		if _, ok := alerts[gone]; ok {
			t.Errorf("alert %s rendered", gone)
		}
	}
	e := alerts["KuikWebhookAdmissionErrors"]
	if !strings.Contains(e.Expr, `{job="kuik-webhook",cluster="a",stage!~"annotations|records"}[15m])) > 3`) || time.Duration(e.For) != 2*time.Minute || e.Labels["severity"] != "critical" {
		t.Errorf("KuikWebhookAdmissionErrors: %q for %s labels %v", e.Expr, e.For, e.Labels)
	}
	if x := alerts["KuikProviderCredentialExpiring"].Expr; !strings.Contains(x, `{job="kuik-syncer"}`) || !strings.HasSuffix(x, "< 7200") {
		t.Errorf("KuikProviderCredentialExpiring: %q", x)
	}

	var cm *unstructured.Unstructured
	for _, o := range r.OfKind("ConfigMap") {
		if _, ok, _ := unstructured.NestedString(o.Object, "data", "kuik.json"); ok {
			cm = o
		}
	}
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if cm.GetNamespace() != "grafana" || cm.GetLabels()["kuik.example.com/dashboard"] != "yes" || cm.GetLabels()["extra"] != "x" || cm.GetAnnotations()["grafana_folder"] != "kuik" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v", cm.GetNamespace(), cm.GetName(), cm.GetLabels(), cm.GetAnnotations())
	}
	if _, ok := cm.GetLabels()["grafana_dashboard"]; ok {
		t.Error("the default sidecar label stays with another label configured")
	}
	for _, bad := range []map[string]any{
		{"prometheusRule": map[string]any{"alerts": map[string]any{"webhookDown": map[string]any{"for": "5 minutes"}}}},
		{"prometheusRule": map[string]any{"alerts": map[string]any{"missedPulls": map[string]any{"threshold": -1}}}},
		{"prometheusRule": map[string]any{"webhookSelector": `job="x"}) or vector(1`}},
		{"prometheusRule": map[string]any{"alerts": map[string]any{"unknown": map[string]any{}}}},
		{"grafanaDashboard": map[string]any{"label": "not a label"}},
	} {
		if err := renderErr(map[string]any{"metrics": bad}); err == nil {
			t.Errorf("values %v accepted", bad)
		}
	}
}

// kuik's webhooks as the chart renders them, pointed at a dead 127.0.0.1 port with failurePolicy
// Ignore and limited to one namespace, fail open on a pod create (the pod webhook) and on a
// ConfigMap create (the routing webhook, its rules moved there): the real API server then
// counts apiserver_admission_webhook_fail_open_count{name,type} for each, and every selector of
// that counter in the rules and the dashboard selects those series.
func TestAPIServerReportsKuikFailOpens(t *testing.T) {
	if cp == nil {
		t.Skip("needs a control plane (not under -short)")
	}
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	const probeNS = "kuik-fail-open"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probeNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), probeNS, metav1.DeleteOptions{})
	})

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String() + "/dead"
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	r := render(t, monitoringOn)
	ignore := admissionregistrationv1.Ignore
	onlyProbeNS := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": probeNS}}
	point := func(cc *admissionregistrationv1.WebhookClientConfig) {
		cc.Service = nil
		cc.URL = &dead
		cc.CABundle = cp.CA.PEM
	}
	var names []string
	for _, u := range r.OfKind("MutatingWebhookConfiguration") {
		mwc := convert[admissionregistrationv1.MutatingWebhookConfiguration](t, u)
		mwc.ObjectMeta = metav1.ObjectMeta{Name: "kuik-fail-open-probe"}
		for i := range mwc.Webhooks {
			h := &mwc.Webhooks[i]
			point(&h.ClientConfig)
			h.FailurePolicy, h.NamespaceSelector, h.ObjectSelector = &ignore, onlyProbeNS, nil
			names = append(names, h.Name)
		}
		if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
		})
	}
	var validating []string
	for _, u := range r.OfKind("ValidatingWebhookConfiguration") {
		vwc := convert[admissionregistrationv1.ValidatingWebhookConfiguration](t, u)
		vwc.ObjectMeta = metav1.ObjectMeta{Name: "kuik-fail-open-probe"}
		for i := range vwc.Webhooks {
			h := &vwc.Webhooks[i]
			point(&h.ClientConfig)
			h.FailurePolicy, h.NamespaceSelector, h.ObjectSelector = &ignore, onlyProbeNS, nil
			scope := admissionregistrationv1.NamespacedScope
			h.Rules = []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: &scope},
			}}
			names = append(names, h.Name)
			validating = append(validating, h.Name)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
		})
	}
	if len(names) != len(webhookNames(t, r)) || len(validating) == 0 {
		t.Fatalf("webhooks %v, validating %v", names, validating)
	}

	// Webhook configurations take effect asynchronously: create (server-side dry run) until the
	// API server has counted a fail-open of each webhook.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: probeNS},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/app:1"}}},
	}
	cmap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: probeNS}}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var series []map[string]string
	testutil.Eventually(t, time.Minute, "fail-opens of kuik's webhooks in the API server's metrics", func(ctx context.Context) error {
		if _, err := cs.CoreV1().Pods(probeNS).Create(ctx, pod, dryRun); err != nil {
			return fmt.Errorf("creating a pod: %w", err)
		}
		if _, err := cs.CoreV1().ConfigMaps(probeNS).Create(ctx, cmap, dryRun); err != nil {
			return fmt.Errorf("creating a ConfigMap: %w", err)
		}
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("scraping the API server: %w", err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("parsing the API server's metrics: %w", err)
		}
		f := fams["apiserver_admission_webhook_fail_open_count"]
		if f == nil {
			return errors.New("no apiserver_admission_webhook_fail_open_count family")
		}
		series = series[:0]
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, lp := range m.GetLabel() {
				ls[lp.GetName()] = lp.GetValue()
			}
			series = append(series, ls)
			if m.GetCounter().GetValue() > 0 {
				seen[ls["name"]] = true
			}
		}
		for _, n := range names {
			if !seen[n] {
				return fmt.Errorf("no fail-open of %s counted yet (series %v)", n, series)
			}
		}
		return nil
	})

	rules, _ := ruleExprs(t, r)
	sels := failOpenSelectors(t, append(rules, dashboardExprs(t, r, kuikCatalog(t, r))...))
	if len(sels) == 0 {
		t.Fatal("nothing selects the API server's fail-open counter")
	}
	for _, vs := range sels {
		for _, n := range names {
			found := false
			for _, ls := range series {
				if ls["name"] == n && matchesAll(vs, ls) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s selects none of the API server's series for webhook %s: %v", vs, n, series)
			}
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel && !slices.ContainsFunc(series, func(ls map[string]string) bool { _, ok := ls[m.Name]; return ok }) {
				t.Errorf("%s matches on label %q, which the API server's series do not carry", vs, m.Name)
			}
		}
	}
}
