package transfer

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// cosignSuffixes are the sibling tags cosign writes next to a digest.
var cosignSuffixes = []string{"sig", "att", "sbom"}

// ReferrersResult counts what CopyReferrers copied (already present ones included).
type ReferrersResult struct {
	// Tags are the cosign sibling tags copied.
	Tags []string
	// Referrers are the digests of the OCI referrers copied.
	Referrers []v1.Hash
}

// CopyReferrers copies what signs or describes digest d from the src repository to the dst
// repository: the cosign sibling tags sha256-<hex>.sig/.att/.sbom and the OCI referrers of d
// (the referrers API, else its sha256-<hex> fallback tag). Each is copied verbatim by Copy,
// with opts, so it is paced and destination first. A missing sibling or referrer list is no
// error. Copy the image itself first: a referrer's subject should exist at the destination.
func CopyReferrers(ctx context.Context, src, dst name.Repository, d v1.Hash, opts Options) (ReferrersResult, error) {
	var res ReferrersResult
	o := opts
	o.Digest = v1.Hash{}
	for _, suffix := range cosignSuffixes {
		tag := fmt.Sprintf("%s-%s.%s", d.Algorithm, d.Hex, suffix)
		_, err := Copy(ctx, src.Tag(tag), dst.Tag(tag), o)
		switch {
		case err == nil:
			res.Tags = append(res.Tags, tag)
		case ReasonOf(err) == SourceUnavailable && isNotFound(err):
		default:
			return res, err
		}
	}
	refs, err := referrers(ctx, src, dst, d, opts)
	if err != nil {
		return res, err
	}
	for _, r := range refs {
		if _, err := Copy(ctx, src.Digest(r.Digest.String()), dst.Digest(r.Digest.String()), o); err != nil {
			return res, err
		}
		res.Referrers = append(res.Referrers, r.Digest)
	}
	return res, nil
}

// referrers lists the referrers of d at the source, one paced manifest GET when the registry
// has no referrers API and the fallback tag is read.
func referrers(ctx context.Context, src, dst name.Repository, d v1.Hash, opts Options) ([]v1.Descriptor, error) {
	c, err := newCopier(src.Digest(d.String()), dst.Digest(d.String()), opts)
	if err != nil {
		return nil, err
	}
	var res *Reservation
	if opts.Pacer != nil {
		if res, err = opts.Pacer.Wait(ctx, src.RegistryStr(), 1); err != nil {
			return nil, classify(source, err, "pacing the referrers of %s", d)
		}
		defer res.Release()
	}
	ref := c.src.Context().Digest(d.String())
	idx, err := remote.Referrers(ref, append(c.srcOpts, remote.WithContext(res.Bind(ctx)))...)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, classify(source, err, "listing the referrers of %s", d)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, classify(source, err, "listing the referrers of %s", d)
	}
	return m.Manifests, nil
}
