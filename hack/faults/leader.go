package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

var (
	entryA = map[string]string{"registry.a/acme/foo": "a:pw"}
	entryB = map[string]string{"registry.b/acme/foo": "b:pw"}
	bothAB = map[string]string{"registry.a/acme/foo": "a:pw", "registry.b/acme/foo": "b:pw"}
	none   = map[string]string{}
)

// timeline samples both replicas' apply counters and the Lease holder.
type timeline struct {
	mu sync.Mutex
	// firstApply is when each replica was first seen with applies; lastApply when its count
	// last grew.
	firstApply, lastApply map[string]time.Time
	holders               []holderChange
}

type holderChange struct {
	at     time.Time
	holder string
}

func (e *env) sample(ctx context.Context, procs ...*syncerProc) *timeline {
	tl := &timeline{firstApply: map[string]time.Time{}, lastApply: map[string]time.Time{}}
	last := map[string]float64{}
	go func() {
		for ctx.Err() == nil {
			now := time.Now()
			for _, p := range procs {
				if !p.alive() {
					continue
				}
				v := p.applies(ctx)
				tl.mu.Lock()
				if v > 0 && tl.firstApply[p.name].IsZero() {
					tl.firstApply[p.name] = now
				}
				if v > last[p.name] {
					tl.lastApply[p.name] = now
					last[p.name] = v
				}
				tl.mu.Unlock()
			}
			if l, err := e.cs.CoordinationV1().Leases(crns).Get(ctx, syncer.DefaultLeaderElectionID, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
				tl.mu.Lock()
				if n := len(tl.holders); n == 0 || tl.holders[n-1].holder != *l.Spec.HolderIdentity {
					tl.holders = append(tl.holders, holderChange{now, *l.Spec.HolderIdentity})
				}
				tl.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return tl
}

// leaderKill is row 3: two replicas with leader election, the leader SIGKILLed.
func leaderKill(ctx context.Context, bin string, w io.Writer) error {
	e, names, err := setup(ctx, bin, w)
	if err != nil {
		return err
	}
	defer e.stop()
	n := len(names)
	retention := *flagRetention
	ws, err := e.watchWrites(ctx)
	if err != nil {
		return err
	}
	defer ws.stop()
	flags := []string{"--leader-elect=true", "--retention=" + retention.String()}
	a, err := e.startSyncer(ctx, "replica-1", flags...)
	if err != nil {
		return err
	}
	defer a.p.Stop()
	if _, err := waitLeader(ctx, a, time.Minute); err != nil {
		return fmt.Errorf("replica-1 never led: %w", err)
	}
	b, err := e.startSyncer(ctx, "replica-2", flags...)
	if err != nil {
		return err
	}
	defer b.p.Stop()
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	tl := e.sample(sctx, a, b)

	// The leader converges the Always resource.
	t0 := time.Now()
	if err := e.always(ctx, "always", "always"); err != nil {
		return err
	}
	tConv, err := e.waitCorrect(ctx, "always", names, alwaysAuths, 10*time.Minute)
	if err != nil {
		return err
	}

	// An OnFailure resource with entries A and B: busy (p1 -> A, p2 -> B), quiet (p3 -> A).
	ia := testutil.NewImageAlternative("retained").
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef("creds").
		Repository("registry.b/acme/foo").SecretRef("creds").Build()
	if err := e.cl.Create(ctx, &ia); err != nil {
		return err
	}
	busy, quiet, fresh := "busy", "quiet", "fresh"
	for _, ns := range []string{busy, quiet, fresh} {
		if err := benchutil.CreateNamespace(ctx, e.cs, ns, nil); err != nil {
			return err
		}
	}
	for _, p := range []*corev1.Pod{
		rewrittenPod(busy, "p1", "registry.a/acme/foo:v1"),
		rewrittenPod(busy, "p2", "registry.b/acme/foo:v1"),
		rewrittenPod(quiet, "p3", "registry.a/acme/foo:v1"),
	} {
		if _, err := e.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := e.waitCorrect(ctx, "retained", []string{busy}, bothAB, time.Minute); err != nil {
		return err
	}
	if _, err := e.waitCorrect(ctx, "retained", []string{quiet}, entryA, time.Minute); err != nil {
		return err
	}
	// A's pods go: A is kept for the retention only, and recorded so.
	for ns, pod := range map[string]string{busy: "p1", quiet: "p3"} {
		if err := e.cs.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	tDeleted := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rec, err := e.record(ctx, "retained")
		if err != nil {
			return false, nil
		}
		return rec[busy]["registry.a/acme/foo"] == "retained" && rec[quiet]["registry.a/acme/foo"] == "retained", nil
	}); err != nil {
		return fmt.Errorf("the leader never recorded A's retention: %w", err)
	}
	tRecorded := time.Now()

	// fresh: a first pod routed to A, its Secret written, the pod deleted, and the leader
	// SIGKILLed at once, within the record's debounce.
	freshKey := fresh + "/" + routing.PullSecretName(routing.KindImageAlternative, "retained")
	if _, err := e.cs.CoreV1().Pods(fresh).Create(ctx, rewrittenPod(fresh, "p4", "registry.a/acme/foo:v1"), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return ws.count(freshKey) > 0, nil
	}); err != nil {
		return fmt.Errorf("no Secret in %s: %w", fresh, err)
	}
	tFreshSecret := time.Now()
	if err := e.cs.CoreV1().Pods(fresh).Delete(ctx, "p4", metav1.DeleteOptions{}); err != nil {
		return err
	}
	tFreshDeleted := time.Now()
	applied := a.applies(ctx)
	tKill := a.kill()
	rec, err := e.record(ctx, "retained")
	if err != nil {
		return err
	}
	_, freshRecorded := rec[fresh]
	writesAtKill := ws.total.Load()

	// Takeover.
	var tLeader time.Time
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if b.leader(ctx) {
			tLeader = time.Now()
			return true, nil
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("replica-2 never took over: %w", err)
	}
	// The new leader applies every pair it knows once at its start: the n Always pairs, busy
	// and quiet (from their pods and the record), fresh only if the record names it.
	want := float64(n + 2)
	if freshRecorded {
		want++
	}
	if err := waitApplies(ctx, b, want, 5*time.Minute); err != nil {
		return err
	}
	tApplied := time.Now()
	inRetention := tApplied.Sub(tDeleted) < retention
	busyBad, err := e.checkSecrets(ctx, "retained", []string{busy}, bothAB)
	if err != nil {
		return err
	}
	quietBad, err := e.checkSecrets(ctx, "retained", []string{quiet}, entryA)
	if err != nil {
		return err
	}
	alwaysBad, err := e.checkSecrets(ctx, "always", names, alwaysAuths)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	takeoverWrites := ws.total.Load() - writesAtKill

	// The retention ends: A goes, on the expiry the new leader scheduled.
	expiry := tDeleted.Add(retention)
	_, errBusy := e.waitCorrect(ctx, "retained", []string{busy}, entryB, time.Until(expiry)+30*time.Second)
	_, errQuiet := e.waitCorrect(ctx, "retained", []string{quiet}, none, time.Until(expiry)+5*time.Second)
	// A use the killed leader had not recorded yet counts as a use at the takeover: fresh's
	// entry may stay up to the takeover's time longer than its retention.
	tFreshEmpty, errFresh := e.waitCorrect(ctx, "retained", []string{fresh}, none, time.Until(tLeader.Add(retention))+15*time.Second)
	stopSampling()

	tl.mu.Lock()
	bFirst, aLast := tl.firstApply[b.name], tl.lastApply[a.name]
	holders := slices.Clone(tl.holders)
	tl.mu.Unlock()
	printf(w, "replica-1 led; convergence of %d namespaces in %s (floor of this run)\n", n, since(t0, tConv))
	printf(w, "retention %s: A's pods deleted, the record written %s after; fresh's Secret written, its pod deleted %s after, replica-1 SIGKILLed %s after the Secret (%.0f applies by it)\n",
		retention, since(tDeleted, tRecorded), since(tFreshSecret, tFreshDeleted), since(tFreshSecret, tKill), applied)
	printf(w, "takeover: replica-2 leader %s after the kill (lease duration 15s, retry 2s: controller-runtime's defaults, the binary has no flag for them)\n", since(tKill, tLeader))
	printf(w, "          replica-2 re-applied its %.0f pairs %s after the kill; Secret writes during the takeover: %d (identical applies are no-ops)\n",
		want, since(tKill, tApplied), takeoverWrites)
	for _, h := range holders {
		printf(w, "          lease holder %s from +%s\n", h.holder, since(t0, h.at))
	}
	oneWriter := !bFirst.IsZero() && bFirst.After(tKill) && !aLast.After(tKill)
	printf(w, "one writer at a time: replica-1's last apply seen at +%s, the kill at +%s, replica-2's first apply at +%s: %v\n",
		since(t0, aLast), since(t0, tKill), since(t0, bFirst), oneWriter)
	printf(w, "retention after the takeover (%s after A's pods went, within the %s retention: %v): busy holds A+B: %v, quiet holds A: %v; %d Always Secrets wrong\n",
		since(tDeleted, tApplied), retention, inRetention, len(busyBad) == 0, len(quietBad) == 0, len(alwaysBad))
	printf(w, "retention end: busy down to B: %v, quiet emptied: %v\n", errBusy == nil, errQuiet == nil)
	printf(w, "fresh (Secret written %s before the kill, pod gone): named by the record at the kill: %v (as %v); emptied: %v",
		since(tFreshSecret, tKill), freshRecorded, rec[fresh], errFresh == nil)
	if errFresh == nil {
		printf(w, ", %s after its pod went (retention %s)", since(tFreshDeleted, tFreshEmpty), retention)
	}
	printf(w, "\n")
	switch {
	case !inRetention:
		return fmt.Errorf("%w: the takeover took longer than the retention: inconclusive, raise -retention", errOutcome)
	case !oneWriter:
		return fmt.Errorf("%w: replica-2 applied before the kill, or replica-1 after it", errOutcome)
	case len(busyBad) > 0 || len(quietBad) > 0:
		return fmt.Errorf("%w: retained entries lost at the takeover: %v %v", errOutcome, busyBad, quietBad)
	case len(alwaysBad) > 0:
		return fmt.Errorf("%w: %d Always Secrets wrong after the takeover: %v", errOutcome, len(alwaysBad), first(alwaysBad, 5))
	case errBusy != nil || errQuiet != nil:
		return fmt.Errorf("%w: the retention did not end: %w", errOutcome, errors.Join(errBusy, errQuiet))
	case errFresh != nil:
		return fmt.Errorf("%w: %s keeps A past its retention: %w", errOutcome, fresh, errFresh)
	}
	printf(w, "outcome: takeover with one writer, retention kept and ended, nothing left behind\n")
	return nil
}

// rewrittenPod is a pod as the webhook admits it after routing its container c from
// quay.io/acme/foo:v1 to image by the ImageAlternative retained.
func rewrittenPod(ns, name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{v1alpha1.LabelRewritten: "true"},
			Annotations: map[string]string{
				v1alpha1.AnnotationRewrittenBy:    `{"c":"ImageAlternative/retained"}`,
				v1alpha1.AnnotationOriginalImages: `{"c":"quay.io/acme/foo:v1"}`,
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
	}
}

// record reads a resource's retention record: namespace -> auths key -> "live" or "retained".
func (e *env) record(ctx context.Context, name string) (map[string]map[string]string, error) {
	cm, err := e.cs.CoreV1().ConfigMaps(crns).Get(ctx, syncer.RetentionName(routing.KindImageAlternative, name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, ns := range slices.Sorted(maps.Keys(cm.Data)) {
		var uses map[string]struct {
			Live bool `json:"live"`
		}
		if err := json.Unmarshal([]byte(cm.Data[ns]), &uses); err != nil {
			return nil, fmt.Errorf("record %s, namespace %s: %w", cm.Name, ns, err)
		}
		out[ns] = map[string]string{}
		for k, u := range uses {
			out[ns][k] = map[bool]string{true: "live", false: "retained"}[u.Live]
		}
	}
	return out, nil
}
