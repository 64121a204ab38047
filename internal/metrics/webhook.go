package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// Admissions counts admission requests by webhook (mutate-pods, validate-routing) and result
	// (patched, unchanged, denied, allowed, error).
	Admissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_admissions_total",
		Help: "Admission requests handled, by webhook and result.",
	}, []string{"webhook", "result"})

	// AdmissionDuration is the time to answer an admission request, by webhook.
	AdmissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kuik_webhook_admission_duration_seconds",
		Help:    "Time to answer an admission request, by webhook.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"webhook"})

	// AdmissionErrors counts internal errors after which a pod was admitted unchanged, by stage.
	AdmissionErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_admission_errors_total",
		Help: "Internal errors after which the pod was admitted unchanged, by stage.",
	}, []string{"stage"})

	// PodReviews counts the pod webhook's AdmissionReviews by the decoder that read them.
	PodReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_pod_reviews_total",
		Help: "AdmissionReviews the pod webhook received, by the decoder that read them: kuik (what the API server writes) or controller-runtime (any other request).",
	}, []string{"decoder"})

	// Rewrites counts rewritten containers by routing resource kind, name and reason.
	Rewrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_rewrites_total",
		Help: "Containers rewritten, by routing resource kind, name and reason (Always, OnFailure).",
	}, []string{"kind", "name", "reason"})

	// NoAlternatives counts containers none of whose candidates was available.
	NoAlternatives = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuik_webhook_no_alternatives_total",
		Help: "Containers left untouched because no candidate was available.",
	})

	// Probes counts registry probes (cache misses only) by registry and result.
	Probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_registry_probes_total",
		Help: "Registry manifest probes sent, by registry and result.",
	}, []string{"registry", "result"})

	// ProbeDuration is the time of a registry probe, by registry.
	ProbeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kuik_registry_probe_duration_seconds",
		Help:    "Time of a registry manifest probe, by registry.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
	}, []string{"registry"})

	// ProbeRefreshes counts the refresh-ahead probes, by registry label.
	ProbeRefreshes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_registry_probe_refreshes_total",
		Help: "Refresh-ahead probes started in the background, before a result admissions read lapses, by registry (also counted in kuik_registry_probes_total).",
	}, []string{"registry"})

	// HintedPassOvers counts the candidates passed over at the hinted wait, by registry label.
	HintedPassOvers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_hinted_pass_overs_total",
		Help: "Candidates whose registry host was Unreachable lately, passed over for the next one after the hinted wait (--hinted-wait), by registry.",
	}, []string{"registry"})

	// ProbesSkipped counts probes not started, by reason: "deadline" (the admission's deadline
	// had passed), "limit" (the bound on probes in flight was reached) or "trial-limit" (the
	// dry-run probes' own bound was).
	ProbesSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_registry_probes_skipped_total",
		Help: "Registry probes not started, by reason (deadline, limit, trial-limit).",
	}, []string{"reason"})

	// ProbesInFlight is the number of registry probes running now; the webhook sets it to a
	// function of its prober.
	ProbesInFlight = &inFlight{}

	// DryRunDecisions counts containers a dry-run resource would have rewritten, by its kind,
	// name and reason (Always, OnFailure, NoAlternatives).
	DryRunDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_dry_run_decisions_total",
		Help: "Containers a dry-run routing resource would have rewritten, by its kind, name and reason.",
	}, []string{"kind", "name", "reason"})

	// DigestPins counts containers rewritten to a digest (pinDigest), by result: "pinned", or
	// "no-digest" when the probe saw no digest and the candidate was passed over.
	DigestPins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_webhook_digest_pins_total",
		Help: "Containers routed to a pinDigest resource, by result (pinned, no-digest).",
	}, []string{"result"})

	// RoutingResources is the number of routing resources in the webhook's index.
	RoutingResources = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kuik_webhook_routing_resources",
		Help: "Routing resources in the webhook's index.",
	})

	// RoutingResourcesWaiting is the number of routing resources, or of their latest
	// generations, the webhook does not route with yet: --match-conditions-gate and no
	// PodsSent condition at that generation.
	RoutingResourcesWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kuik_webhook_routing_resources_waiting",
		Help: "Routing resources whose latest generation the webhook does not route with yet: --match-conditions-gate, and PodsSent is not True at that generation (an earlier generation marked PodsSent is used meanwhile).",
	})
)

// WebhookCollectors are the webhook's metrics, for registration from main.
func WebhookCollectors() []prometheus.Collector {
	return []prometheus.Collector{Admissions, AdmissionDuration, AdmissionErrors, PodReviews, Rewrites, NoAlternatives, DryRunDecisions, DigestPins, Probes, ProbeDuration, ProbesSkipped, ProbeRefreshes, HintedPassOvers, ProbesInFlight, RoutingResources, RoutingResourcesWaiting}
}

// inFlight is a gauge read from a function set once the prober exists (0 before).
type inFlight struct {
	fn atomic.Pointer[func() int]
}

var inFlightDesc = prometheus.NewDesc("kuik_registry_probes_in_flight", "Registry probes running now.", nil, nil)

// Set makes the gauge read fn.
func (g *inFlight) Set(fn func() int) { g.fn.Store(&fn) }

// Describe implements prometheus.Collector.
func (g *inFlight) Describe(ch chan<- *prometheus.Desc) { ch <- inFlightDesc }

// Collect implements prometheus.Collector.
func (g *inFlight) Collect(ch chan<- prometheus.Metric) {
	v := 0
	if fn := g.fn.Load(); fn != nil {
		v = (*fn)()
	}
	ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(v))
}
