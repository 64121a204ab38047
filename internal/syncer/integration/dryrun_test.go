package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A dry-run resource writes no Secret, even Always and injecting, and says so in its status;
// an enforcing resource that becomes a dry run gives up its Secrets like one that stops
// injecting, and gets them back when it enforces again.
func TestDryRunResourceWritesNoSecret(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "q:pw"}))
	trial := testutil.NewImageAlternative(n + "-trial").Policy(v1alpha1.RewritePolicyAlways).DryRun().
		NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").
		Repository("registry.local:5000/acme/foo").SecretRef(n + "-creds").Build()
	create(t, e, &trial)
	// The control: the same resource, enforcing, in the same namespace.
	alwaysForScope(t, e, n, "q:pw")
	ns := createNamespace(t, e, map[string]string{"scope": n})
	startSyncer(t, syncerConfig())

	secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{"quay.io/acme/foo": "q:pw"})
	readyReason(t, e, &trial, v1alpha1.ReasonDryRun)
	absentFor(t, e, ns, "kuik-inject-imagealternative-"+n+"-trial", time.Second)

	// The enforcing one becomes a dry run: its Secret is emptied as when it stops injecting.
	enforcing := &v1alpha1.ImageAlternative{}
	if err := e.cl.Get(t.Context(), clientKey(n), enforcing); err != nil {
		t.Fatal(err)
	}
	enforcing.Spec.DryRun = true
	if err := e.cl.Update(t.Context(), enforcing); err != nil {
		t.Fatal(err)
	}
	readyReason(t, e, enforcing, v1alpha1.ReasonDryRun)
	secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{})

	// And enforces again.
	if err := e.cl.Get(t.Context(), clientKey(n), enforcing); err != nil {
		t.Fatal(err)
	}
	enforcing.Spec.DryRun = false
	if err := e.cl.Update(t.Context(), enforcing); err != nil {
		t.Fatal(err)
	}
	secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{"quay.io/acme/foo": "q:pw"})
	readyReason(t, e, enforcing, v1alpha1.ReasonSynced)
}

func readyReason(t *testing.T, e env, ia *v1alpha1.ImageAlternative, want string) {
	t.Helper()
	eventually(t, "Ready reason "+want, func(ctx context.Context) error {
		var got v1alpha1.ImageAlternative
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(ia), &got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != want || c.ObservedGeneration != got.Generation {
			return fmt.Errorf("ready condition %+v at generation %d", c, got.Generation)
		}
		return nil
	})
}
