// Package transfer copies images between registries for the keeper, with
// go-containerregistry: verbatim, destination first, the tag last, paced per source host.
//
// # What it holds
//
//   - Copy: one image, every platform, the raw manifest bytes, so the destination digest
//     equals the source digest. Nothing is re-serialised.
//   - CopyReferrers: the cosign sibling tags (sha256-<hex>.sig/.att/.sbom) and the OCI
//     referrers of a digest, each copied by Copy.
//   - DeleteTag: one destination tag, by tag, never by digest (a digest delete takes every
//     tag on it).
//   - Pacer: a budget of manifest GETs per source host, and the transport that feeds it.
//   - Mounts: a bounded table of digest → destination repository, per destination
//     registry, so a blob already in a sibling repository is mounted, not copied again.
//   - Reason and Error: why a copy failed, in the words of ImageMirror status.keep.
//
// # How Copy proceeds
//
//  1. HEAD the destination tag. It has the expected digest: done, 0 source requests.
//  2. HEAD the destination by digest. Present: read those bytes from the destination and
//     PUT the tag, 0 source GETs.
//  3. HEAD the source (free on Docker Hub) to learn the digest. With Options.Digest (the
//     node's imageID) or a tag@digest source, a tag that moved is copied from src@digest:
//     the bytes that ran, not what the tag points to now. Without a digest, steps 1 and 2
//     run again with the digest learnt.
//  4. GET the top manifest by digest, then the children the destination lacks, by digest:
//     1 + N manifest GETs for a new N-platform image, each granted by the Pacer first.
//  5. Blobs, Options.Jobs at a time: HEAD at the destination, then a mount from the
//     source repository when source and destination share a registry, else from a sibling
//     destination repository that Options.Mounts knows holds the blob, once a HEAD of the
//     blob at the source (source credential) has answered. A registry that does
//     not mount opens an upload session instead (202), and only then is the blob a streamed
//     GET → PUT whose digest is verified. Every blob present or written is recorded in Mounts.
//     Memory does not grow with layer size: BenchmarkCopyVsCrane reports the peak heap and
//     RSS above idle of a 200 MiB 4-platform copy, and its time against crane.Copy.
//  6. Children by digest, deepest first; the tag last; then HEAD the tag == digest.
//
// # Failures
//
// | Reason            | when                                                                  |
// |-------------------|-----------------------------------------------------------------------|
// | SourceUnavailable | source 404 or 5xx, unreachable, unparsable; a moved tag's digest gone |
// | QuotaExceeded     | source 429, or the Pacer: host frozen or at its reserve               |
// | AuthRequired      | source 401 or 403                                                     |
// | PushFailed        | any destination error (a destination 429 included)                    |
// | TooLarge          | the missing blobs sum to more than Options.MaxSize                    |
// | Stalled           | a blob, or a manifest request, moved no byte for StallTimeout         |
//
// Every manifest HEAD, GET and PUT, and DeleteTag's DELETE, is bounded by Options.StallTimeout
// too: no answer or body byte for that long fails it with Stalled (either side) and releases
// its Pacer reservation.
//
// A failed blob does not cancel the others, and the tag is written last, so a retry only
// uploads what did not commit: committed blobs answer the HEAD. This holds after a SIGKILL
// mid-copy too: Copy keeps no state of its own, the destination is the state.
//
// # Deleting a tag
//
// | answer                               | DeleteTag returns                        |
// |--------------------------------------|------------------------------------------|
// | 200 or 202                           | nil                                      |
// | 404 MANIFEST_UNKNOWN or NAME_UNKNOWN | ErrGone: already gone, a success         |
// | 405, or an UNSUPPORTED error code    | ErrTagDeleteUnsupported: nothing deleted |
// | anything else                        | an error with the status                 |
//
// A registry that deletes by digest only (distribution's registry:2) keeps the tag: kuik
// deletes nothing rather than every tag of the digest.
//
// # Retries and pacing
//
// go-containerregistry retries 429 by default. Copy sets remote.WithRetryStatusCodes to
// 408, 500, 502, 503 and 504 and a predicate that never retries a 429, a frozen host or a
// cancelled context. The Pacer's transport learns ratelimit-limit and ratelimit-remaining
// (Docker Hub's "100;w=21600"), keeps Reserve of the limit unspent, and on a 429 freezes
// the host until Retry-After or ratelimit-reset. Requests to a frozen host fail at once,
// unsent. Other hosts keep going.
//
// # Credentials
//
// Options carries one credential per side. The source credential is the caller's choice
// (a routing resource's auth, a provider's, or anonymous), never the pod's own
// imagePullSecrets.
//
// A mount from a sibling repository uses the push credential: go-containerregistry adds
// pull on the sibling to the token's scopes. A mount refused, or a token server refusing
// that scope, is retried as a plain upload, and the sibling forgotten. A sibling mount is
// made only for a blob the source serves to the source credential: layer digests are no
// secret, and a public manifest naming the layers of an image another mirror keeps must not
// get them out of the mirror.
//
// # Not done yet
//
//   - The keeper's queue and priorities: Pacer.Wait refuses with a RetryAt, and the caller
//     reschedules.
//   - Pacing the N children before the top GET: the top manifest is spent even when the
//     children are then refused by the reserve.
//   - Resuming a partly uploaded blob (chunked PATCH with a Range): a stalled blob restarts.
//   - Metrics (bytes, stalls, budget left) and events.
package transfer
