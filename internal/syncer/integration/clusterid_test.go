package integration_test

import (
	"testing"
	"time"

	"github.com/enix/kuik/internal/testutil"
)

// With a cluster ID, an OnFailure mirror's record counts only with that cluster's tag: a pod the
// webhook of cluster c1 routed to redis:7-kuik-c1 gets the mirror's entry in its namespace's
// Secret; records of the image's own tag or of c2's tag bring none. A syncer of c2 does not
// count the c1 record either.
func TestClusterIDRecordsCountWithTheClusterTagOnly(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"registry.tld": "m:pw"}))
	im := testutil.NewImageMirror(n, "registry.tld/mirror/").SecretRef(n + "-creds").NamespaceSelector(map[string]string{"scope": n}).Build()
	create(t, e, &im)
	scope := map[string]string{"scope": n}
	own, plain, other := createNamespace(t, e, scope), createNamespace(t, e, scope), createNamespace(t, e, scope)
	const mirrored = "registry.tld/mirror/docker.io/library/redis:7"
	by := rewrite{"redis:7", "ImageMirror/" + n}
	for ns, image := range map[string]string{own: mirrored + "-kuik-c1", plain: mirrored, other: mirrored + "-kuik-c2"} {
		createPod(t, e, rewrittenPod(ns, "p", map[string]string{"m": image}, map[string]rewrite{"m": by}))
	}

	opts := syncerConfig()
	opts.ClusterID = "c1"
	stop := startSyncer(t, opts)
	secretName := "kuik-inject-imagemirror-" + n
	secretHolds(t, e, own, secretName, map[string]string{"registry.tld/mirror": "m:pw"})
	absentFor(t, e, plain, secretName, time.Second)
	absentFor(t, e, other, secretName, time.Second)
	stop()

	// The same c1 record, in a namespace new to a syncer of c2.
	late := createNamespace(t, e, scope)
	createPod(t, e, rewrittenPod(late, "p", map[string]string{"m": mirrored + "-kuik-c1"}, map[string]rewrite{"m": by}))
	opts = syncerConfig()
	opts.ClusterID = "c2"
	startSyncer(t, opts)
	secretHolds(t, e, other, secretName, map[string]string{"registry.tld/mirror": "m:pw"}) // the c2 syncer runs
	absentFor(t, e, late, secretName, 2*time.Second)
}
