package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testutil"
)

// retentionFixture is an OnFailure ImageAlternative n whose two injecting entries A
// (registry.a/acme/foo) and B (registry.b/acme/foo) both stand for quay.io/acme/foo, and two
// namespaces: busy, where p1 was routed to A and p2 to B, and quiet, where p3 was routed to A.
type retentionFixture struct {
	n, busy, quiet, secret string
}

var (
	entryA = map[string]string{"registry.a/acme/foo": "a:pw"}
	entryB = map[string]string{"registry.b/acme/foo": "b:pw"}
	bothAB = map[string]string{"registry.a/acme/foo": "a:pw", "registry.b/acme/foo": "b:pw"}
)

func newRetentionFixture(t *testing.T, e env) retentionFixture {
	t.Helper()
	f := retentionFixture{n: name(t)}
	putSecret(t, e, pullSecret(f.n+"-creds", map[string]string{"registry.a": "a:pw", "registry.b": "b:pw"}))
	ia := testutil.NewImageAlternative(f.n).
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef(f.n + "-creds").
		Repository("registry.b/acme/foo").SecretRef(f.n + "-creds").Build()
	create(t, e, &ia)
	f.busy = createNamespace(t, e, nil)
	f.quiet = createNamespace(t, e, nil)
	f.secret = routing.PullSecretName(routing.KindImageAlternative, f.n)
	return f
}

