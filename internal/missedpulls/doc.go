// Package missedpulls finds the pods that fail to pull an image kuik could have routed, and,
// for the routing resources that opt in (spec.recreateStuckPods), evicts them so that their
// controller recreates them through the webhook.
//
// The webhook fails open by design (failurePolicy Ignore): a pod admitted while it was down or
// timed out keeps its original image, and if that registry is dead the pod sits in
// ErrImagePull / ImagePullBackOff although a routing resource has an available candidate.
//
// It runs in the secret-syncer, on the leader only ([Watcher] is a leader-election runnable):
//
//   - Trigger: the kubelet's image-pull failure events, watched with server-side field
//     selectors (reason=Failed and reason=BackOff, involvedObject.kind=Pod), never a watch of
//     pods. The events are not kept: a store of nothing feeds a work queue keyed by pod
//     (deduplicated, rate-limited on errors, bounded). A (re)list goes by pages of 50, each read
//     as a JSON stream and observed one event at a time, and never as a watch-list: the
//     reflector's pager or its watch-list temporary store would hold every matching event of
//     the cluster at once, client-go's List a whole page, and core/v1 events have no size
//     limit but etcd's. Anyone allowed to create events in a namespace can forge them, so an
//     event only says "look at this pod".
//   - Verify: the pod is read from the API server by name (never a cluster-wide pod cache); a
//     container counts only when its status, written by the kubelet and not by the pod's author,
//     is waiting in ErrImagePull or ImagePullBackOff with the image its spec names now.
//   - Decide: exactly as the webhook would at the pod's creation: the routing index built from
//     the syncer's cached ImageAlternatives and ImageMirrors (dry-run ones left out: they never
//     change what is enforced) with the webhook's cluster ID (Options.ClusterID: the mirror
//     tags it routes to), the namespace's labels, and route.Route on a copy of the pod
//     with a route.ProbeChooser (registry probes; credentials read from the Secrets of the
//     cluster resource namespace only): the decision the webhook uses, not the webhook. Pods
//     the webhook never sees (label kuik.enix.io/skip, excluded namespaces) are left alone.
//   - Act: when Route would rewrite a failing container, a Warning ImagePullMissedRouting event
//     on the pod and on the winning resource, naming the container, the failing image and the
//     candidate, counted in kuik_secret_syncer_missed_pulls_total, once per (pod UID, container,
//     candidate). When the winning resource has spec.recreateStuckPods, the syncer was allowed
//     to evict pods (--recreate-stuck-pods), the pod's controller recreates it from a template
//     (its kind is one of --recreate-stuck-pod-owners, ReplicaSet, StatefulSet and DaemonSet by
//     default; a Job only with --recreate-stuck-job-pods and while it has retries left; never a
//     Node: a mirror pod comes back unchanged), none of its init or regular containers ever ran
//     (NeverRan: a Running pod whose sidecar fails to pull serves), no other pod of that
//     controller is being evicted (one in flight per controller), it has been failing for
//     --stuck-pod-age since the syncer's own first verified observation (never an event's
//     timestamps, which are forgeable; the age doubles, up to 32 times, for each generation of
//     the controller's pods deleted within the hour: a pod created after one of its siblings
//     was deleted, stuck again, was recreated without the webhook, still down, and deleting it
//     again would only churn), and the global
//     rate limit allows, the pod is read again, verified again ([Evictable]), and evicted (policy/v1 Eviction,
//     labelled app.kubernetes.io/managed-by=kuik-secret-syncer for the pod-deletes policies)
//     with preconditions on its UID and resourceVersion; a StuckPodRecreated event goes on the
//     resource. A pod no controller owns is never evicted: nothing would bring it back.
//
// Files:
//
//   - watcher.go: Options, Watcher, New, Start: the event reflectors and the workers
//   - sync.go: one pod: the decision, the resource it names, the events reported
//   - recreate.go: the eviction: claims per controller, rate limit, stuck age
//   - events.go: the paged, streamed event list and the store that keeps nothing
//   - predicates.go: facts read from pods, events and Jobs (FailingContainers, NeverRan…)
//   - evictable.go: Evictable, the last check of a pod before its eviction, which the
//     pod-deletes policies repeat in CEL
//
// Memory is bounded: the queue holds at most maxQueued pods; the first observations, the
// events already emitted, the generations and the pods in flight are LRU caches; a list holds
// one event at a time (each at most the largest object the API server stores).
package missedpulls
