package keeper

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// headTimeout bounds one self-heal HEAD.
const headTimeout = 30 * time.Second

// check is one destination the self-heal HEADs.
type check struct {
	key      wantKey
	digest   string
	spec     *v1alpha1.ImageMirror
	insecure bool
}

// selfHeal HEADs every destination believed present, unpaced, selfHealJobs at once. One that
// is missing or holds another digest is queued now; its copy then finds the manifest by digest
// at the destination and only PUTs the tag.
func (k *Keeper) selfHeal(ctx context.Context) {
	k.mu.Lock()
	var checks []check
	for key, it := range k.items {
		if !it.present || it.queued || it.running || k.view == nil {
			continue
		}
		spec := k.view.specs[key.mirror]
		if spec == nil {
			continue
		}
		checks = append(checks, check{key: key, digest: it.digest, spec: spec, insecure: k.destInsecure(spec, key.destination)})
	}
	k.mu.Unlock()

	creds := map[string]authn.Authenticator{}
	for _, c := range checks {
		if _, ok := creds[c.key.mirror]; ok {
			continue
		}
		auth, err := k.deps.Creds.Push(ctx, c.spec)
		if err != nil {
			log.FromContext(ctx).Error(err, "self-heal: the push credential", "mirror", c.key.mirror)
			auth = nil
		}
		creds[c.key.mirror] = auth
	}
	var g errgroup.Group
	g.SetLimit(selfHealJobs)
	for _, c := range checks {
		auth := creds[c.key.mirror]
		if auth == nil {
			continue
		}
		g.Go(func() error {
			k.heal(ctx, c, k.head(ctx, c, auth))
			return nil
		})
	}
	_ = g.Wait()
}

// headResult is what a self-heal HEAD found.
type headResult string

const (
	headPresent headResult = "present"
	headMissing headResult = "missing"
	headError   headResult = "error"
)

// head HEADs c's destination with the push credential.
func (k *Keeper) head(ctx context.Context, c check, auth authn.Authenticator) headResult {
	ref, err := name.ParseReference(c.key.destination, nameOptions(c.insecure)...)
	if err != nil {
		return headError
	}
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	desc, err := remote.Head(ref, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(remoteTransport(k.transport, c.insecure)))
	var te *transport.Error
	switch {
	case err == nil && desc.Digest.String() == c.digest:
		return headPresent
	case err == nil, errors.As(err, &te) && te.StatusCode == http.StatusNotFound:
		return headMissing
	}
	return headError
}

// heal records a self-heal result; a missing destination is queued now, pinned to the digest
// it held.
func (k *Keeper) heal(ctx context.Context, c check, r headResult) {
	if ctx.Err() != nil {
		return
	}
	metrics.KeeperSelfHealChecks.WithLabelValues(string(r)).Inc()
	if r != headMissing {
		return
	}
	k.mu.Lock()
	defer k.signal()
	defer k.mu.Unlock()
	it, ok := k.items[c.key]
	if !ok || !it.present {
		return
	}
	it.present, it.heal = false, true
	it.attempts, it.notBefore = 0, time.Time{}
	k.q.push(it, k.deps.Now())
}