func (f retentionFixture) createPods(t *testing.T, e env) {
	t.Helper()
	by := "ImageAlternative/" + f.n
	createPod(t, e, rewrittenPod(f.busy, "p1", map[string]string{"c": "registry.a/acme/foo:v1"}, map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
	createPod(t, e, rewrittenPod(f.busy, "p2", map[string]string{"c": "registry.b/acme/foo:v1"}, map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
	createPod(t, e, rewrittenPod(f.quiet, "p3", map[string]string{"c": "registry.a/acme/foo:v1"}, map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
}

// deletePodsOfA deletes the pods routed to A: A is then kept for the retention only.
func (f retentionFixture) deletePodsOfA(t *testing.T, e env) {
	t.Helper()
	for ns, pod := range map[string]string{f.busy: "p1", f.quiet: "p3"} {
		if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// holdsNow checks a Secret's content once, without waiting.
func holdsNow(t *testing.T, e env, ns, name string, want map[string]string) {
	t.Helper()
	s, err := e.cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := authsOf(t, s); !equalMaps(got, want) {
		t.Errorf("secret %s/%s holds %v, want %v", ns, name, got, want)
	}
}

// retained reads the resource's retention record: namespace -> auths key -> "live" or the time of
// last use.
func retained(ctx context.Context, e env, n string) (map[string]map[string]string, error) {
	cm, err := e.cs.CoreV1().ConfigMaps(crns).Get(ctx, syncer.RetentionName(routing.KindImageAlternative, n), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for ns, raw := range cm.Data {
		var uses map[string]struct {
			Live     bool      `json:"live"`
			LastUsed time.Time `json:"lastUsed"`
		}
		if err := json.Unmarshal([]byte(raw), &uses); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		out[ns] = map[string]string{}
		for k, u := range uses {
			if u.Live {
				out[ns][k] = "live"
			} else {
				out[ns][k] = u.LastUsed.UTC().Format(time.RFC3339Nano)
			}
		}
	}
	return out, nil
}

// appliedLog collects, from a syncer's log (funcr's format), the Secrets it applied.
type appliedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *appliedLog) observe(line string) {
	if !strings.Contains(line, `"msg"="applied pull secret"`) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *appliedLog) count(ns, name string) int {
	ref := fmt.Sprintf(`"secret"={"name"=%q "namespace"=%q}`, name, ns)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, ref) {
			n++
		}
	}
	return n
}

// waitApplied waits until the syncer whose log l observes applied the Secret.
func waitApplied(t *testing.T, l *appliedLog, ns, name string) {
	t.Helper()
	eventually(t, "the syncer applies "+ns+"/"+name, func(context.Context) error {
		if l.count(ns, name) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
}

// A restart in the middle of a retention window keeps the entries still within it, with the
// time of their last use, not the restart's: A (its pods deleted 10 minutes before the restart)
// stays after it, in the namespace whose other pod needs B as in the one with no pod left, and
// goes 15 minutes after its last use.
func TestRetentionSurvivesRestart(t *testing.T) {
	e := harness(t)
	f := newRetentionFixture(t, e)
	clk := clocktesting.NewFakeClock(time.Now())
	opts := syncerConfig()
	opts.Clock = clk
	stop := startSyncer(t, opts)
	f.createPods(t, e)
	secretHolds(t, e, f.busy, f.secret, bothAB)
	secretHolds(t, e, f.quiet, f.secret, entryA)

	f.deletePodsOfA(t, e)
	lastUse := clk.Now().UTC().Format(time.RFC3339Nano)
	eventually(t, "the retention record keeps A's last use", func(ctx context.Context) error {
		rec, err := retained(ctx, e, f.n)
		if err != nil {
			return err
		}
		want := map[string]map[string]string{
			f.busy:  {"registry.a/acme/foo": lastUse, "registry.b/acme/foo": "live"},
			f.quiet: {"registry.a/acme/foo": lastUse},
		}
		if fmt.Sprint(rec) != fmt.Sprint(want) {
			return fmt.Errorf("record %v, want %v", rec, want)
		}
		return nil
	})

	clk.Step(10 * time.Minute)
	stop()
	var log appliedLog
	startSyncerWith(t, opts, cp.ConfigAsServiceAccount(crns, serviceAccount), log.observe)
	// Its first decision of each pair: A is still within its retention, in the namespace where
	// p2 still needs the resource as in the one no pod needs it in any more.
	waitApplied(t, &log, f.busy, f.secret)
	holdsNow(t, e, f.busy, f.secret, bothAB)
	waitApplied(t, &log, f.quiet, f.secret)
	holdsNow(t, e, f.quiet, f.secret, entryA)

	// 16 minutes after A's last use (6 after the restart): A goes. Touching the namespaces'
	// labels makes the syncer decide again on the stepped clock.
	clk.Step(6 * time.Minute)
	label(t, e, f.busy, map[string]string{"touched": "1"})
	label(t, e, f.quiet, map[string]string{"touched": "1"})
	secretHolds(t, e, f.busy, f.secret, entryB)
	secretHolds(t, e, f.quiet, f.secret, map[string]string{})
}

// Retention survives a leader change too, and the retention window expiring drops the entry on
// its own, without a resync or any event: leader and standby, real clock, a short retention.
// The leader's debounced record write waits an hour: the record it writes before its first
// Secrets has A live, and only what it writes as it stops has A's last use (a leader stopped
// within the record's delay lost the retention before).
func TestRetentionSurvivesLeaderChangeAndExpires(t *testing.T) {
	e := harness(t)
	f := newRetentionFixture(t, e)
	opts := syncerConfig()
	opts.Retention = 15 * time.Second
	opts.ResyncPeriod = time.Hour
	opts.LeaderElection = true
	opts.LeaderElectionID = f.n
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond

	leaderOpts := *opts
	leaderOpts.RetentionDelay = time.Hour
	stopLeader := startSyncer(t, &leaderOpts)
	f.createPods(t, e)
	secretHolds(t, e, f.busy, f.secret, bothAB)
	secretHolds(t, e, f.quiet, f.secret, entryA)
	aIs := func(want func(string) bool, what string) {
		t.Helper()
		rec, err := retained(t.Context(), e, f.n)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{f.busy, f.quiet} {
			if a := rec[ns]["registry.a/acme/foo"]; !want(a) {
				t.Fatalf("the record has A in %s as %q, want %s (record %v)", ns, a, what, rec)
			}
		}
	}
	isLive := func(s string) bool { return s == "live" }
	aIs(isLive, "live: written before the first Secrets")
	var standby appliedLog
	startSyncerWith(t, opts, cp.ConfigAsServiceAccount(crns, serviceAccount), standby.observe)

	// Decisions of the pods' creation still pending would count below as decisions without
	// A's pods: start counting once the leader has been quiet for a second.
	skipped := quietAppliesSkipped(t)
	f.deletePodsOfA(t, e)
	deleted := time.Now()
	// The Secrets do not change (A is retained): the leader's decisions show as skipped applies.
	eventually(t, "the leader decides both namespaces without A's pods", func(context.Context) error {
		if appliesSkipped(t)-skipped < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	aIs(isLive, "live still: the debounced write waits an hour")
	stopLeader()
	aIs(func(s string) bool { return s != "live" && s != "" }, "its last use, written as the leader stopped")
	inRetention := func() {
		t.Helper()
		if waited := time.Since(deleted); waited >= opts.Retention {
			t.Fatalf("the standby took %s to take over, more than the %s retention: inconclusive, raise it", waited, opts.Retention)
		}
	}
	waitApplied(t, &standby, f.busy, f.secret)
	inRetention()
	holdsNow(t, e, f.busy, f.secret, bothAB)
	waitApplied(t, &standby, f.quiet, f.secret)
	inRetention()
	holdsNow(t, e, f.quiet, f.secret, entryA)

	// The retention ends: A goes, on the expiry the new leader scheduled.
	secretHolds(t, e, f.busy, f.secret, entryB)
	secretHolds(t, e, f.quiet, f.secret, map[string]string{})
	eventually(t, "the record forgets A", func(ctx context.Context) error {
		rec, err := retained(ctx, e, f.n)
		if err != nil {
			return err
		}
		if want := map[string]map[string]string{f.busy: {"registry.b/acme/foo": "live"}}; fmt.Sprint(rec) != fmt.Sprint(want) {
			return fmt.Errorf("record %v, want %v", rec, want)
		}
		return nil
	})
}

// appliesSkipped reads the process-wide counter of applies skipped by the hash.
// quietAppliesSkipped waits until the skipped-apply count has not moved for a second, and
// returns it.
func quietAppliesSkipped(t *testing.T) float64 {
	t.Helper()
	last, since := appliesSkipped(t), time.Now()
	for deadline := time.Now().Add(pollTimeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cur := appliesSkipped(t); cur != last {
			last, since = cur, time.Now()
		} else if time.Since(since) >= time.Second {
			return last
		}
	}
	t.Fatal("the syncer never went quiet")
	return 0
}

func appliesSkipped(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.SyncerAppliesSkipped.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
