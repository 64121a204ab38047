package keep_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/keep"
)

// fakeClock is the keeper's clock in a simulation: it moves only when told.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// world is the cluster at hour h of the simulated week, and the destination tags it uses (the
// test's own expectation, written by hand: every image here is a Docker Hub library image).
//
//   - web: a Deployment whose pods are routed to the mirror (verified records); nginx:1 until
//     hour 100, then nginx:2. Its old ReplicaSet stays within revisionHistoryLimit.
//   - batch: a Deployment on redis:7 scaled to zero at hour 10; its ReplicaSet stays.
//   - report: a CronJob on busybox:1 whose pods run ten minutes every six hours.
//   - tmp and old: bare pods on alpine:3 until hour 5 and memcached:1 until hour 50.
//   - forger: a pod whose original-images claims docker.io/evil/secret:1 for a mirror image.
func world(h int) (snap *keep.Snapshot, byPods, byTemplates map[string]bool) {
	snap = snapshot()
	byPods, byTemplates = map[string]bool{}, map[string]bool{}
	use := func(image string) { byPods[mirrorLibrary+image] = true }
	routedPod := func(name, image string) keep.Pod {
		d := dest + "docker.io/library/" + image
		p := withImageID(pod(name, d), 0, d[:len(d)-len(":1")]+"@"+digestA)
		p.Labels = labels.Set{"app": "web"}
		return routed(p, "docker.io/library/"+image, "ImageMirror/keep")
	}
	template := func(kind keep.TemplateKind, name, image string) {
		snap.Templates = append(snap.Templates, keep.Template{Kind: kind, Namespace: "default", Name: name,
			Labels: labels.Set{"app": name}, Images: []string{image}})
		byTemplates[mirrorLibrary+image] = true
	}

	web := "nginx:1"
	template(keep.KindReplicaSet, "web-1", "nginx:1")
	if h >= 100 {
		web = "nginx:2"
		template(keep.KindReplicaSet, "web-2", "nginx:2")
	}
	snap.Pods = append(snap.Pods, routedPod("web-a", web), routedPod("web-b", web))
	use(web)

	template(keep.KindReplicaSet, "batch-1", "redis:7")
	if h < 10 {
		snap.Pods = append(snap.Pods, pod("batch-x", "redis:7"))
		use("redis:7")
	}
	template(keep.KindCronJob, "report", "busybox:1")
	if h%6 == 0 {
		snap.Pods = append(snap.Pods, pod("report-x", "busybox:1"))
		use("busybox:1")
	}
	if h < 5 {
		snap.Pods = append(snap.Pods, pod("tmp", "alpine:3"))
		use("alpine:3")
	}
	if h < 50 {
		snap.Pods = append(snap.Pods, pod("old", "memcached:1"))
		use("memcached:1")
	}
	snap.Pods = append(snap.Pods, routed(pod("forger", dest+"docker.io/library/nginx:1"), "docker.io/evil/secret:1", "ImageMirror/keep"))
	use("nginx:1") // a tag a live pod runs, whatever its records say
	return snap, byPods, byTemplates
}

const mirrorLibrary = dest + "docker.io/library/"

// TestSimulatedWeek sweeps every hour for a week and a day with a fake clock, restarting the
// keeper mid-retention from its persisted inventory: no tag in use is ever deleted, and each
// unused tag goes at the first sweep past its retention.
func TestSimulatedWeek(t *testing.T) {
	for name, tc := range map[string]struct {
		countTemplates bool
		deletedAt      map[string]int
		left           []string
	}{
		// alpine:3 was last used at hour 4 and stamped at 5; memcached:1 last used at 49,
		// stamped at 50: each goes at its stamp + 72 h, within retention + 1 sweep of its last
		// use. The restart at hour 60 changes nothing: the stamps were persisted.
		"templates count: only the bare pods' tags go, at retention + 1 sweep": {
			countTemplates: true,
			deletedAt:      map[string]int{mirrorLibrary + "alpine:3": 5 + 72, mirrorLibrary + "memcached:1": 50 + 72},
			left:           []string{mirrorLibrary + "busybox:1", mirrorLibrary + "nginx:1", mirrorLibrary + "nginx:2", mirrorLibrary + "redis:7"},
		},
		// The scaled-to-zero Deployment's redis:7 goes 72 h after hour 10. The CronJob's pods
		// keep busybox:1 (every 6 h, well within 72 h), and the forger's pod runs nginx:1.
		"templates do not count: the scaled-to-zero Deployment's tag goes too": {
			deletedAt: map[string]int{
				mirrorLibrary + "alpine:3": 5 + 72, mirrorLibrary + "memcached:1": 50 + 72, mirrorLibrary + "redis:7": 10 + 72,
			},
			left: []string{mirrorLibrary + "busybox:1", mirrorLibrary + "nginx:1", mirrorLibrary + "nginx:2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			mirror := keepMirror
			mirror.Retention = 72 * time.Hour
			mirror.CountTemplates = tc.countTemplates
			deletedAt, left := simulate(t, mirror)
			if diff := cmp.Diff(tc.deletedAt, deletedAt); diff != "" {
				t.Errorf("deletions by hour (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.left, left); diff != "" {
				t.Errorf("tags left on the mirror (-want +got):\n%s", diff)
			}
		})
	}
}

// simulate runs 193 hourly rounds (desired set, copies recorded in the inventory, a sweep) and
// fails on any deletion of a tag in use. It returns the hour each tag was deleted and the
// tags left on the mirror, sorted.
func simulate(t *testing.T, mirror keep.Mirror) (map[string]int, []string) {
	t.Helper()
	ix := index(t)
	mirrors := []keep.Mirror{mirror}
	clock := &fakeClock{now: t0}
	const restartAt = 60

	var inv keep.Inventory
	var persisted []byte
	registry := map[string]bool{} // the mirror's tags
	deletedAt := map[string]int{}
	synced := true
	for h := 0; h <= 192; h++ {
		if h == restartAt {
			inv = keep.Inventory{}
			if err := json.Unmarshal(persisted, &inv); err != nil {
				t.Fatalf("hour %d: reading the persisted inventory: %v", h, err)
			}
			synced = false // the new process's caches are still syncing
		}
		snap, byPods, byTemplates := world(h)
		plan := keep.Desired(ix, mirrors, snap)
		for i := range plan.Keep {
			tag, ok := keep.TagOf(&plan.Keep[i])
			if !ok {
				t.Fatalf("hour %d: %s has no tag", h, plan.Keep[i].Destination)
			}
			inv, _ = inv.With(tag)
			registry[tag.Repository+":"+tag.Tag] = true
		}
		sweep := keep.DecideSweep(inv, &plan, mirrors, clock.Now(), keep.Safety{Synced: synced})
		for _, d := range sweep.Delete {
			ref := d.Repository + ":" + d.Tag
			if byPods[ref] || (mirror.CountTemplates && byTemplates[ref]) {
				t.Errorf("hour %d: deleted %s, which is in use", h, ref)
			}
			delete(registry, ref)
			deletedAt[ref] = h
		}
		inv = sweep.Inventory.Without(sweep.Delete)
		b, err := json.Marshal(inv)
		if err != nil {
			t.Fatalf("hour %d: persisting the inventory: %v", h, err)
		}
		persisted = b
		synced = true
		clock.Advance(time.Hour)
	}
	var left []string
	for ref := range registry {
		left = append(left, ref)
	}
	slices.Sort(left)
	return deletedAt, left
}
