// Package routing decides, without any I/O, which images a container may be pulled from.
//
// # Model
//
// Two cluster-scoped resources route images. An ImageAlternative lists repositories that serve
// the same images as one another, either one repository per entry (repository) or one path per
// entry whose repositories one level below are equivalent (repositoryGroup: quay.io/acme/x is
// registry.local/acme/x). An ImageMirror holds a copy of every image under a destination path
// followed by the image's full normalized reference.
//
// Every reference is normalized with github.com/distribution/reference before anything else
// (nginx is docker.io/library/nginx:latest), and matching is structural, by path segment: an
// entry quay.io/acme/foo matches quay.io/acme/foo:v1 and quay.io/acme/foo@sha256:…, never
// quay.io/acme/foo-bar nor quay.io/acme/foo/bar. The tag and the digest of the pod's image are
// always carried over to the other repositories.
//
// A mirror adds no candidate for an image under its own destination path (it would nest itself),
// for one its excludeImages match, nor for one whose registry host cannot be a path segment (a
// host with a port or an IPv6 address). [MirrorReference] names an image in a mirror with the
// same code, and says why when it cannot. With a cluster ID ([Index.WithClusterID],
// [MirrorReferenceFor]) a mirror's tag is the cluster's own, nginx:1.27-kuik-<id>
// ([ClusterTag]), so that clusters sharing a mirror never share a tag; a digest-only image
// keeps no tag. excludeImages are doublestar globs on the normalized
// reference, matched part by part: the repository ('*' within a segment, '**' across), then the
// tag and the digest only when the glob names them. A glob whose first segment is literal is
// normalized like an image (bitnami/** is docker.io/bitnami/**).
//
// An [Index] compiles a set of resources once per change into a trie keyed by path segment
// (the registry host is the first segment), so that finding the alternatives of an image costs
// O(path segments) whatever the number of resources. Mirrors apply to every image, so they are
// a short list checked one by one. The Index is read-only once built and safe to share.
//
// # Candidate order
//
// [Index.Candidates] merges every resource that applies to a container (selectors match) into
// one list, in bands:
//
//	Always ImageMirror → Always ImageAlternative → original → OnFailure ImageAlternative → OnFailure ImageMirror
//
// Resources are sorted by name inside a band and an alternative list keeps its declared order.
// The entry equal to the original image is not repeated: the original stands for it, and carries
// its credential so that it is probed with it. Entries marked unavailable are never candidates;
// when the original image sits on one, the original is dropped so the pod gets substituted. The
// list is deduplicated on (reference, credential), keeping the first occurrence.
//
// The webhook probes the list and keeps the first available candidate; the secret-syncer names
// the Secret it writes for a resource with [PullSecretName]. Both refuse invalid resources with
// [ValidateImageAlternative] and [ValidateImageMirror], which mirror the CRD's CEL rules and
// also parse every reference the way the index does.
//
// # Where things are
//
//	normalize.go    references parsed and normalized; repository.go: an image's repository
//	index.go        the Index: NewIndex, its trie of alternatives, the parse cache
//	compile.go      a resource compiled for the Index: band, selectors, entries, credentials
//	glob.go         the excludeImages globs
//	candidates.go   Index.Candidates (the ordered list), Index.Recorded (a pod's claims) and
//	                MirrorReference (an image's name in a mirror, for the webhook and the keeper)
//	validate.go     ValidateImageAlternative and ValidateImageMirror
//	source.go       Kind and Source: the resource a candidate comes from (rewritten-by)
//	secretname.go   PullSecretName: the Secret kuik injects for a resource
//	authpath.go     an entry's auths key there, and its lookup path in its secretRef Secret
//	limits.go       the bounds on a pod's labels and on kuik's records on a pod
//	clusterid.go    ValidateClusterID, ClusterTag, IsClusterTag: a cluster's tags in a mirror
//	coverage.go     Index.Coverage: what the resources can cover, for the webhook's matchConditions
package routing
