package missedpulls

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Evictable reports whether the secret-syncer may evict the pod for its controller to recreate
// it, as far as the pod tells. It is the watcher's last check of the pod it read again right
// before the eviction, and the pod-deletes policies repeat it in CEL
// (policies/pod_deletes_cases_test.go holds the cases of both). The pod must
//   - not be being deleted, nor be one the webhook never sees ([Skipped]);
//   - have a controller ([Controlled]) of one of the owners kinds: RecreateOwners, plus
//     [JobKind] with RecreateJobs;
//   - never have run ([NeverRan]);
//   - have an init or regular container failing to pull the image its spec names.
//
// Left out, as the pod does not tell them: whether a routing resource routes the failing image
// to an available candidate, and a Job's retries ([JobHasRetries]).
func Evictable(pod *corev1.Pod, owners []schema.GroupKind, excluded map[string]bool) bool {
	if pod.DeletionTimestamp != nil || Skipped(pod, excluded) || !Controlled(pod) || !NeverRan(pod) {
		return false
	}
	if !slices.Contains(owners, OwnerKind(*ControllerOf(pod))) {
		return false
	}
	for name := range FailingContainers(pod) {
		if !Ephemeral(pod, name) {
			return true
		}
	}
	return false
}
