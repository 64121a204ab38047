package keeper

import (
	"context"
	"errors"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/metrics"
)

// clockSkew is how far the wall clock may drift from the monotonic one between two sweeps
// before the keeper doubts it.
const clockSkew = time.Minute

// sweep runs one garbage collection, once a plan pass has run: the stamps are saved first,
// then each tag due is deleted by tag and, once the registry confirmed, leaves the inventory.
func (k *Keeper) sweep(ctx context.Context) {
	k.mu.Lock()
	v := k.view
	k.mu.Unlock()
	if v == nil {
		return
	}
	logger := log.FromContext(ctx)
	now := k.deps.Now()
	safety := v.safety
	safety.ClockDoubt = safety.ClockDoubt || k.clockDoubt(now)

	k.invMu.Lock()
	sw := keep.DecideSweep(k.inv, &v.used, v.mirrors, now, safety)
	if sw.Held != "" {
		metrics.KeeperGCHeld.WithLabelValues(string(sw.Held)).Inc()
	}
	if sw.Changed {
		if err := k.save(ctx, sw.Inventory); err != nil {
			k.invMu.Unlock()
			logger.Error(err, "sweep: saving the stamps; deleting nothing")
			return
		}
	}
	k.invMu.Unlock()
	k.sweeps.Add(1)
	if len(sw.Delete) == 0 || k.deps.DeleteTag == nil {
		return
	}

	// A tag due is wanted by no pass any more: dropped first, so that the self-heal does not
	// bring it back meanwhile.
	k.mu.Lock()
	for _, t := range sw.Delete {
		key := wantKey{t.Mirror, t.Repository + ":" + t.Tag}
		if it, ok := k.items[key]; ok {
			it.dropped = true
			delete(k.items, key)
		}
	}
	k.mu.Unlock()
	creds := map[string]authn.Authenticator{}
	var removed []keep.Tag
	for _, t := range sw.Delete {
		result, err := k.deleteTag(ctx, v, creds, t)
		metrics.KeeperGCDeletions.WithLabelValues(t.Mirror, result).Inc()
		if err != nil {
			logger.Error(err, "sweep: deleting a kept tag", "mirror", t.Mirror, "tag", t.Repository+":"+t.Tag, "result", result)
		}
		if result == "deleted" || result == "gone" {
			removed = append(removed, t)
		}
	}
	if len(removed) == 0 {
		return
	}
	k.invMu.Lock()
	defer k.invMu.Unlock()
	if err := k.save(ctx, k.inv.Without(removed)); err != nil {
		logger.Error(err, "sweep: removing deleted tags from the inventory")
	}
}

// deleteTag deletes t by tag with its mirror's push credential and says how it went: deleted,
// gone, unsupported or error.
func (k *Keeper) deleteTag(ctx context.Context, v *view, creds map[string]authn.Authenticator, t keep.Tag) (string, error) {
	spec := v.specs[t.Mirror]
	if spec == nil {
		return "error", errors.New("the ImageMirror is gone")
	}
	auth, ok := creds[t.Mirror]
	if !ok {
		var err error
		if auth, err = k.deps.Creds.Push(ctx, spec); err != nil {
			return "error", err
		}
		creds[t.Mirror] = auth
	}
	k.mu.Lock()
	insecure := k.destInsecure(spec, t.Repository)
	k.mu.Unlock()
	tag, err := name.NewTag(t.Repository+":"+t.Tag, nameOptions(insecure)...)
	if err != nil {
		return "error", err
	}
	err = k.deps.DeleteTag(ctx, tag, transfer.Options{DestAuth: auth, DestInsecure: insecure, Transport: k.transport})
	switch {
	case err == nil:
		return "deleted", nil
	case errors.Is(err, transfer.ErrGone):
		return "gone", nil
	case errors.Is(err, transfer.ErrTagDeleteUnsupported):
		return "unsupported", err
	}
	return "error", err
}

// clockDoubt reports a wall clock that ran apart from the monotonic one by more than
// clockSkew since the last sweep, and records both clocks for the next.
func (k *Keeper) clockDoubt(now time.Time) bool {
	mono := k.mono()
	k.mu.Lock()
	defer k.mu.Unlock()
	doubt := false
	if !k.lastWall.IsZero() {
		skew := now.Round(0).Sub(k.lastWall) - mono.Sub(k.lastMono)
		doubt = skew > clockSkew || skew < -clockSkew
	}
	k.lastWall, k.lastMono = now.Round(0), mono
	return doubt
}
