package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The keeper's metrics. Their registry label is a registry host some routing resource declares,
// or "other" (route.OtherRegistry): pod authors choose the hosts of the images they run.
var (
	// KeeperCopies counts copies by source registry and result: AlreadyPresent, Tagged, Copied,
	// or a failure reason of status.keep (SourceUnavailable, QuotaExceeded, ...).
	KeeperCopies = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_copies_total",
		Help: "Image copies into keep-enabled mirrors, by source registry and result (AlreadyPresent, Tagged, Copied, or a failure reason).",
	}, []string{"registry", "result"})

	// KeeperBytes counts blob bytes uploaded into mirrors, by source registry.
	KeeperBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_bytes_total",
		Help: "Blob bytes copied into keep-enabled mirrors, by source registry.",
	}, []string{"registry"})

	// KeeperQueueDepth is the number of copies waiting, by source registry.
	KeeperQueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_keeper_queue_depth",
		Help: "Copies waiting in the keeper's queue, by source registry.",
	}, []string{"registry"})

	// KeeperBudget is the manifest GETs the pacer would grant now, by source registry.
	KeeperBudget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_keeper_budget_remaining",
		Help: "Manifest GETs the keeper may still send to a source registry now (0 while frozen after a 429), by registry.",
	}, []string{"registry"})

	// KeeperStalls counts blob transfers abandoned after the stall timeout, by source registry.
	KeeperStalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_stalls_total",
		Help: "Copies abandoned because a blob moved no byte for the stall timeout, by source registry.",
	}, []string{"registry"})

	// KeeperSelfHealChecks counts the self-heal HEADs of kept tags, by result: present, missing
	// (re-queued), error.
	KeeperSelfHealChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_self_heal_checks_total",
		Help: "HEADs of kept tags by the self-heal loop, by result (present, missing, error).",
	}, []string{"result"})

	// KeeperGCDeletions counts kept tags deleted by garbage collection, by mirror and result
	// (deleted, gone, error, unsupported).
	KeeperGCDeletions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_gc_deletions_total",
		Help: "Kept tags deleted by the keeper's garbage collection, by ImageMirror and result (deleted, gone, error, unsupported).",
	}, []string{"mirror", "result"})

	// KeeperGCHeld counts sweeps that deleted nothing for safety, by hold (Unsynced, ListFailed,
	// ClockDoubt).
	KeeperGCHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuik_keeper_gc_held_total",
		Help: "Garbage collection sweeps that deleted nothing for safety, by hold (Unsynced, ListFailed, ClockDoubt).",
	}, []string{"hold"})

	// KeeperKeptTags is the number of tags in the inventory, by mirror.
	KeeperKeptTags = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kuik_keeper_kept_tags",
		Help: "Tags the keeper wrote and keeps (its inventory), by ImageMirror.",
	}, []string{"mirror"})
)

// KeeperCollectors are the keeper's metrics, registered by RegisterKeeper.
func KeeperCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		KeeperCopies, KeeperBytes, KeeperQueueDepth, KeeperBudget, KeeperStalls,
		KeeperSelfHealChecks, KeeperGCDeletions, KeeperGCHeld, KeeperKeptTags,
	}
}

// RegisterKeeper registers the keeper's metrics; call it once, from main.
func RegisterKeeper(reg prometheus.Registerer) error {
	for _, c := range KeeperCollectors() {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering keeper metrics: %w", err)
		}
	}
	return nil
}

// RegisterRuntime registers the Go runtime and process collectors (go_*, process_*) unless
// reg has them already: controller-runtime adds them only to a process that links its
// controller package, which the keeper does not.
func RegisterRuntime(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		// controller-runtime's own options: were its collector registered, this one would be
		// the same (AlreadyRegisteredError), not a clash.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return fmt.Errorf("registering runtime metrics: %w", err)
			}
		}
	}
	return nil
}
