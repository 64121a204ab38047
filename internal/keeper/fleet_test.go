package keeper

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/internal/testutil"
)

// newMember is a keeper of cluster id: its own Store, Gather and clock, and lead's source,
// mirror and ImageMirror spec (the same destination path). lead nil makes the first member.
func newMember(t *testing.T, lead *fixture, id string, clk *clock) *fixture {
	t.Helper()
	// No self-heal (an hour): it would restore a deleted tag and hide the deletion.
	f := newFixture(t, Options{SweepInterval: 30 * time.Millisecond}, clk)
	if lead != nil {
		f.src, f.srcFront, f.dst, f.dstFront = lead.src, lead.srcFront, lead.dst, lead.dstFront
		f.fronts = lead.fronts
		f.mirror = lead.mirror
	}
	f.k.deps.Gather = func(ctx context.Context) (Inputs, error) {
		in, err := f.gather(ctx)
		if err != nil {
			return Inputs{}, err
		}
		in.Index = in.Index.WithClusterID(id)
		in.Safety.ClusterID = id
		return in, nil
	}
	return f
}

// waitSweeps waits until f's keeper ran n more sweeps.
func waitSweeps(t *testing.T, f *fixture, n int64) {
	t.Helper()
	from := f.k.sweeps.Load()
	testutil.Eventually(t, 10*time.Second, "more sweeps", func(context.Context) error {
		if got := f.k.sweeps.Load() - from; got < n {
			return fmt.Errorf("%d sweeps, want %d", got, n)
		}
		return nil
	})
}

