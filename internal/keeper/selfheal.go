package keeper

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
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

	pullers := map[pullerKey]*remote.Puller{}
	failed := map[string]bool{}
	for _, c := range checks {
		pk := pullerKey{mirror: c.key.mirror, insecure: c.insecure}
		if _, ok := pullers[pk]; ok || failed[pk.mirror] {
			continue
		}
		auth, err := k.deps.Creds.Push(ctx, c.spec)
		var p *remote.Puller
		if err == nil {
			p, err = k.healers.puller(ctx, pk, auth, k.transport)
		}
		if err != nil {
			log.FromContext(ctx).Error(err, "self-heal: the push credential", "mirror", c.key.mirror)
			failed[pk.mirror] = true
			continue
		}
		pullers[pk] = p
	}
	k.healers.keep(pullers)
	failing := make(map[pullerKey]*atomic.Bool, len(pullers))
	for pk := range pullers {
		failing[pk] = new(atomic.Bool)
	}
	var g errgroup.Group
	g.SetLimit(selfHealJobs)
	for _, c := range checks {
		pk := pullerKey{mirror: c.key.mirror, insecure: c.insecure}
		p := pullers[pk]
		if p == nil {
			continue
		}
		g.Go(func() error {
			r := k.head(ctx, c, p)
			if r == headError {
				failing[pk].Store(true)
			}
			k.heal(ctx, c, r)
			return nil
		})
	}
	_ = g.Wait()
	for pk, f := range failing {
		if f.Load() {
			k.healers.stale(pk)
		}
	}
}

// pullerKey names the puller of one mirror's destinations.
type pullerKey struct {
	mirror   string
	insecure bool
}

// healers keeps one remote.Puller per mirror from one self-heal pass to the next, so that
// each destination repository is pinged and given a token once, not at every HEAD: an
// unchanged resync then costs exactly one HEAD per kept tag. A puller is replaced when the
// mirror's push credential changes, after a pass where one of its HEADs failed (the
// registry's auth may have changed), and every healerPasses passes (it holds a transport per
// repository it ever HEADed, and repositories come and go); it is dropped with its mirror.
// Only the self-heal loop uses it.
type healers struct {
	m map[pullerKey]*healer
}

// healerPasses is how many self-heal passes one puller serves: an hour at the default interval.
const healerPasses = 60

type healer struct {
	// fingerprint is a digest of the credential the puller was made with.
	fingerprint [sha256.Size]byte
	p           *remote.Puller
	// passes counts the passes served; stale is set after a failed HEAD.
	passes int
	stale  bool
}

// stale makes pk's puller be replaced at the next pass.
func (h *healers) stale(pk pullerKey) {
	if e := h.m[pk]; e != nil {
		e.stale = true
	}
}

// puller returns pk's puller, a new one if the credential changed.
func (h *healers) puller(ctx context.Context, pk pullerKey, auth authn.Authenticator, rt http.RoundTripper) (*remote.Puller, error) {
	cfg, err := authn.Authorization(ctx, auth)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	fp := sha256.Sum256(raw)
	if e := h.m[pk]; e != nil && e.fingerprint == fp && !e.stale && e.passes < healerPasses {
		e.passes++
		return e.p, nil
	}
	p, err := remote.NewPuller(remote.WithAuth(auth), remote.WithTransport(remoteTransport(rt, pk.insecure)))
	if err != nil {
		return nil, err
	}
	if h.m == nil {
		h.m = map[pullerKey]*healer{}
	}
	h.m[pk] = &healer{fingerprint: fp, p: p, passes: 1}
	return p, nil
}

// keep drops every puller not in used: a mirror gone or without a kept tag.
func (h *healers) keep(used map[pullerKey]*remote.Puller) {
	for pk := range h.m {
		if _, ok := used[pk]; !ok {
			delete(h.m, pk)
		}
	}
}

// headResult is what a self-heal HEAD found.
type headResult string

const (
	headPresent headResult = "present"
	headMissing headResult = "missing"
	headError   headResult = "error"
)

// head HEADs c's destination with its mirror's puller (the push credential).
func (k *Keeper) head(ctx context.Context, c check, p *remote.Puller) headResult {
	ref, err := name.ParseReference(c.key.destination, nameOptions(c.insecure)...)
	if err != nil {
		return headError
	}
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	desc, err := p.Head(ctx, ref)
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
