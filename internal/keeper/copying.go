package keeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// job is what one copy needs, taken from an item under k.mu.
type job struct {
	key         wantKey
	want        keep.Want
	host, label string
	spec        *v1alpha1.ImageMirror
	// pin is the digest to keep: the want's, else the one found before when healing.
	pin                      string
	srcInsecure, dstInsecure bool
}

// dispatchLoop starts copies, Workers at a time, as items become ready.
func (k *Keeper) dispatchLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		now := k.deps.Now()
		next := k.q.promote(now)
		for k.running < k.opts.Workers && k.view != nil {
			it := k.q.pick(now)
			if it == nil {
				break
			}
			it.running = true
			k.running++
			j := k.jobOf(it)
			k.workers.Go(func() { k.work(ctx, it, j) })
		}
		k.mu.Unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(now), 10*time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		case <-timer.C:
		}
	}
}

// jobOf is it's job; k.mu is held.
func (k *Keeper) jobOf(it *item) job {
	j := job{
		key:   wantKey{it.want.Mirror, it.want.Destination},
		want:  it.want,
		host:  it.host,
		label: it.label,
		spec:  k.view.specs[it.want.Mirror],
		pin:   it.want.Digest,
	}
	if j.pin == "" && it.heal {
		j.pin = it.digest
	}
	_, j.srcInsecure = k.view.insecure[it.host]
	j.dstInsecure = k.destInsecure(j.spec, it.want.Destination)
	return j
}

// destInsecure reports whether the destination is spoken to without TLS verification; k.mu
// is held.
func (k *Keeper) destInsecure(spec *v1alpha1.ImageMirror, destination string) bool {
	if spec != nil && spec.Spec.Destination.Insecure {
		return true
	}
	_, ok := k.view.insecure[sourceHost(destination)]
	return ok
}

// work copies j, then records the outcome in it and reschedules it.
func (k *Keeper) work(ctx context.Context, it *item, j job) {
	o, credErr, saveErr := k.copyJob(ctx, &j)
	if ctx.Err() != nil {
		k.mu.Lock()
		it.running = false
		k.running--
		k.mu.Unlock()
		return
	}
	now := k.deps.Now()
	k.mu.Lock()
	defer k.signal()
	defer k.mu.Unlock()
	it.running = false
	k.running--
	ms := k.mirror(j.want.Mirror)
	if j.spec != nil {
		ms.credErr = credErr
	}
	switch {
	case saveErr != nil:
		// Not the image's failure: the inventory could not be written, so nothing was pushed.
		it.attempts++
		it.notBefore = now.Add(backoff(it.attempts, k.retryBase, k.retryMax))
		k.q.push(it, now)
		return
	case o.Err == nil:
		it.present, it.digest = true, o.Result.Digest.String()
		it.fail, it.attempts, it.notBefore, it.heal = nil, 0, time.Time{}, false
		ms.dest, ms.destMessage = "", ""
		// A pass meanwhile may want another digest.
		if it.want.Digest != "" && it.want.Digest != it.digest {
			it.present = false
		}
	default:
		it.present = false
		it.fail = &failure{reason: o.Reason, message: truncate(o.Err.Error(), 1024), at: now}
		if reason := destProblem(o.Err); reason != "" {
			ms.dest, ms.destMessage = reason, it.fail.message
		}
		if o.Reason == transfer.QuotaExceeded {
			k.q.park(j.host, k.quotaUntil(o.Err, &j, now))
		} else {
			it.attempts++
			it.notBefore = now.Add(backoff(it.attempts, k.retryBase, k.retryMax))
		}
	}
	if !it.dropped && !it.present {
		k.q.push(it, now)
	}
}

