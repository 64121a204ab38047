package integration_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
)

// deadTransport fails every request once dead is set: the process is gone, as after a SIGKILL
// (no graceful flush of the retention records reaches the API server, no lease release).
func deadTransport(dead *atomic.Bool) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if dead.Load() {
				return nil, errors.New("killed")
			}
			return rt.RoundTrip(r)
		})
	}
}

// A leader killed right after the first Secret of a resource in a namespace, whose only pod
// went meanwhile, leaves the next leader a retention record that names the namespace: the new
// leader keeps the entry through its retention and then empties the Secret. The leader's
// debounced record write waits an hour, so the record can only come from the write before the
// first Secret (before, the namespace was never decided again and kept the entry for good).
func TestRetentionNamesNamespaceBeforeItsFirstSecret(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.a": "a:pw"}))
	ia := testutil.NewImageAlternative(n).
		Repository("quay.io/acme/foo").
		Repository("registry.a/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	ns := createNamespace(t, e, nil)
	secret := routing.PullSecretName(routing.KindImageAlternative, n)

	opts := syncerConfig()
	opts.Retention = 15 * time.Second
	opts.LeaderElection = true
	opts.LeaderElectionID = n
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	leaderOpts := *opts
	leaderOpts.RetentionDelay = time.Hour
	var dead atomic.Bool
	leaderCfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	leaderCfg.WrapTransport = deadTransport(&dead)
	stopLeader := startSyncerWith(t, &leaderOpts, leaderCfg, nil)
	var standby appliedLog
	startSyncerWith(t, opts, cp.ConfigAsServiceAccount(crns, serviceAccount), standby.observe)

	by := "ImageAlternative/" + n
	createPod(t, e, rewrittenPod(ns, "p", map[string]string{"c": "registry.a/acme/foo:v1"}, map[string]rewrite{"c": {"quay.io/acme/foo:v1", by}}))
	secretHolds(t, e, ns, secret, entryA)
	if err := e.cs.CoreV1().Pods(ns).Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	dead.Store(true)
	stopLeader()

	rec, err := retained(t.Context(), e, n)
	if err != nil {
		t.Fatalf("no retention record after the leader's first Secret: %v", err)
	}
	if _, ok := rec[ns]; !ok {
		t.Fatalf("the retention record %v does not name %s, where the leader wrote a Secret", rec, ns)
	}
	waitApplied(t, &standby, ns, secret)
	if waited := time.Since(deleted); waited >= opts.Retention {
		t.Fatalf("the standby took %s to take over, more than the %s retention: inconclusive", waited, opts.Retention)
	}
	holdsNow(t, e, ns, secret, entryA)
	secretHolds(t, e, ns, secret, map[string]string{})
	eventually(t, "the record forgets the namespace", func(ctx context.Context) error {
		rec, err := retained(ctx, e, n)
		if err != nil {
			return err
		}
		if len(rec) != 0 {
			return errors.New("still names a namespace")
		}
		return nil
	})
}
