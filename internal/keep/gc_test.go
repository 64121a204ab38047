package keep_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/keep"
)

const nginxRepo = "mirror.local/kuik/docker.io/library/nginx"

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func kept(tag string, unusedSince time.Time) keep.Tag {
	return keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: tag, UnusedSince: unusedSince}
}

func TestDecideSweep(t *testing.T) {
	ix := index(t)
	day := keepMirror
	day.Retention = 24 * time.Hour
	noTemplates := day
	noTemplates.CountTemplates = false
	defaultRetention := keepMirror
	defaultRetention.Retention = 0
	now := t0.Add(48 * time.Hour)
	synced := keep.Safety{Synced: true}
	running := snapshot(pod("web", "nginx:1"))
	cronjob := &keep.Snapshot{Templates: []keep.Template{{Kind: keep.KindCronJob, Namespace: "default", Name: "nightly",
		Labels: labels.Set{"app": "nightly"}, Images: []string{"nginx:1"}}}}
	many := keep.Inventory{LastSweep: now.Add(-time.Hour)}
	var oldestThree []keep.Tag
	for i := range 30 {
		tag := kept(fmt.Sprintf("v%02d", i), t0.Add(time.Duration(i)*time.Minute))
		many.Tags = append(many.Tags, tag)
		if i < 3 {
			oldestThree = append(oldestThree, tag)
		}
	}

	for name, tc := range map[string]struct {
		inv     keep.Inventory
		snap    *keep.Snapshot
		mirrors []keep.Mirror
		now     time.Time
		safety  keep.Safety
		want    keep.Sweep
	}{
		"an unused tag is stamped at the first sweep that sees it unused, not deleted": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{})}}, snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", now)}, LastSweep: now}, Changed: true},
		},
		"a stamped tag keeps its first stamp": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-time.Hour))}}, snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-time.Hour))}, LastSweep: now}, Changed: true},
		},
		"a stamped tag in use again is cleared": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-time.Hour))}, LastSweep: now}, snap: running, mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{})}, LastSweep: now}, Changed: true},
		},
		"a tag unused for the retention is deleted, by tag": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-24*time.Hour)), kept("2", time.Time{})}, LastSweep: now.Add(-time.Hour)},
			snap: snapshot(pod("web", "nginx:2")), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{
				Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-24*time.Hour)), kept("2", time.Time{})}, LastSweep: now},
				Changed:   true, Delete: []keep.Tag{kept("1", now.Add(-24*time.Hour))}, Due: 1,
			},
		},
		"a tag unused for a second less than the retention is kept": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-24*time.Hour+time.Second))}, LastSweep: now}, snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-24*time.Hour+time.Second))}, LastSweep: now}},
		},
		"without a retention, a tag stays 168h": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-167*time.Hour))}, LastSweep: now}, snap: snapshot(), mirrors: []keep.Mirror{defaultRetention}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", now.Add(-167*time.Hour))}, LastSweep: now}},
		},
		"a tag a live pod runs is never deleted, however old its stamp": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", t0.Add(-1000*time.Hour))}, LastSweep: now}, snap: running, mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{})}, LastSweep: now}, Changed: true},
		},
		"a tag a counted template names is never deleted": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", t0.Add(-1000*time.Hour))}, LastSweep: now}, snap: cronjob, mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{})}, LastSweep: now}, Changed: true},
		},
		"a tag only a template names is deleted when templates do not count": {
			inv: keep.Inventory{Tags: []keep.Tag{kept("1", t0)}, LastSweep: now}, snap: cronjob, mirrors: []keep.Mirror{noTemplates}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", t0)}, LastSweep: now}, Delete: []keep.Tag{kept("1", t0)}, Due: 1},
		},
		"a tag of a mirror without keep settings is left as it is": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{}), {Mirror: "gone", Repository: "x.local/docker.io/library/nginx", Tag: "1", UnusedSince: t0}}, LastSweep: now},
			snap: snapshot(), mirrors: []keep.Mirror{}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", time.Time{}), {Mirror: "gone", Repository: "x.local/docker.io/library/nginx", Tag: "1", UnusedSince: t0}}, LastSweep: now}},
		},
		"caches not synced: nothing stamped, nothing deleted, a used tag still cleared": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", time.Time{}), kept("3", t0)}, LastSweep: now.Add(-time.Hour)},
			snap: snapshot(pod("web", "nginx:3")), mirrors: []keep.Mirror{day}, now: now, safety: keep.Safety{},
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", time.Time{}), kept("3", time.Time{})}, LastSweep: now.Add(-time.Hour)},
				Changed: true, Held: keep.HoldUnsynced},
		},
		"a failed list: nothing stamped, nothing deleted": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", time.Time{})}, LastSweep: now.Add(-time.Hour)},
			snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: keep.Safety{Synced: true, ListFailed: true},
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", time.Time{})}, LastSweep: now.Add(-time.Hour)}, Held: keep.HoldListFailed},
		},
		"a clock before the last sweep: nothing deleted, new stamps at the last sweep": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", time.Time{})}, LastSweep: now.Add(time.Hour)},
			snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", now.Add(time.Hour))}, LastSweep: now.Add(time.Hour)},
				Changed: true, Due: 1, Held: keep.HoldClockDoubt},
		},
		"a clock the caller doubts: nothing deleted, and its time is not recorded as the last sweep": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", t0)}, LastSweep: now.Add(-time.Hour)},
			snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: keep.Safety{Synced: true, ClockDoubt: true},
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("1", t0)}, LastSweep: now.Add(-time.Hour)}, Due: 1, Held: keep.HoldClockDoubt},
		},
		"at most 10 % of the inventory per sweep, the oldest stamps first": {
			inv: many, snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: many.Tags, LastSweep: now}, Changed: true, Delete: oldestThree, Due: 30},
		},
		"fewer than 10 tags: one per sweep": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("b", t0.Add(time.Minute)), kept("a", t0), kept("c", t0)}, LastSweep: now},
			snap: snapshot(), mirrors: []keep.Mirror{day}, now: now, safety: synced,
			want: keep.Sweep{Inventory: keep.Inventory{Tags: []keep.Tag{kept("b", t0.Add(time.Minute)), kept("a", t0), kept("c", t0)}, LastSweep: now},
				Delete: []keep.Tag{kept("a", t0)}, Due: 3},
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan := keep.Desired(ix, tc.mirrors, tc.snap)
			got := keep.DecideSweep(tc.inv, &plan, tc.mirrors, tc.now, tc.safety)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideSweep (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInventory(t *testing.T) {
	for name, tc := range map[string]struct {
		inv         keep.Inventory
		add         keep.Tag
		want        keep.Inventory
		wantChanged bool
	}{
		"a new tag is added, in use": {
			add:  keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestA, UnusedSince: t0},
			want: keep.Inventory{Tags: []keep.Tag{{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestA}}}, wantChanged: true,
		},
		"the same tag again changes nothing, its stamp included": {
			inv:  keep.Inventory{Tags: []keep.Tag{kept("1", t0)}},
			add:  kept("1", time.Time{}),
			want: keep.Inventory{Tags: []keep.Tag{kept("1", t0)}},
		},
		"a new digest under a tag is recorded": {
			inv:  keep.Inventory{Tags: []keep.Tag{{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestA}}},
			add:  keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestB},
			want: keep.Inventory{Tags: []keep.Tag{{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestB}}}, wantChanged: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, changed := tc.inv.With(tc.add)
			if diff := cmp.Diff(tc.want, got); diff != "" || changed != tc.wantChanged {
				t.Errorf("With: changed %v, want %v (-want +got):\n%s", changed, tc.wantChanged, diff)
			}
		})
	}
	inv := keep.Inventory{Tags: []keep.Tag{kept("1", t0), kept("2", t0)}, LastSweep: t0}
	if diff := cmp.Diff(keep.Inventory{Tags: []keep.Tag{kept("2", t0)}, LastSweep: t0}, inv.Without([]keep.Tag{kept("1", time.Time{})})); diff != "" {
		t.Errorf("Without (-want +got):\n%s", diff)
	}
}