// copyJob runs one copy: the inventory first, then transfer.Copy, the inventory's digest,
// the referrers, the metrics and the Outcome report. credErr is the push credential's error;
// saveErr an inventory Save that failed before anything was written.
func (k *Keeper) copyJob(ctx context.Context, j *job) (o Outcome, credErr, saveErr error) {
	o.Want = j.want
	logger := log.FromContext(ctx).WithValues("mirror", j.want.Mirror, "image", j.want.Origin, "destination", j.want.Destination)
	fail := func(reason v1alpha1.KeepFailureReason, err error) Outcome {
		o.Err, o.Reason, o.At = err, reason, k.deps.Now()
		return o
	}
	if j.spec == nil {
		return fail(transfer.PushFailed, fmt.Errorf("the ImageMirror %q is gone", j.want.Mirror)), nil, nil
	}
	push, err := k.deps.Creds.Push(ctx, j.spec)
	if err != nil {
		o = fail(transfer.PushFailed, fmt.Errorf("the push credential: %w", err))
		k.outcome(ctx, j, &o)
		return o, err, nil
	}
	srcAuth, err := k.deps.Creds.Source(ctx, j.want.SourceAuth, j.want.Origin)
	if err != nil {
		o = fail(transfer.AuthRequired, fmt.Errorf("the source credential: %w", err))
		k.outcome(ctx, j, &o)
		return o, nil, nil
	}
	src, pinned, err := transfer.ParsePinned(j.want.Origin, nameOptions(j.srcInsecure)...)
	if err != nil {
		o = fail(transfer.SourceUnavailable, fmt.Errorf("parsing %s: %w", j.want.Origin, err))
		k.outcome(ctx, j, &o)
		return o, nil, nil
	}
	dst, err := name.ParseReference(j.want.Destination, nameOptions(j.dstInsecure)...)
	if err != nil {
		o = fail(transfer.PushFailed, fmt.Errorf("parsing %s: %w", j.want.Destination, err))
		k.outcome(ctx, j, &o)
		return o, nil, nil
	}
	digest := pinned
	if j.pin != "" {
		if digest, err = v1.NewHash(j.pin); err != nil {
			o = fail(transfer.SourceUnavailable, fmt.Errorf("digest %s: %w", j.pin, err))
			k.outcome(ctx, j, &o)
			return o, nil, nil
		}
	}
	tag, tagged := keep.TagOf(&j.want)
	if tagged {
		if err := k.ensureInventoried(ctx, tag); err != nil {
			logger.Error(err, "saving the inventory before a push; not copying")
			return o, nil, err
		}
	}
	opts := transfer.Options{
		SourceAuth:     srcAuth,
		DestAuth:       push,
		SourceInsecure: j.srcInsecure,
		DestInsecure:   j.dstInsecure,
		Digest:         digest,
		StallTimeout:   k.opts.StallTimeout,
		MaxSize:        k.opts.MaxImageSize,
		Pacer:          k.pacer,
		Mounts:         k.mounts,
		Transport:      k.transport,
	}
	res, err := transfer.Copy(ctx, src, dst, opts)
	k.budgetMetric(j.label, src.Context().RegistryStr())
	if err != nil {
		reason := transfer.ReasonOf(err)
		if reason == "" {
			reason = transfer.SourceUnavailable
		}
		o = fail(reason, err)
		k.outcome(ctx, j, &o)
		return o, nil, nil
	}
	o.Result, o.At = res, k.deps.Now()
	if tagged && res.Digest.String() != tag.Digest {
		tag.Digest = res.Digest.String()
		if err := k.updateInventory(ctx, tag); err != nil {
			logger.Error(err, "recording the kept digest in the inventory")
		}
	}
	// Referrers go with the digest: a tag PUT over a digest already there needs none.
	if res.Action == transfer.Copied && j.spec.Spec.Keep.CopiesReferrers() {
		if _, err := transfer.CopyReferrers(ctx, src.Context(), dst.Context(), res.Digest, opts); err != nil {
			logger.Error(err, "copying the referrers of a kept image")
		}
	}
	k.outcome(ctx, j, &o)
	return o, nil, nil
}

// outcome counts o and reports it.
func (k *Keeper) outcome(ctx context.Context, j *job, o *Outcome) {
	result := string(o.Reason)
	if o.Err == nil {
		result = string(o.Result.Action)
		metrics.KeeperBytes.WithLabelValues(j.label).Add(float64(o.Result.Bytes))
	}
	metrics.KeeperCopies.WithLabelValues(j.label, result).Inc()
	if o.Reason == transfer.Stalled {
		metrics.KeeperStalls.WithLabelValues(j.label).Inc()
	}
	if k.deps.Report != nil && j.spec != nil {
		k.deps.Report.Outcome(ctx, j.spec, *o)
	}
}

