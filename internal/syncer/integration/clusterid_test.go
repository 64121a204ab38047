package integration_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
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

// Missed pulls route as the webhook of the same cluster ID does: the mirror holds app:v1 under
// c1's tag only and other:v1 under its own tag only. A syncer of c1 reports app's missed pull,
// naming c1's tag, and not other's; a syncer without an ID reports other's, not app's.
func TestClusterIDMissedPullsProbeTheClusterTag(t *testing.T) {
	e := harness(t)
	n := name(t)
	live := testutil.NewRegistry(t, "", "")
	dest := live.Host + "/" + n + "/"
	im := testutil.NewImageMirror(n, dest).Insecure().NamespaceSelector(map[string]string{"scope": n}).Build()
	create(t, e, &im)
	const app, other = "registry.invalid/acme/app:v1", "registry.invalid/acme/other:v1"
	push := func(image, id string) string {
		ref, err := routing.MirrorReferenceFor(dest, image, id)
		if err != nil {
			t.Fatal(err)
		}
		return live.Push(t, strings.TrimPrefix(ref, live.Host+"/"))
	}
	appC1, otherOwn := push(app, "c1"), push(other, "")
	if !strings.HasSuffix(appC1, ":v1-kuik-c1") {
		t.Fatalf("c1's mirror reference of %s is %s", app, appC1)
	}

	for _, phase := range []struct {
		id                 string
		reported, unrouted string // images
		candidate          string
	}{
		{id: "c1", reported: app, unrouted: other, candidate: appC1},
		{id: "", reported: other, unrouted: app, candidate: otherOwn},
	} {
		ns := createNamespace(t, e, map[string]string{"scope": n})
		opts := syncerConfig()
		opts.ClusterID = phase.id
		opts.MissedPulls = missedPullOptions(false, time.Second)
		stop := startSyncer(t, opts)
		unrouted := stuckPod(t, e, ns, "unrouted", phase.unrouted, nil, true)
		pullFailed(t, e, unrouted, phase.unrouted)
		reported := stuckPod(t, e, ns, "reported", phase.reported, nil, true)
		pullFailed(t, e, reported, phase.reported)
		waitEvent(t, e, "Pod", ns, "reported", v1alpha1.EventImagePullMissedRouting, phase.reported, strconv.Quote(phase.candidate))
		time.Sleep(2 * time.Second) // the queue handed out the earlier pod first
		noEvent(t, e, "Pod", ns, "unrouted", v1alpha1.EventImagePullMissedRouting)
		stop()
	}
}
