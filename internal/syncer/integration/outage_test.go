package integration_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A leader whose API server is gone for longer than its renew deadline loses its lease; it
// stops its controller, campaigns again in the same process once the API server is back, and
// keeps Secrets right without a restart: a namespace created after the outage gets its Secret.
func TestLeaderRidesOutAnAPIServerOutageLongerThanItsRenewDeadline(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "q:pw"}))
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).
		NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &ia)
	before := createNamespace(t, e, map[string]string{"scope": n})

	opts := syncerConfig()
	opts.LeaderElection = true
	opts.LeaderElectionID = n
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	var recampaigned atomic.Bool
	startSyncerWith(t, opts, cp.ConfigAsServiceAccount(crns, serviceAccount), func(line string) {
		if strings.Contains(line, "campaigning again") {
			recampaigned.Store(true)
		}
	})
	secret := routing.PullSecretName(routing.KindImageAlternative, n)
	want := map[string]string{"quay.io/acme/foo": "q:pw"}
	secretHolds(t, e, before, secret, want)

	if err := cp.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	// Past the renew deadline and the lease: the leader has given up.
	time.Sleep(opts.LeaseDuration + time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the syncer campaigns again after losing its lease", func(context.Context) error {
		if !recampaigned.Load() {
			return errors.New("not yet")
		}
		return nil
	})
	after := createNamespace(t, e, map[string]string{"scope": n})
	secretHolds(t, e, after, secret, want)
	secretHolds(t, e, before, secret, want)
}
