package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of an apply or a status write.
const (
	ResultSuccess = "success"
	ResultError   = "error"
)

var (
	// SyncerApplies counts server-side applies by result.
	SyncerApplies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_applies_total",
		Help: "Server-side applies of injected pull Secrets, by result (success, error).",
	}, []string{"result"})

	// SyncerApplyDuration observes the latency of one apply.
	SyncerApplyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kuik_secret_syncer_apply_duration_seconds",
		Help:    "Latency of one server-side apply of an injected pull Secret.",
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 12),
	})

	// SyncerAppliesSkipped counts applies skipped because nothing would change.
	SyncerAppliesSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_applies_skipped_total",
		Help: "Applies skipped because the in-memory hash of the pair showed nothing would change.",
	})

	// SyncerPairs is the number of (routing resource, namespace) pairs the syncer keeps.
	SyncerPairs = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kuik_secret_syncer_pairs",
		Help: "(routing resource, namespace) pairs the syncer keeps a pull Secret for.",
	})

	// SyncerInjectionFailures counts entries left out, once per cause, by reason.
	SyncerInjectionFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_injection_failures_total",
		Help: "Entries left out of injected pull Secrets, counted once per cause, by reason.",
	}, []string{"reason"})

	// SyncerQueueDepth is the number of pairs waiting in the work queue.
	SyncerQueueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kuik_secret_syncer_queue_depth",
		Help: "(routing resource, namespace) pairs waiting in the secret-syncer's work queue.",
	})

	// SyncerStatusUpdates counts status writes on routing resources by result.
	SyncerStatusUpdates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_status_updates_total",
		Help: "Status subresource writes on routing resources, by result (success, error).",
	}, []string{"result"})

	// SyncerRetentionWrites counts writes of retention records by result.
	SyncerRetentionWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_retention_writes_total",
		Help: "Server-side applies of OnFailure retention records (ConfigMaps in the cluster resource namespace), by result (success, error).",
	}, []string{"result"})

	// ProviderPluginRuns counts credential-provider plugin executions by provider and result.
	ProviderPluginRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_provider_plugin_runs_total",
		Help: "Credential-provider plugin executions, by provider and result (success, error, timeout, invalid-response).",
	}, []string{"provider", "result"})

	// ProviderExecDuration observes the duration of one plugin execution.
	ProviderExecDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kuik_secret_syncer_provider_exec_duration_seconds",
		Help:    "Duration of one credential-provider plugin execution, by provider.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"provider"})

	// ProviderRenewals counts the renewals of a provider credential the syncer already held.
	ProviderRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_provider_renewals_total",
		Help: "Renewals of a provider credential the syncer already held, by provider and result (success, error).",
	}, []string{"provider", "result"})

	// ProviderCredentialExpiry is the earliest expiry of the credentials a kuik-provider-*
	// Secret holds.
	ProviderCredentialExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_secret_syncer_provider_credential_expiry_timestamp_seconds",
		Help: "Unix time at which the earliest credential of a kuik-provider-* Secret expires, by provider and secret.",
	}, []string{"provider", "secret"})

	// ProviderSecretBytes is the size of a kuik-provider-* Secret's data, bounded by the
	// syncer (syncer.MaxProviderSecretBytes, under the API server's 1 MiB).
	ProviderSecretBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_secret_syncer_provider_secret_bytes",
		Help: "Size of a kuik-provider-* Secret's data, which the syncer bounds to 768 KiB (the API server refuses more than 1 MiB), by provider and secret.",
	}, []string{"provider", "secret"})

	// ProviderSecretLeftOut is the number of credentials left out of a kuik-provider-* Secret
	// to keep it within its bound.
	ProviderSecretLeftOut = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_secret_syncer_provider_secret_left_out",
		Help: "Provider credentials left out of a kuik-provider-* Secret to keep it within its bound (their entries are probed without them), by provider and secret.",
	}, []string{"provider", "secret"})

	// ProviderSecretWrites counts server-side applies of kuik-provider-* Secrets by result.
	ProviderSecretWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_secret_syncer_provider_secret_writes_total",
		Help: "Server-side applies of kuik-provider-* Secrets (written only when their content changes), by result (success, error).",
	}, []string{"result"})
)

