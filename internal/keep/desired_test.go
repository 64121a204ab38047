package keep_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

func TestDesired(t *testing.T) {
	ix := index(t)
	nginx := "docker.io/library/nginx:1"
	nginxDest := "mirror.local/kuik/docker.io/library/nginx:1"
	quayAuth := &v1alpha1.Auth{SecretRef: &v1alpha1.LocalSecretReference{Name: "quay-pull"}}
	team := keep.Mirror{Name: "team", Destination: "team.local/m/"}
	noTemplates := keepMirror
	noTemplates.CountTemplates = false
	allowPrivate := keepMirror
	selectsNothing := keepMirror
	selectsNothing.Selects = func(labels.Set, labels.Set) bool { return false }
	allowPrivate.AllowPrivateSources = true
	teamPod := pod("web", "nginx:1", "busybox:1")
	teamPod.Labels = labels.Set{"team": "a"}
	initAndEphemeral := pod("debug", "nginx:1", "redis:7", "busybox:1")
	initAndEphemeral.Containers[0].Name, initAndEphemeral.Containers[2].Name = "init", "debugger"

	for name, tc := range map[string]struct {
		mirrors []keep.Mirror
		snap    *keep.Snapshot
		keep    []keep.Want
		skipped []keep.Skip
	}{
		"a container not routed keeps its spec image, with the digest its node runs, as a first copy": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(withImageID(pod("web", "nginx:1"), 0, "docker.io/library/nginx@"+digestA)),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Digest: digestA, Destination: nginxDest,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"a container routed to the mirror by a verified record keeps its original first, with the node's digest": {
			mirrors: []keep.Mirror{keepMirror},
			snap: snapshot(routed(withImageID(pod("web", nginxDest), 0, "docker-pullable://"+nginxDest[:len(nginxDest)-2]+"@"+digestA),
				nginx, "ImageMirror/keep")),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Digest: digestA, Destination: nginxDest,
				Priority: keep.PriorityRouted, Why: "Pod default/web container c0"}},
		},
		"a forged original-images keeps nothing": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(routed(pod("web", nginxDest), "docker.io/evil/secret:1", "ImageMirror/keep")),
			skipped: []keep.Skip{{Image: "docker.io/evil/secret:1", Reason: keep.ReasonUnverifiedRecord, Why: "Pod default/web container c0"}},
		},
		"an original-images record naming no resource keeps nothing, not even the spec image": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(routed(pod("web", "redis:7"), "nginx:1", "")),
			skipped: []keep.Skip{{Image: nginx, Reason: keep.ReasonUnverifiedRecord, Why: "Pod default/web container c0"}},
		},
		"a record naming a resource that does not select the pod keeps nothing": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(routed(pod("web", "team.local/m/docker.io/library/nginx:1"), nginx, "ImageMirror/team")),
			skipped: []keep.Skip{{Image: nginx, Reason: keep.ReasonUnverifiedRecord, Why: "Pod default/web container c0"}},
		},
		"a pod running the mirror's own destination, unrecorded, keeps nothing (no loop)": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(pod("web", nginxDest)),
			skipped: []keep.Skip{{Mirror: "keep", Image: nginxDest, Reason: keep.ReasonOwnDestination, Why: "Pod default/web container c0"}},
		},
		"an image on a host with a port is reported, not kept: the mirror cannot name it": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(pod("web", "registry.local:5000/app:1")),
			skipped: []keep.Skip{{Mirror: "keep", Image: "registry.local:5000/app:1", Reason: keep.ReasonUnnameable, Why: "Pod default/web container c0"}},
		},
		"an image on a host with a port, in a pod the mirror does not select, is not called unnameable": {
			mirrors: []keep.Mirror{selectsNothing},
			snap:    snapshot(pod("web", "registry.local:5000/app:1")),
			skipped: []keep.Skip{{Mirror: "keep", Image: "registry.local:5000/app:1", Reason: keep.ReasonNotCovered, Why: "Pod default/web container c0"}},
		},
		"an image the mirror does not select or excludes is reported, not kept": {
			mirrors: []keep.Mirror{team},
			snap:    snapshot(pod("other", "nginx:1"), teamPod),
			keep: []keep.Want{{Mirror: "team", Origin: nginx, Destination: "team.local/m/docker.io/library/nginx:1",
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
			skipped: []keep.Skip{
				{Mirror: "team", Image: "docker.io/library/busybox:1", Reason: keep.ReasonNotCovered, Why: "Pod default/web container c1"},
				{Mirror: "team", Image: nginx, Reason: keep.ReasonNotCovered, Why: "Pod default/other container c0"},
			},
		},
		"a source that needs a credential is not kept under privateSources Deny": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(pod("web", "quay.io/acme/app:2")),
			skipped: []keep.Skip{{Mirror: "keep", Image: "quay.io/acme/app:2", Reason: keep.ReasonPrivateSource, Why: "Pod default/web container c0"}},
		},
		"a source that needs a credential is kept with it under privateSources Allow": {
			mirrors: []keep.Mirror{allowPrivate},
			snap:    snapshot(pod("web", "quay.io/acme/app:2")),
			keep: []keep.Want{{Mirror: "keep", Origin: "quay.io/acme/app:2", Destination: "mirror.local/kuik/quay.io/acme/app:2",
				Priority: keep.PriorityLive, Why: "Pod default/web container c0", SourceAuth: quayAuth}},
		},
		"a spec image changed in place does not take the old container's digest: resolved by tag": {
			mirrors: []keep.Mirror{keepMirror},
			snap: snapshot(withStatusImage(withImageID(pod("web", "nginx:1"), 0, "docker.io/library/nginx@"+digestA),
				0, "nginx:0.9")),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Destination: nginxDest,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"an imageID of another repository is not the spec image's digest: resolved by tag": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(withImageID(pod("web", "nginx:1"), 0, "docker.io/evil/nginx@"+digestA)),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Destination: nginxDest,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"a bare sha256 imageID is the local image ID: the digest is resolved by tag": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(withImageID(pod("web", "nginx:1"), 0, digestA)),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Destination: nginxDest,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"a container routed to an alternative keeps its original, without the alternative's digest": {
			mirrors: []keep.Mirror{keepMirror},
			snap: snapshot(routed(withImageID(pod("web", "ghcr.io/acme/app:2"), 0, "ghcr.io/acme/app@"+digestB),
				"quay.io/acme/app:2", "ImageAlternative/alt")),
			skipped: []keep.Skip{{Mirror: "keep", Image: "quay.io/acme/app:2", Reason: keep.ReasonPrivateSource, Why: "Pod default/web container c0"}},
		},
		"a container routed to an alternative under Allow keeps its original, digest resolved by tag": {
			mirrors: []keep.Mirror{allowPrivate},
			snap: snapshot(routed(withImageID(pod("web", "ghcr.io/acme/app:2"), 0, "ghcr.io/acme/app@"+digestB),
				"quay.io/acme/app:2", "ImageAlternative/alt")),
			keep: []keep.Want{{Mirror: "keep", Origin: "quay.io/acme/app:2", Destination: "mirror.local/kuik/quay.io/acme/app:2",
				Priority: keep.PriorityLive, Why: "Pod default/web container c0", SourceAuth: quayAuth}},
		},
		"templates count only for a mirror with countTemplates": {
			mirrors: []keep.Mirror{noTemplates},
			snap: &keep.Snapshot{Templates: []keep.Template{{Kind: keep.KindReplicaSet, Namespace: "default", Name: "web-1",
				Labels: labels.Set{"app": "web"}, Images: []string{"nginx:1"}}}},
		},
		"a template's image is kept after the live pods' images": {
			mirrors: []keep.Mirror{keepMirror},
			snap: &keep.Snapshot{
				Pods: []keep.Pod{pod("web", "redis:7")},
				Templates: []keep.Template{{Kind: keep.KindCronJob, Namespace: "default", Name: "nightly",
					Labels: labels.Set{"app": "nightly"}, Images: []string{"nginx:1"}}},
			},
			keep: []keep.Want{
				{Mirror: "keep", Origin: "docker.io/library/redis:7", Destination: "mirror.local/kuik/docker.io/library/redis:7",
					Priority: keep.PriorityLive, Why: "Pod default/web container c0"},
				{Mirror: "keep", Origin: nginx, Destination: nginxDest, Priority: keep.PriorityTemplate, Why: "CronJob default/nightly"},
			},
		},
		"a live pod and a template on one image: one Want, the pod's priority and digest": {
			mirrors: []keep.Mirror{keepMirror},
			snap: &keep.Snapshot{
				Pods: []keep.Pod{withImageID(pod("web", "nginx:1"), 0, "docker.io/library/nginx@"+digestA)},
				Templates: []keep.Template{{Kind: keep.KindReplicaSet, Namespace: "default", Name: "web-1",
					Labels: labels.Set{"app": "web"}, Images: []string{"nginx:1"}}},
			},
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Digest: digestA, Destination: nginxDest,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"a pinned origin keeps its pinned digest, in its destination too": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(withImageID(pod("web", "nginx:1@"+digestA), 0, "docker.io/library/nginx@"+digestB)),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx + "@" + digestA, Digest: digestA, Destination: nginxDest + "@" + digestA,
				Priority: keep.PriorityLive, Why: "Pod default/web container c0"}},
		},
		"init, regular and ephemeral containers all count": {
			mirrors: []keep.Mirror{keepMirror},
			snap:    snapshot(initAndEphemeral),
			keep: []keep.Want{
				{Mirror: "keep", Origin: "docker.io/library/busybox:1", Destination: "mirror.local/kuik/docker.io/library/busybox:1",
					Priority: keep.PriorityLive, Why: "Pod default/debug container debugger"},
				{Mirror: "keep", Origin: nginx, Destination: nginxDest, Priority: keep.PriorityLive, Why: "Pod default/debug container init"},
				{Mirror: "keep", Origin: "docker.io/library/redis:7", Destination: "mirror.local/kuik/docker.io/library/redis:7",
					Priority: keep.PriorityLive, Why: "Pod default/debug container c1"},
			},
		},
		"two digests ran under one tag: the routed pod's wins, the other is listed": {
			mirrors: []keep.Mirror{keepMirror},
			snap: snapshot(
				withImageID(pod("old", "nginx:1"), 0, "docker.io/library/nginx@"+digestB),
				routed(withImageID(pod("new", nginxDest), 0, "mirror.local/kuik/docker.io/library/nginx@"+digestA), nginx, "ImageMirror/keep"),
			),
			keep: []keep.Want{{Mirror: "keep", Origin: nginx, Digest: digestA, OtherDigests: []string{digestB}, Destination: nginxDest,
				Priority: keep.PriorityRouted, Why: "Pod default/new container c0"}},
		},
		"an image that does not parse is reported once": {
			mirrors: []keep.Mirror{keepMirror, team},
			snap:    snapshot(pod("web", "Not/An:Image:")),
			skipped: []keep.Skip{{Image: "Not/An:Image:", Reason: keep.ReasonInvalidImage, Why: "Pod default/web container c0"}},
		},
		"a dry-run mirror routes nothing, so it keeps nothing": {
			mirrors: []keep.Mirror{{Name: "dry", Destination: "dry.local/m/"}},
			snap:    snapshot(pod("web", "nginx:1")),
			skipped: []keep.Skip{{Mirror: "dry", Image: nginx, Reason: keep.ReasonNotCovered, Why: "Pod default/web container c0"}},
		},
		"two keep-enabled mirrors on one pod: one Want each, each its own destination": {
			mirrors: []keep.Mirror{keepMirror, team},
			snap:    snapshot(withImageID(teamPod, 0, "docker.io/library/nginx@"+digestA)),
			keep: []keep.Want{
				{Mirror: "keep", Origin: "docker.io/library/busybox:1", Destination: "mirror.local/kuik/docker.io/library/busybox:1",
					Priority: keep.PriorityLive, Why: "Pod default/web container c1"},
				{Mirror: "keep", Origin: nginx, Digest: digestA, Destination: nginxDest, Priority: keep.PriorityLive, Why: "Pod default/web container c0"},
				{Mirror: "team", Origin: nginx, Digest: digestA, Destination: "team.local/m/docker.io/library/nginx:1",
					Priority: keep.PriorityLive, Why: "Pod default/web container c0"},
			},
			skipped: []keep.Skip{{Mirror: "team", Image: "docker.io/library/busybox:1", Reason: keep.ReasonNotCovered, Why: "Pod default/web container c1"}},
		},
		"no keep-enabled mirror keeps nothing": {
			snap: snapshot(pod("web", "nginx:1")),
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan := keep.Desired(ix, tc.mirrors, tc.snap)
			if diff := cmp.Diff(tc.keep, plan.Keep); diff != "" {
				t.Errorf("Keep (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.skipped, plan.Skipped); diff != "" {
				t.Errorf("Skipped (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDesiredUsed: what garbage collection must not delete, whatever the records say.
func TestDesiredUsed(t *testing.T) {
	ix := index(t)
	nginxRepo := "mirror.local/kuik/docker.io/library/nginx"
	for name, tc := range map[string]struct {
		snap                     *keep.Snapshot
		repository, tag, digest  string
		countTemplates, wantUsed bool
	}{
		"the spec image of a live pod, even one with a forged record": {
			snap:       snapshot(routed(pod("web", nginxRepo+":1"), "docker.io/evil/secret:1", "ImageMirror/keep")),
			repository: nginxRepo, tag: "1", wantUsed: true,
		},
		"a tag whose digest a live pod runs by digest (pinDigest)": {
			snap:       snapshot(withImageID(pod("web", nginxRepo+"@"+digestA), 0, nginxRepo+"@"+digestA)),
			repository: nginxRepo, tag: "1", digest: digestA, wantUsed: true,
		},
		"the destination of a verified origin": {
			snap:       snapshot(routed(pod("web", nginxRepo+"@"+digestA), "nginx:1", "ImageMirror/keep")),
			repository: nginxRepo, tag: "1", wantUsed: true,
		},
		"an image a template names directly, when templates count": {
			snap: &keep.Snapshot{Templates: []keep.Template{{Kind: keep.KindDaemonSet, Namespace: "default", Name: "agent",
				Images: []string{nginxRepo + ":1"}}}},
			repository: nginxRepo, tag: "1", countTemplates: true, wantUsed: true,
		},
		"an image a template names directly, when templates do not count": {
			snap: &keep.Snapshot{Templates: []keep.Template{{Kind: keep.KindDaemonSet, Namespace: "default", Name: "agent",
				Images: []string{nginxRepo + ":1"}}}},
			repository: nginxRepo, tag: "1",
		},
		"another tag of the repository": {
			snap:       snapshot(pod("web", nginxRepo+":1")),
			repository: nginxRepo, tag: "2", digest: digestB,
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan := keep.Desired(ix, []keep.Mirror{keepMirror}, tc.snap)
			if got := plan.Used.Has(tc.repository, tc.tag, tc.digest, tc.countTemplates); got != tc.wantUsed {
				t.Errorf("Used.Has(%s:%s, %q) = %v, want %v", tc.repository, tc.tag, tc.digest, got, tc.wantUsed)
			}
		})
	}
}
