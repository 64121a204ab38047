// Package keep decides, without any I/O, what the keep-enabled ImageMirrors must hold and which
// of the tags kuik wrote may be deleted (issue 21, items 3 and 6). It is the keeper's "decide"
// step: the caller gathers a [Snapshot] and an [Inventory] from its caches, passes the clock's
// time in, and acts on the result.
//
// # What is kept: [Desired]
//
//   - Every container of every live pod (init, regular, ephemeral) and, for a mirror with
//     CountTemplates, every image of a workload [Template].
//   - The origin of a container not routed is its spec image. The origin of a routed one is its
//     original-images record, only when [routing.Index.Recorded] verifies it. A record that
//     fails keeps nothing for that container (ReasonUnverifiedRecord), not even its spec image.
//   - The destination is the candidate [routing.Index.Candidates] gives for the origin whose
//     Source is the mirror: the webhook's own reference, no second naming.
//   - No candidate, no copy: not selected, excluded, under the mirror's own destination (no
//     loops), or a host the mirror cannot name. Each is a [Skip] with its [Reason].
//   - The digest is the one the origin pins, else the node's (status imageID, see
//     [DigestFromImageID]) when the container runs the origin or this mirror's copy, else
//     empty: resolved by tag. A bare "sha256:…" imageID is the local image ID: not used.
//   - A source the routing core lends a credential (an alternative entry equal to it) is kept
//     only with AllowPrivateSources; the credential goes with the [Want], never the pod's
//     imagePullSecrets.
//   - Priority: PriorityRouted (pods run this mirror's reference now) > PriorityLive (a live
//     pod runs it elsewhere) > PriorityTemplate. One [Want] per (mirror, destination).
//   - [Retained] adds the inventoried tags no longer wanted but within retention, at
//     PriorityTemplate, for the self-heal.
//
// # What may be deleted: [DecideSweep]
//
//   - By tag only, and only tags in the [Inventory] (the tags kuik wrote).
//   - Never a tag in [Plan.Used]: a live pod's spec image (whatever its records say) or the
//     digest its node runs there, a Want's destination (verified origins, counted templates),
//     an image a template names when its mirror counts templates.
//   - UnusedSince is stamped once, at the first sweep that sees the tag unused, and cleared
//     when it is used again. A tag goes once its mirror's retention has passed since.
//   - No stamp and no deletion while caches are unsynced or a list failed (stamps are still
//     cleared). A clock the caller doubts, or one before the last sweep: no deletion, new
//     stamps at the later time.
//   - At most 10 % of the inventory per sweep (rounded down), at least one when any is due,
//     oldest stamp first: a small mirror is still collected, a bad input deletes little.
//   - Tags of a mirror that is not keep-enabled any more are left untouched.
//   - With Safety.ClusterID, a tag without this cluster's suffix (routing.IsClusterTag) is
//     left untouched, even in the Inventory: another cluster's, or from before the ID.
//
// # Several clusters, one mirror
//
// The caller passes Desired an index [routing.Index.WithClusterID] and DecideSweep the same ID
// in [Safety]: destinations are then the webhook's suffixed tags (nginx:1.27-kuik-<id>). A tag
// too long for the suffix is ReasonUnnameable. A digest-only destination has no tag: shared by
// every cluster, never collected by kuik.
//
// # Not done yet
//
//   - I/O: the informers that fill a Snapshot, the registry copies (internal/keep/transfer),
//     the tag deletions and the ImageMirror status.
//   - Persistence of the Inventory (before the first push into a repository).
//   - Wiring into cmd/keeper; referrers and cosign sibling tags.
//   - A clock that jumps forward is not detected: it looks like downtime (10 % bound only).
//   - A digest-only destination (origin nginx@sha256:…) has no tag: it is kept, never
//     collected by kuik.
//   - A tag that moves keeps one digest in the Inventory: a digest pods still run but no tag
//     names (Want.OtherDigests) is unprotected from the registry's untagged-manifest GC.
//   - Retained re-copies a retained tag without checking again that the mirror still covers
//     the origin or still allows a private source, and without its source credential.
//   - Mirrors are named through Index.Candidates, so a mirror with rewritePolicy None or a
//     dry run (left out of the index) keeps nothing yet: routing.MirrorReferenceFor (with the
//     cluster ID) is the shared naming function to use for those.
//
// # Where things are
//
//	input.go     what the caller gathers: Mirror, Snapshot, Pod, Container, Template
//	desired.go   Desired: Plan, Want, Skip, Priority, Reason, Used
//	imageid.go   DigestFromImageID, and the reference keys Used is made of
//	gc.go        DecideSweep: Inventory, Tag, Safety, Hold, Sweep; Retained, TagOf
package keep
