package keep_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/routing"
)

// Two clusters keep into one mirror, each with its own ID. Each names its destinations with its
// suffix (the webhook's names), and a sweep of one never deletes the other's tags nor an
// unsuffixed one, even from an inventory that holds them all.
func TestTwoClustersShareOneMirror(t *testing.T) {
	ix := index(t)
	a, b := ix.WithClusterID("a"), ix.WithClusterID("b")
	day := keepMirror
	day.Retention = 24 * time.Hour
	mirrors := []keep.Mirror{day}

	planA := keep.Desired(a, mirrors, snapshot(pod("web", "nginx:1", "nginx@"+digestA)))
	planB := keep.Desired(b, mirrors, snapshot(pod("web", "nginx:1", "nginx:2")))
	var destA, destB []string
	for _, w := range planA.Keep {
		destA = append(destA, w.Destination)
	}
	for _, w := range planB.Keep {
		destB = append(destB, w.Destination)
	}
	if diff := cmp.Diff([]string{nginxRepo + ":1-kuik-a", nginxRepo + "@" + digestA}, destA); diff != "" {
		t.Errorf("cluster A's destinations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{nginxRepo + ":1-kuik-b", nginxRepo + ":2-kuik-b"}, destB); diff != "" {
		t.Errorf("cluster B's destinations (-want +got):\n%s", diff)
	}

	// One inventory holding both clusters' tags and one written before IDs were set: the worst
	// case of a misconfigured fleet. A digest-only destination has no tag and is in none.
	var inv keep.Inventory
	for _, w := range append(planA.Keep, planB.Keep...) {
		if tag, ok := keep.TagOf(&w); ok {
			inv, _ = inv.With(tag)
		} else if w.Destination != nginxRepo+"@"+digestA {
			t.Errorf("TagOf(%q) has no tag", w.Destination)
		}
	}
	inv, _ = inv.With(keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: "1"})
	if len(inv.Tags) != 4 {
		t.Fatalf("inventory: %v", inv.Tags)
	}

	// Every pod of both clusters is gone: each sweeps for a week, hourly, on the shared inventory.
	idle := snapshot()
	for _, c := range []struct {
		id   string
		plan keep.Plan
	}{{"a", keep.Desired(a, mirrors, idle)}, {"b", keep.Desired(b, mirrors, idle)}} {
		cur := inv
		var deleted []string
		for h := range 7 * 24 {
			now := t0.Add(time.Duration(h) * time.Hour)
			s := keep.DecideSweep(cur, &c.plan, mirrors, now, keep.Safety{Synced: true, ClusterID: c.id})
			for _, tag := range s.Delete {
				if !routing.IsClusterTag(tag.Tag, c.id) {
					t.Errorf("cluster %s deletes %s:%s, not its own", c.id, tag.Repository, tag.Tag)
				}
				deleted = append(deleted, tag.Tag)
			}
			cur = s.Inventory.Without(s.Delete)
		}
		want := map[string][]string{"a": {"1-kuik-a"}, "b": {"1-kuik-b", "2-kuik-b"}}[c.id]
		if diff := cmp.Diff(want, deleted); diff != "" {
			t.Errorf("cluster %s deleted over the week (-want +got):\n%s", c.id, diff)
		}
		for _, tag := range cur.Tags {
			if !routing.IsClusterTag(tag.Tag, c.id) && !tag.UnusedSince.IsZero() {
				t.Errorf("cluster %s stamped %s, not its own", c.id, tag.Tag)
			}
		}
	}

	// Without an ID, a sweep over the same inventory takes every tag, the other cluster's too:
	// what sharing a mirror without clusterID risks.
	plain := keep.Desired(ix, mirrors, idle)
	cur, n := inv, 0
	for h := range 7 * 24 {
		s := keep.DecideSweep(cur, &plain, mirrors, t0.Add(time.Duration(h)*time.Hour), keep.Safety{Synced: true})
		n += len(s.Delete)
		cur = s.Inventory.Without(s.Delete)
	}
	if n != len(inv.Tags) {
		t.Errorf("without a cluster ID %d of %d tags were deleted", n, len(inv.Tags))
	}
}

// A tag that does not fit with the cluster's suffix is not kept: the mirror cannot name it.
func TestClusterTagTooLongIsUnnameable(t *testing.T) {
	long := "nginx:" + strings.Repeat("t", 128-len("-kuik-a")+1)
	plan := keep.Desired(index(t).WithClusterID("a"), []keep.Mirror{keepMirror}, snapshot(pod("web", long)))
	if len(plan.Keep) != 0 {
		t.Errorf("Keep = %v, want nothing", plan.Keep)
	}
	want := []keep.Skip{{Mirror: "keep", Image: "docker.io/library/" + long, Reason: keep.ReasonUnnameable, Why: "Pod default/web container c0"}}
	if diff := cmp.Diff(want, plan.Skipped); diff != "" {
		t.Errorf("Skipped (-want +got):\n%s", diff)
	}
	// Without an ID the same image is kept.
	if plan := keep.Desired(index(t), []keep.Mirror{keepMirror}, snapshot(pod("web", long))); len(plan.Keep) != 1 {
		t.Errorf("without a cluster ID, Keep = %v", plan.Keep)
	}
}