func TestTagOf(t *testing.T) {
	for name, tc := range map[string]struct {
		want   keep.Want
		tag    keep.Tag
		tagged bool
	}{
		"a tagged destination": {
			want:   keep.Want{Mirror: "keep", Origin: "docker.io/library/nginx:1", Destination: nginxRepo + ":1", Digest: digestA},
			tag:    keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestA, Origin: "docker.io/library/nginx:1"},
			tagged: true,
		},
		"a tag and a digest": {
			want:   keep.Want{Mirror: "keep", Destination: nginxRepo + ":1@" + digestA, Digest: digestA},
			tag:    keep.Tag{Mirror: "keep", Repository: nginxRepo, Tag: "1", Digest: digestA},
			tagged: true,
		},
		"a digest only has no tag to collect": {
			want: keep.Want{Mirror: "keep", Destination: nginxRepo + "@" + digestA, Digest: digestA},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tag, ok := keep.TagOf(&tc.want)
			if diff := cmp.Diff(tc.tag, tag); diff != "" || ok != tc.tagged {
				t.Errorf("TagOf: tagged %v, want %v (-want +got):\n%s", ok, tc.tagged, diff)
			}
		})
	}
}

func TestRetained(t *testing.T) {
	ix := index(t)
	day := keepMirror
	day.Retention = 24 * time.Hour
	now := t0.Add(48 * time.Hour)
	withOrigin := func(tag keep.Tag, origin string) keep.Tag { tag.Origin = origin; return tag }
	inv := keep.Inventory{Tags: []keep.Tag{
		withOrigin(kept("1", time.Time{}), "docker.io/library/nginx:1"),            // wanted: a pod runs it
		withOrigin(kept("2", now.Add(-23*time.Hour)), "docker.io/library/nginx:2"), // within retention
		withOrigin(kept("3", now.Add(-24*time.Hour)), "docker.io/library/nginx:3"), // past retention
		withOrigin(kept("4", time.Time{}), "docker.io/library/nginx:4"),            // not stamped yet
		kept("5", time.Time{}), // no recorded origin
		{Mirror: "gone", Repository: "x.local/docker.io/library/nginx", Tag: "1", Origin: "docker.io/library/nginx:1"},
	}}
	plan := keep.Desired(ix, []keep.Mirror{day}, snapshot(pod("web", "nginx:1")))
	want := []keep.Want{
		{Mirror: "keep", Origin: "docker.io/library/nginx:2", Destination: nginxRepo + ":2", Priority: keep.PriorityTemplate,
			Why: "retained, unused since " + now.Add(-23*time.Hour).Format(time.RFC3339)},
		{Mirror: "keep", Origin: "docker.io/library/nginx:4", Destination: nginxRepo + ":4", Priority: keep.PriorityTemplate, Why: "retained"},
	}
	if diff := cmp.Diff(want, keep.Retained(inv, &plan, []keep.Mirror{day}, now)); diff != "" {
		t.Errorf("Retained (-want +got):\n%s", diff)
	}
}