// MissedPulls counts image pulls that failed on a pod while a routing resource had an
// available candidate for the image (ImagePullMissedRouting), by the resource's kind and name.
var MissedPulls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kuik_secret_syncer_missed_pulls_total",
	Help: "Pods failing to pull an image a routing resource could route now, by its kind and name.",
}, []string{"kind", "name"})

// StuckPodsRecreated counts pods evicted under recreateStuckPods so that their controller
// recreates them, by result: "deleted" (evicted), "error", and, left for later,
// "rate-limited", "in-flight" (another pod of its controller is being evicted) and
// "disruption-budget" (the eviction was refused with 429).
var StuckPodsRecreated = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kuik_secret_syncer_stuck_pods_recreated_total",
	Help: "Stuck pods evicted for their controller to recreate, by result (deleted, error, rate-limited, in-flight, disruption-budget).",
}, []string{"result"})

// FallbackPods is the number of live pods a routing resource routes away now (its
// status.fallbackPods), by kind and name.
var FallbackPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kuik_secret_syncer_fallback_pods",
	Help: "Live pods routed away from their original image by a routing resource, by its kind and name.",
}, []string{"kind", "name"})

// MatchConditions is what the pod webhook's matchConditions, written by the syncer's leader,
// do now: 1 on the current reason (Filtered, CatchAllMirror, ExpressionTooLarge,
// ExpressionTooCostly, UnsafeEntry), 0 on the others seen.
var MatchConditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kuik_secret_syncer_match_conditions",
	Help: "1 on the reason of the pod webhook's matchConditions the leader last applied (Filtered sends only the pods a resource may cover; the others send every pod), 0 on the others.",
}, []string{"reason"})

// MatchConditionsApplies counts server-side applies of the pod webhook's matchConditions by
// result (success, error).
var MatchConditionsApplies = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kuik_secret_syncer_match_conditions_applies_total",
	Help: "Server-side applies of the pod webhook's matchConditions, by result (success, error).",
}, []string{"result"})

// PodsSentWrites counts the leader's writes of a routing resource's PodsSent condition, by
// result (success, error).
var PodsSentWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kuik_secret_syncer_pods_sent_writes_total",
	Help: "Writes of a routing resource's PodsSent condition (its generation is covered by the pod webhook's matchConditions), by result (success, error).",
}, []string{"result"})

// AvailabilityChecks counts the leader's background availability checks by result:
// answered (any HTTP answer), timeout, unreachable, or paused (not sent: the registry asked to
// slow down).
var AvailabilityChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kuik_secret_syncer_availability_checks_total",
	Help: "Background manifest HEADs of the repositories ahead of live fallbacks, by result (answered: any HTTP answer; timeout; unreachable; paused: not sent, the registry rate-limited or reported its limit nearly reached).",
}, []string{"result"})

// UnavailableRepositories is the number of repositories the last checks found giving no
// answer (the status.unavailable entries of every resource, each repository once).
var UnavailableRepositories = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "kuik_secret_syncer_unavailable_repositories",
	Help: "Repositories ahead of live fallbacks that gave the leader's last check no answer (shared with every webhook replica as hints through status.unavailable).",
})

// ObservePluginRun records one plugin execution (credentialprovider.Options.Observe).
func ObservePluginRun(provider, result string, d time.Duration) {
	ProviderPluginRuns.WithLabelValues(provider, result).Inc()
	ProviderExecDuration.WithLabelValues(provider).Observe(d.Seconds())
}

// SyncerCollectors are the secret-syncer's metrics, registered by RegisterSyncer.
func SyncerCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		SyncerApplies, SyncerApplyDuration, SyncerAppliesSkipped, SyncerPairs,
		SyncerInjectionFailures, SyncerQueueDepth, SyncerStatusUpdates, SyncerRetentionWrites,
		ProviderPluginRuns, ProviderExecDuration, ProviderRenewals, ProviderCredentialExpiry, ProviderSecretBytes, ProviderSecretLeftOut, ProviderSecretWrites,
		MissedPulls, StuckPodsRecreated, FallbackPods, MatchConditions, MatchConditionsApplies, PodsSentWrites,
		AvailabilityChecks, UnavailableRepositories,
	}
}

// RegisterSyncer registers the secret-syncer's metrics; call it once, from main.
func RegisterSyncer(reg prometheus.Registerer) error {
	for _, c := range SyncerCollectors() {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering secret-syncer metrics: %w", err)
		}
	}
	return nil
}
