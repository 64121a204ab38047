package keeper

import (
	"context"
	"fmt"
	"strings"

	"github.com/distribution/reference"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// planPass gathers the inputs, computes what the mirrors must hold, and queues what is not
// known present. A destination known present with the expected digest is not queued: an
// unchanged pass sends no registry request.
func (k *Keeper) planPass(ctx context.Context) error {
	in, err := k.deps.Gather(ctx)
	if err != nil {
		return fmt.Errorf("gathering the keeper's inputs: %w", err)
	}
	plan := keep.Desired(in.Index, in.Mirrors, &in.Snapshot)
	now := k.deps.Now()
	k.invMu.Lock()
	inv := k.inv
	k.invMu.Unlock()
	retained := keep.Retained(inv, &plan, in.Mirrors, now)

	k.mu.Lock()
	k.gen++
	for _, wants := range [][]keep.Want{plan.Keep, retained} {
		for i := range wants {
			k.upsert(&wants[i], &in)
		}
	}
	for key, it := range k.items {
		if it.gen != k.gen {
			it.dropped = true
			delete(k.items, key)
		}
	}
	seen := make(map[skipKey]struct{}, len(k.skips))
	for _, s := range plan.Skipped {
		reason, ok := skipReason(s.Reason)
		if !ok || s.Mirror == "" {
			continue
		}
		key := skipKey{mirror: s.Mirror, image: s.Image, reason: reason}
		seen[key] = struct{}{}
		if _, ok := k.skips[key]; !ok {
			k.skips[key] = now
		}
	}
	for key := range k.skips {
		if _, ok := seen[key]; !ok {
			delete(k.skips, key)
		}
	}
	k.view = &view{
		mirrors:  in.Mirrors,
		specs:    in.Specs,
		used:     keep.Plan{Used: plan.Used},
		safety:   in.Safety,
		declared: in.DeclaredHosts,
		insecure: in.InsecureHosts,
	}
	k.mu.Unlock()
	k.passes.Add(1)
	k.signal()
	return nil
}

// upsert records w as wanted by this pass and queues it unless known present; k.mu is held.
func (k *Keeper) upsert(w *keep.Want, in *Inputs) {
	key := wantKey{w.Mirror, w.Destination}
	it, ok := k.items[key]
	if !ok {
		it = &item{}
		k.items[key] = it
	}
	if it.present && w.Digest != "" && w.Digest != it.digest {
		it.present = false
	}
	host := sourceHost(w.Origin)
	moved := ok && (it.want.Priority != w.Priority || it.host != host)
	it.want = *w
	it.gen = k.gen
	it.host = host
	if label := registryLabel(host, in.DeclaredHosts); label != it.label {
		if it.queued {
			k.q.count(it.label, -1)
			k.q.count(label, 1)
		}
		it.label = label
	}
	if it.present {
		return
	}
	now := k.deps.Now()
	if moved {
		k.q.reprioritize(it, now)
	}
	k.q.push(it, now)
}

// skipReason is the status failure of a plan skip; false for a skip that is no failure (not
// covered, the mirror's own destination, an unverified record).
func skipReason(r keep.Reason) (v1alpha1.KeepFailureReason, bool) {
	switch r {
	case keep.ReasonUnnameable:
		return v1alpha1.KeepUnnameable, true
	case keep.ReasonPrivateSource:
		return v1alpha1.KeepAuthRequired, true
	}
	return "", false
}

// sourceHost is the registry host of a normalized origin ("docker.io" for Docker Hub); the
// origin itself when it does not parse, so that a bad origin still has a queue.
func sourceHost(origin string) string {
	named, err := reference.ParseNormalizedNamed(origin)
	if err != nil {
		return origin
	}
	return reference.Domain(named)
}

// registryLabel is host when a routing resource declares it, else route.OtherRegistry: pod
// authors choose the hosts of what they run.
func registryLabel(host string, declared map[string]struct{}) string {
	if _, ok := declared[host]; ok {
		return host
	}
	if _, ok := declared[strings.ToLower(host)]; ok {
		return strings.ToLower(host)
	}
	return route.OtherRegistry
}