// budgetMetric publishes the Pacer's budget of a declared host (0 while frozen).
func (k *Keeper) budgetMetric(label, host string) {
	if label == route.OtherRegistry {
		return
	}
	if !k.pacer.FrozenUntil(host).IsZero() {
		metrics.KeeperBudget.WithLabelValues(label).Set(0)
		return
	}
	if rem, ok := k.pacer.Remaining(host); ok {
		metrics.KeeperBudget.WithLabelValues(label).Set(float64(max(rem, 0)))
	}
}

// quotaUntil is when a host refused for its quota may be asked again: the error's RetryAt, else
// the Pacer's freeze, else a minute.
func (k *Keeper) quotaUntil(err error, j *job, now time.Time) time.Time {
	var te *transfer.Error
	if errors.As(err, &te) && !te.RetryAt.IsZero() {
		return te.RetryAt
	}
	if ref, _, perr := transfer.ParsePinned(j.want.Origin); perr == nil {
		if until := k.pacer.FrozenUntil(ref.Context().RegistryStr()); !until.IsZero() {
			return until
		}
	}
	return now.Add(time.Minute)
}

// destProblem is the KeepReady reason a destination failure gives: PushDenied for a 401 or
// 403, DestinationUnavailable for a 5xx or a registry that does not answer; "" otherwise.
func destProblem(err error) string {
	if transfer.ReasonOf(err) != transfer.PushFailed {
		return ""
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch {
		case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden:
			return v1alpha1.ReasonPushDenied
		case te.StatusCode >= 500:
			return v1alpha1.ReasonDestinationUnavailable
		}
		return ""
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return v1alpha1.ReasonDestinationUnavailable
	}
	return ""
}

// ensureInventoried saves tag into the inventory unless it is there, with the other tags
// waiting meanwhile (one Save for several).
func (k *Keeper) ensureInventoried(ctx context.Context, tag keep.Tag) error {
	k.mu.Lock()
	k.pending = append(k.pending, tag)
	k.mu.Unlock()
	k.invMu.Lock()
	defer k.invMu.Unlock()
	if inventoried(k.inv, tag) {
		return nil
	}
	k.mu.Lock()
	pending := k.pending
	k.pending = nil
	k.mu.Unlock()
	next := k.inv
	for _, t := range append(pending, tag) {
		if !inventoried(next, t) {
			next, _ = next.With(t)
		}
	}
	return k.save(ctx, next)
}

// updateInventory records a tag's new digest; k.invMu is taken.
func (k *Keeper) updateInventory(ctx context.Context, tag keep.Tag) error {
	k.invMu.Lock()
	defer k.invMu.Unlock()
	next, changed := k.inv.With(tag)
	if !changed {
		return nil
	}
	return k.save(ctx, next)
}

// save writes inv and makes it the keeper's; after a failure the stored one is read again, as
// another writer may have changed it. k.invMu is held.
func (k *Keeper) save(ctx context.Context, inv keep.Inventory) error {
	if err := k.deps.Store.Save(ctx, inv); err != nil {
		if cur, lerr := k.deps.Store.Load(ctx); lerr == nil {
			k.inv = cur
		}
		return fmt.Errorf("saving the inventory: %w", err)
	}
	k.inv = inv
	keptTagsMetric(inv)
	return nil
}

// inventoried reports whether inv has tag's (mirror, repository, tag).
func inventoried(inv keep.Inventory, tag keep.Tag) bool {
	return slices.ContainsFunc(inv.Tags, func(t keep.Tag) bool {
		return t.Mirror == tag.Mirror && t.Repository == tag.Repository && t.Tag == tag.Tag
	})
}

// keptTagsMetric publishes the inventory's size by mirror.
func keptTagsMetric(inv keep.Inventory) {
	n := map[string]int{}
	for _, t := range inv.Tags {
		n[t.Mirror]++
	}
	metrics.KeeperKeptTags.Reset()
	for m, c := range n {
		metrics.KeeperKeptTags.WithLabelValues(m).Set(float64(c))
	}
}

// nameOptions are the reference options of a side.
func nameOptions(insecure bool) []name.Option {
	if insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// remoteTransport is rt (default remote.DefaultTransport), without TLS verification when
// insecure: transfer.InsecureTransport, the clone every copy shares.
func remoteTransport(rt http.RoundTripper, insecure bool) http.RoundTripper {
	if rt == nil {
		rt = remote.DefaultTransport
	}
	if !insecure {
		return rt
	}
	return transfer.InsecureTransport(rt)
}

// truncate cuts s to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
