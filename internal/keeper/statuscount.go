package keeper

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// maxFailures bounds status.keep.failures (the CRD's MaxItems).
const maxFailures = 100

// statusItem is what the status reads of one desired destination.
type statusItem struct {
	// image is the origin, with the digest kept when known.
	image   string
	present bool
	fail    *failure
}

// statusInput is one mirror's state, as statusOf reads it.
type statusInput struct {
	items []statusItem
	// skips are the plan's skips reported as failures (Unnameable, AuthRequired).
	skips []v1alpha1.KeepFailure
	// tags are the mirror's inventory tags.
	tags []keep.Tag
	// credErr is the push credential's error; dest and destMessage the last destination
	// problem (ReasonPushDenied, ReasonDestinationUnavailable).
	credErr           error
	dest, destMessage string
}

// reasoner is a credential error that names its condition reason.
type reasoner interface{ Reason() string }

// statusOf is a mirror's status.keep and KeepReady (without times nor generation): the
// counts, at most maxFailures failures, the most recent first and one per image.
func statusOf(in *statusInput) (v1alpha1.KeepStatus, metav1.Condition) {
	var st v1alpha1.KeepStatus
	failures := slices.Clone(in.skips)
	for _, it := range in.items {
		st.Desired++
		switch {
		case it.present:
			st.Present++
		case it.fail != nil:
			if it.fail.reason == v1alpha1.KeepSourceUnavailable {
				st.MissingSource++
			}
			failures = append(failures, v1alpha1.KeepFailure{
				Image:       it.image,
				Reason:      it.fail.reason,
				Message:     it.fail.message,
				LastAttempt: metav1.NewTime(it.fail.at),
			})
		}
	}
	for _, t := range in.tags {
		if !t.UnusedSince.IsZero() {
			st.PendingDeletion++
		}
	}
	slices.SortFunc(failures, func(a, b v1alpha1.KeepFailure) int {
		return cmp.Or(b.LastAttempt.Compare(a.LastAttempt.Time), strings.Compare(a.Image, b.Image), strings.Compare(string(a.Reason), string(b.Reason)))
	})
	seen := map[string]struct{}{}
	for _, f := range failures {
		if _, dup := seen[f.Image]; dup {
			continue
		}
		seen[f.Image] = struct{}{}
		st.Failed++
		if len(st.Failures) < maxFailures {
			st.Failures = append(st.Failures, f)
		}
	}

	cond := metav1.Condition{
		Type:    v1alpha1.ConditionKeepReady,
		Status:  metav1.ConditionTrue,
		Reason:  v1alpha1.ReasonKeeping,
		Message: "kuik writes the kept images into the mirror",
	}
	var r reasoner
	switch {
	case in.credErr != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonSecretNotFound, truncate(in.credErr.Error(), 1024)
		if errors.As(in.credErr, &r) && r.Reason() != "" {
			cond.Reason = r.Reason()
		}
	case in.dest != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, in.dest, in.destMessage
	}
	return st, cond
}

// reported is the last status written of a mirror.
type reported struct {
	st   v1alpha1.KeepStatus
	cond metav1.Condition
}

// reportStatus writes the status of every keep-enabled mirror whose status changed since the
// last write.
func (k *Keeper) reportStatus(ctx context.Context) {
	if k.deps.Report == nil {
		return
	}
	k.invMu.Lock()
	inv := k.inv
	k.invMu.Unlock()

	type write struct {
		name string
		spec *v1alpha1.ImageMirror
		st   v1alpha1.KeepStatus
		cond metav1.Condition
	}
	var writes []write
	k.mu.Lock()
	v := k.view
	if v == nil {
		k.mu.Unlock()
		return
	}
	inputs := map[string]*statusInput{}
	for _, m := range v.mirrors {
		ms := k.mirror(m.Name)
		inputs[m.Name] = &statusInput{credErr: ms.credErr, dest: ms.dest, destMessage: ms.destMessage}
	}
	for key, it := range k.items {
		if in, ok := inputs[key.mirror]; ok {
			in.items = append(in.items, statusItem{image: failureImage(&it.want), present: it.present, fail: it.fail})
		}
	}
	for key, at := range k.skips {
		if in, ok := inputs[key.mirror]; ok {
			in.skips = append(in.skips, v1alpha1.KeepFailure{Image: key.image, Reason: key.reason, Message: skipMessage(key.reason), LastAttempt: metav1.NewTime(at)})
		}
	}
	for _, t := range inv.Tags {
		if in, ok := inputs[t.Mirror]; ok {
			in.tags = append(in.tags, t)
		}
	}
	now := metav1.NewTime(k.deps.Now())
	for name, in := range inputs {
		spec := v.specs[name]
		if spec == nil {
			continue
		}
		st, cond := statusOf(in)
		cond.ObservedGeneration = spec.Generation
		prev := k.mirror(name).reported
		cond.LastTransitionTime = now
		if prev != nil && prev.cond.Status == cond.Status {
			cond.LastTransitionTime = prev.cond.LastTransitionTime
		}
		if prev != nil && reflect.DeepEqual(prev.st, st) && reflect.DeepEqual(prev.cond, cond) {
			continue
		}
		writes = append(writes, write{name: name, spec: spec, st: st, cond: cond})
	}
	k.mu.Unlock()

	for _, w := range writes {
		if err := k.deps.Report.Status(ctx, w.spec, w.st, w.cond); err != nil {
			// Not recorded as reported: the next status pass writes it.
			if !errors.Is(err, errHeldBack) {
				log.FromContext(ctx).Error(err, "writing status.keep", "mirror", w.name)
			}
			continue
		}
		k.mu.Lock()
		k.mirror(w.name).reported = &reported{st: w.st, cond: w.cond}
		k.mu.Unlock()
	}
}

// failureImage is the image a failure names: the origin, with the digest kept when known.
func failureImage(w *keep.Want) string {
	if w.Digest == "" || strings.Contains(w.Origin, "@") {
		return w.Origin
	}
	return w.Origin + "@" + w.Digest
}

// skipMessage explains a plan skip reported as a failure.
func skipMessage(r v1alpha1.KeepFailureReason) string {
	if r == v1alpha1.KeepUnnameable {
		return "the mirror cannot name the image (a registry host with a port)"
	}
	return "the source needs a credential and spec.keep.privateSources is Deny"
}