func TestFleetTwoClustersSharingAMirrorNeverDeleteEachOthersTags(t *testing.T) {
	clkA := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	clkB := &clock{now: clkA.now}
	a := newMember(t, nil, "a", clkA)
	b := newMember(t, a, "b", clkB)
	a.src.Push(t, "app:v1")
	want := srcDigest(t, a.src, "app:v1")
	// Someone else's image under the plain tag, at the mirror's own repository.
	a.dst.Push(t, "kuik/src.test/app:v1")
	plain, err := a.destHead(t.Context(), "src.test/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if plain == want {
		t.Fatal("the plain tag holds the source's digest: the second copy would prove nothing")
	}
	repo := a.dstFront.Host + "/kuik/src.test/app"
	tagPath := func(tag string) string { return "/v2/kuik/src.test/app/manifests/" + tag }

	// Both clusters run X; A copies first, with the bytes.
	a.setPods(livePod("web", "src.test/app:v1"))
	b.setPods(livePod("web", "src.test/app:v1"))
	a.start()
	a.waitKept("src.test/app:v1-kuik-a", want)
	if n := a.dstFront.UploadedBytes(); n == 0 {
		t.Fatal("the first copy uploaded no blob bytes")
	}

	// B copies second: the manifest is at the mirror by digest, so B only PUTs its tag.
	a.srcFront.Reset()
	a.dstFront.Reset()
	b.start()
	b.waitKept("src.test/app:v1-kuik-b", want)
	if n := a.srcFront.Count(http.MethodGet, testutil.KindManifest); n != 0 {
		t.Errorf("the second copy sent %d source manifest GETs, want 0", n)
	}
	if n := a.srcFront.Count("", testutil.KindBlob); n != 0 {
		t.Errorf("the second copy sent %d source blob requests, want 0", n)
	}
	if n, up := a.dstFront.UploadedBytes(), a.dstFront.Count("", testutil.KindUpload); n != 0 || up != 0 {
		t.Errorf("the second copy uploaded %d blob bytes in %d upload requests, want 0", n, up)
	}
	dst := a.dstFront.Requests()
	if !slices.ContainsFunc(dst, func(r testutil.Request) bool {
		return r.Method == http.MethodHead && r.Path == tagPath(want)
	}) {
		t.Errorf("the second copy did not HEAD the mirror by digest: %+v", dst)
	}
	puts := slices.DeleteFunc(slices.Clone(dst), func(r testutil.Request) bool {
		return r.Method != http.MethodPut || r.Kind != testutil.KindManifest
	})
	if len(puts) != 1 || puts[0].Path != tagPath("v1-kuik-b") {
		t.Errorf("the second copy's manifest PUTs: %+v, want one of v1-kuik-b", puts)
	}
	b.report.mu.Lock()
	outcomes := slices.Clone(b.report.outcomes)
	b.report.mu.Unlock()
	if len(outcomes) != 1 || outcomes[0].Err != nil || outcomes[0].Result.Action != transfer.Tagged {
		t.Errorf("B's outcomes %+v, want one Tagged", outcomes)
	}
	if got, err := a.destHead(t.Context(), "src.test/app:v1-kuik-a"); err != nil || got != want {
		t.Fatalf("A's tag after B's copy: %s %v", got, err)
	}
	for _, m := range []struct {
		f         *fixture
		mine, not string
	}{{a, "v1-kuik-a", "v1-kuik-b"}, {b, "v1-kuik-b", "v1-kuik-a"}} {
		if tag, ok := m.f.store.has(repo, m.mine); !ok || tag.Digest != want {
			t.Fatalf("%s in its own inventory: %+v (found %v)", m.mine, tag, ok)
		}
		if _, ok := m.f.store.has(repo, m.not); ok {
			t.Fatalf("%s in the inventory of the other cluster", m.not)
		}
	}
	invB := slices.Clone(b.store.current().Tags)

	// A stops running X while B keeps it: past retention, A deletes its own tag only.
	a.setPods()
	a.pass()
	testutil.Eventually(t, 10*time.Second, "A's unused stamp", func(context.Context) error {
		if tag, _ := a.store.has(repo, "v1-kuik-a"); tag.UnusedSince.IsZero() {
			return fmt.Errorf("v1-kuik-a not stamped: %+v", tag)
		}
		return nil
	})
	clkA.Add(a.retention + time.Minute)
	clkB.Add(a.retention + time.Minute)
	testutil.Eventually(t, 10*time.Second, "v1-kuik-a deleted", func(ctx context.Context) error {
		if _, err := a.destHead(ctx, "src.test/app:v1-kuik-a"); err == nil {
			return errors.New("v1-kuik-a still at the mirror")
		}
		if _, ok := a.store.has(repo, "v1-kuik-a"); ok {
			return errors.New("v1-kuik-a still in A's inventory")
		}
		return nil
	})
	waitSweeps(t, a, 3)
	waitSweeps(t, b, 3)
	survivors := func(step string) {
		t.Helper()
		if got, err := a.destHead(t.Context(), "src.test/app:v1-kuik-b"); err != nil || got != want {
			t.Errorf("%s: B's tag at the mirror: %s %v", step, got, err)
		}
		if got, err := a.destHead(t.Context(), "src.test/app:v1"); err != nil || got != plain {
			t.Errorf("%s: the plain tag at the mirror: %s %v", step, got, err)
		}
		if got := b.store.current().Tags; !reflect.DeepEqual(got, invB) {
			t.Errorf("%s: B's inventory changed: %+v, was %+v", step, got, invB)
		}
	}
	survivors("after A's sweep")

	// Hostile: A's inventory holds B's tag and the plain one, as if corrupted or shared.
	a.k.invMu.Lock()
	inv := a.k.inv
	inv.Tags = append(slices.Clone(inv.Tags),
		keep.Tag{Mirror: "keep", Repository: repo, Tag: "v1-kuik-b", Digest: want, Origin: "src.test/app:v1"},
		keep.Tag{Mirror: "keep", Repository: repo, Tag: "v1", Digest: plain, Origin: "src.test/app:v1"})
	err = a.k.save(t.Context(), inv)
	a.k.invMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	waitSweeps(t, a, 3)
	for range 2 {
		clkA.Add(10 * a.retention)
		clkB.Add(10 * a.retention)
		waitSweeps(t, a, 3)
		waitSweeps(t, b, 3)
	}
	survivors("after the hostile inventory")
	// The guard leaves the other tags as the inventory holds them: never stamped.
	for _, tag := range []string{"v1-kuik-b", "v1"} {
		if got, ok := a.store.has(repo, tag); !ok || !got.UnusedSince.IsZero() {
			t.Errorf("the injected %s in A's inventory: %+v (found %v)", tag, got, ok)
		}
	}
	// The only deletion either keeper ever sent is A's own tag.
	var deletes []string
	for _, r := range a.dstFront.Requests() {
		if r.Method == http.MethodDelete {
			deletes = append(deletes, r.Path)
		}
	}
	if len(deletes) != 1 || !strings.HasSuffix(deletes[0], "/manifests/v1-kuik-a") {
		t.Fatalf("deletions at the mirror: %v, want A's v1-kuik-a only", deletes)
	}
}
