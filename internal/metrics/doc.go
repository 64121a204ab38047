// Package metrics holds kuik's Prometheus metrics as package-level vectors, registered by each
// binary's main (RegisterSyncer, RegisterKeeper; WebhookCollectors for the webhook), so that a
// binary exports only its own. Every name starts with kuik_.
//
// # webhook (webhook.go)
//
//   - kuik_webhook_admissions_total{webhook,result}: admission requests, webhook "mutate-pods" or
//     "validate-routing", result "patched", "unchanged", "error" (admitted unchanged),
//     "allowed" or "denied".
//   - kuik_webhook_admission_duration_seconds{webhook}: time to answer an admission request.
//   - kuik_webhook_admission_errors_total{stage}: internal errors after which a pod was admitted
//     unchanged (decode, index, namespace, route, panic).
//   - kuik_webhook_pod_reviews_total{decoder}: the pod webhook's AdmissionReviews, by the decoder
//     that read them: "kuik" (admission.k8s.io/v1 as the API server writes it: only the fields
//     the mutator reads) or "controller-runtime" (any other request, read whole).
//   - kuik_webhook_rewrites_total{kind,name,reason}: containers rewritten, by routing resource and
//     reason (Always, OnFailure).
//   - kuik_webhook_no_alternatives_total: containers left untouched, no candidate available.
//   - kuik_registry_probes_total{registry,result}: manifest probes sent (cache misses), result
//     Available, NotFound, Unreachable, InvalidAuth, QuotaExceeded or Invalid. registry is a
//     registry host some routing resource declares, or "other" (an original no entry covers):
//     pod authors choose hosts, so the label values are bounded by the routing resources.
//   - kuik_registry_probe_duration_seconds{registry}: time of a manifest probe.
//   - kuik_registry_probes_skipped_total{reason}: probes not started, reason "deadline" (the
//     admission's deadline had passed), "limit" (the bound on probes in flight was reached:
//     --max-probes-in-flight) or "trial-limit" (the dry-run probes' own bound of the same size).
//   - kuik_registry_probe_refreshes_total{registry}: refresh-ahead probes started in the
//     background before a result admissions read lapses (--probe-refresh-idle); they are in
//     kuik_registry_probes_total too.
//   - kuik_webhook_hinted_pass_overs_total{registry}: candidates whose host was Unreachable
//     lately, passed over for the next one after the hinted wait (--hinted-wait).
//   - kuik_registry_probes_in_flight: probes running now.
//   - kuik_webhook_dry_run_decisions_total{kind,name,reason}: containers a dry-run resource would
//     have rewritten (recorded in the pod's kuik.enix.io/dry-run annotation).
//   - kuik_webhook_digest_pins_total{result}: containers routed to a pinDigest resource, result
//     "pinned" or "no-digest" (the probe saw no digest; the candidate was passed over).
//   - kuik_webhook_routing_resources: routing resources in the webhook's index.
//   - kuik_webhook_routing_resources_waiting: resources whose latest generation it does not
//     route with yet (--match-conditions-gate, no PodsSent at that generation).
//
// # secret-syncer (syncer.go)
//
//   - kuik_secret_syncer_applies_total{result}: server-side applies of injected pull Secrets,
//     result "success" or "error".
//   - kuik_secret_syncer_apply_duration_seconds: latency of one server-side apply.
//   - kuik_secret_syncer_applies_skipped_total: applies skipped because the pair's in-memory
//     hash showed nothing would change.
//   - kuik_secret_syncer_pairs: (routing resource, namespace) pairs the syncer keeps a Secret for.
//   - kuik_secret_syncer_injection_failures_total{reason}: entries left out of a pull Secret,
//     counted once per cause (a resource's entry and reason), with the reason of the
//     PullSecretInjectionFailed event (SecretNotFound, NotDockerConfig, InvalidDockerConfig,
//     NoCredentialForPath, ProviderNotConfigured, ProviderNotMatched, ServiceAccountRequired,
//     ProviderFailed, ProviderRenewalFailed, ProviderSecretFull).
//   - kuik_secret_syncer_queue_depth: (resource, namespace) pairs waiting in the work queue.
//   - kuik_secret_syncer_status_updates_total{result}: status subresource writes on routing
//     resources, result "success" or "error".
//   - kuik_secret_syncer_retention_writes_total{result}: server-side applies of the OnFailure
//     retention records (one ConfigMap kuik-retain-<kind>-<name> per resource in the cluster
//     resource namespace, which keep retention across restarts), result "success" or "error".
//   - kuik_secret_syncer_provider_plugin_runs_total{provider,result}: credential-provider plugin
//     executions, result "success", "error", "timeout" or "invalid-response".
//   - kuik_secret_syncer_provider_exec_duration_seconds{provider}: duration of one execution.
//   - kuik_secret_syncer_provider_renewals_total{provider,result}: renewals of a credential the
//     syncer already held, result "success" or "error".
//   - kuik_secret_syncer_provider_credential_expiry_timestamp_seconds{provider,secret}: when the
//     earliest credential of a kuik-provider-* Secret expires (alert on time() getting close).
//   - kuik_secret_syncer_provider_secret_bytes{provider,secret}: the size of a kuik-provider-*
//     Secret's data, which the syncer bounds to 768 KiB (the API server refuses 1 MiB).
//   - kuik_secret_syncer_provider_secret_left_out{provider,secret}: credentials left out of a
//     kuik-provider-* Secret to keep it within that bound (their entries say ProviderSecretFull).
//   - kuik_secret_syncer_provider_secret_writes_total{result}: server-side applies of
//     kuik-provider-* Secrets, written only when their content changes.
//   - kuik_secret_syncer_missed_pulls_total{kind,name}: pods failing to pull an image the
//     resource could route to an available candidate now (ImagePullMissedRouting events).
//   - kuik_secret_syncer_stuck_pods_recreated_total{result}: pods evicted under
//     recreateStuckPods, result "deleted", "error", "rate-limited", "in-flight" or
//     "disruption-budget".
//   - kuik_secret_syncer_fallback_pods{kind,name}: live pods the resource routes away now.
//   - kuik_secret_syncer_match_conditions{reason}: 1 on the reason of the pod webhook's
//     matchConditions last applied (--match-conditions-of), 0 on the others.
//   - kuik_secret_syncer_match_conditions_applies_total{result}: their server-side applies.
//   - kuik_secret_syncer_pods_sent_writes_total{result}: writes of the resources' PodsSent
//     condition.
//   - kuik_secret_syncer_availability_checks_total{result}: background HEADs of the
//     repositories ahead of live fallbacks (answered, timeout, unreachable, paused).
//   - kuik_secret_syncer_unavailable_repositories: those the last checks found giving no
//     answer (status.unavailable).
//
// # keeper (keeper.go)
//
// registry is a registry host some routing resource declares, or "other", as for the webhook.
//
//   - kuik_keeper_copies_total{registry,result}: copies into keep-enabled mirrors, result
//     "AlreadyPresent", "Tagged", "Copied" or a failure reason of status.keep
//     (SourceUnavailable, QuotaExceeded, AuthRequired, PushFailed, TooLarge, Stalled).
//   - kuik_keeper_bytes_total{registry}: blob bytes uploaded into mirrors.
//   - kuik_keeper_queue_depth{registry}: copies waiting.
//   - kuik_keeper_budget_remaining{registry}: manifest GETs the pacer would grant now (0 while
//     the registry is frozen after a 429).
//   - kuik_keeper_stalls_total{registry}: blob transfers abandoned after --stall-timeout.
//   - kuik_keeper_self_heal_checks_total{result}: self-heal HEADs of kept tags, result
//     "present", "missing" (queued again) or "error".
//   - kuik_keeper_gc_deletions_total{mirror,result}: kept tags deleted by garbage collection, by
//     ImageMirror, result "deleted", "gone", "error" or "unsupported".
//   - kuik_keeper_gc_held_total{hold}: sweeps that deleted nothing for safety, hold
//     "Unsynced", "ListFailed" or "ClockDoubt".
//   - kuik_keeper_kept_tags{mirror}: tags in the inventory, by ImageMirror.
//
// controller-runtime's own metrics (workqueue_*, leader_election_master_status, rest_client_*)
// are exported next to these and are not repeated here.
//
// A new metric goes in WebhookCollectors, SyncerCollectors or KeeperCollectors, in this list (a test compares
// them), in a panel of charts/kuik/files/dashboards/kuik.json (a chart test fails otherwise),
// and in docs/reference/metrics.md (make docs, generated from the collectors).
package metrics
