package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, testenv.Options{}, &cp)) }

// setup is a direct client and a fresh namespace.
func setup(t *testing.T) (client.Client, string) {
	t.Helper()
	c, err := client.New(cp.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "inventory-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return c, ns.Name
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// tags are n distinct tags, every third one unused since a time.
func tags(mirror string, n int) []keep.Tag {
	out := make([]keep.Tag, n)
	for i := range out {
		sum := sha256.Sum256([]byte(mirror + strconv.Itoa(i)))
		d := "sha256:" + hex.EncodeToString(sum[:])
		out[i] = keep.Tag{
			Mirror:     mirror,
			Repository: fmt.Sprintf("mirror.example.com/kept/docker.io/team-%d/app-%d", i%97, i),
			Tag:        fmt.Sprintf("v1.%d", i),
			Digest:     d,
			Origin:     fmt.Sprintf("docker.io/team-%d/app-%d:v1.%d@%s", i%97, i, i, d),
		}
		if i%3 == 0 {
			out[i].UnusedSince = t0.Add(-time.Duration(i) * time.Second)
		}
	}
	return out
}

func load(t *testing.T, s *Store) keep.Inventory {
	t.Helper()
	inv, err := s.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func save(t *testing.T, s *Store, inv keep.Inventory) {
	t.Helper()
	if err := s.Save(t.Context(), inv); err != nil {
		t.Fatal(err)
	}
}

// configMaps are the namespace's ConfigMaps of the inventory, by name.
func configMaps(t *testing.T, c client.Client, ns string) map[string]*corev1.ConfigMap {
	t.Helper()
	var list corev1.ConfigMapList
	if err := c.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{LabelManagedBy: ManagedBy}); err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// shardNames are the names of the shards the ConfigMaps hold, and of those the head names.
func shardNames(t *testing.T, cms map[string]*corev1.ConfigMap) (present, named []string) {
	t.Helper()
	for name, cm := range cms {
		if cm.Labels[LabelInventory] == roleShard {
			present = append(present, name)
		}
	}
	if h, ok := cms[HeadName]; ok {
		parsed, err := parseHead(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range parsed.Shards {
			named = append(named, sh.Name)
		}
	}
	return present, named
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestFirstStartIsAnEmptyInventory(t *testing.T) {
	c, ns := setup(t)
	if diff := cmp.Diff(keep.Inventory{}, load(t, NewStore(c, ns))); diff != "" {
		t.Fatalf("first load (-want +got):\n%s", diff)
	}
}

func TestRoundTripSurvivesARestart(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	want := keep.Inventory{Tags: tags("mirror-a", 10), LastSweep: t0}
	save(t, s, want)
	if diff := cmp.Diff(want, load(t, s)); diff != "" {
		t.Errorf("same store (-want +got):\n%s", diff)
	}
	// A restart, or another leader: a Store that saved nothing.
	if diff := cmp.Diff(want, load(t, NewStore(c, ns))); diff != "" {
		t.Errorf("new store (-want +got):\n%s", diff)
	}

	// The next leader saves over it.
	next := NewStore(c, ns)
	inv := load(t, next)
	inv, _ = inv.With(keep.Tag{Mirror: "mirror-b", Repository: "mirror.example.com/b", Tag: "1"})
	inv.LastSweep = t0.Add(time.Hour)
	save(t, next, inv)
	if diff := cmp.Diff(inv, load(t, NewStore(c, ns))); diff != "" {
		t.Errorf("after the next leader's save (-want +got):\n%s", diff)
	}
}

func TestFiftyThousandTagsAreShardedUnderTheObjectLimit(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	want := keep.Inventory{Tags: tags("mirror-a", 50_000), LastSweep: t0}
	save(t, s, want)
	if diff := cmp.Diff(want, load(t, NewStore(c, ns))); diff != "" {
		t.Fatalf("round trip of 50,000 tags (-want +got):\n%s", diff)
	}
	cms := configMaps(t, c, ns)
	present, named := shardNames(t, cms)
	if len(named) < 2 {
		t.Errorf("%d shards, want more than 1", len(named))
	}
	t.Logf("50,000 tags: %d shards", len(named))
	if diff := cmp.Diff(sorted(named), sorted(present)); diff != "" {
		t.Errorf("shards present vs named by the head (-named +present):\n%s", diff)
	}
	for name, cm := range cms {
		b, err := json.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) >= 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MiB object limit", name, len(b))
		}
		if n := len(cm.BinaryData[shardKey]); n > MaxShardBytes {
			t.Errorf("%s holds %d compressed bytes, over %d", name, n, MaxShardBytes)
		}
	}
}

func TestAStaleWriterOverwritesNothing(t *testing.T) {
	c, ns := setup(t)
	old := NewStore(c, ns) // the deposed leader
	load(t, old)
	save(t, old, keep.Inventory{Tags: tags("mirror-a", 3)})

	leader := NewStore(c, ns)
	inv := load(t, leader)
	want := keep.Inventory{Tags: append(inv.Tags, tags("mirror-b", 2)...), LastSweep: t0}
	save(t, leader, want)

	err := old.Save(t.Context(), keep.Inventory{Tags: tags("mirror-a", 4)})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale save: %v, want ErrConflict", err)
	}
	if diff := cmp.Diff(want, load(t, NewStore(c, ns))); diff != "" {
		t.Errorf("saved inventory (-leader's +got):\n%s", diff)
	}
	present, named := shardNames(t, configMaps(t, c, ns))
	if diff := cmp.Diff(sorted(named), sorted(present)); diff != "" {
		t.Errorf("the stale writer left shards (-named +present):\n%s", diff)
	}
}

func TestTwoFirstStartsOneWins(t *testing.T) {
	c, ns := setup(t)
	a, b := NewStore(c, ns), NewStore(c, ns)
	load(t, a)
	load(t, b)
	want := keep.Inventory{Tags: tags("mirror-a", 2)}
	save(t, a, want)
	if err := b.Save(t.Context(), keep.Inventory{Tags: tags("mirror-b", 2)}); !errors.Is(err, ErrConflict) {
		t.Fatalf("second first save: %v, want ErrConflict", err)
	}
	if diff := cmp.Diff(want, load(t, NewStore(c, ns))); diff != "" {
		t.Errorf("saved inventory (-first +got):\n%s", diff)
	}
}

func TestAnUnreadableShardFailsLoad(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, c client.Client, cm *corev1.ConfigMap){
		"deleted shard": func(t *testing.T, c client.Client, cm *corev1.ConfigMap) {
			if err := c.Delete(t.Context(), cm); err != nil {
				t.Fatal(err)
			}
		},
		"shard of garbage under its name": func(t *testing.T, c client.Client, cm *corev1.ConfigMap) {
			recreate(t, c, cm, []byte("not gzip"))
		},
		"shard of another valid inventory under its name": func(t *testing.T, c client.Client, cm *corev1.ConfigMap) {
			enc, err := encodeShards(tags("mirror-z", 1))
			if err != nil {
				t.Fatal(err)
			}
			recreate(t, c, cm, enc[0].gz)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, ns := setup(t)
			s := NewStore(c, ns)
			load(t, s)
			save(t, s, keep.Inventory{Tags: tags("mirror-a", 5)})
			present, _ := shardNames(t, configMaps(t, c, ns))
			if len(present) == 0 {
				t.Fatal("no shard written")
			}
			damage(t, c, configMaps(t, c, ns)[present[0]])

			inv, err := NewStore(c, ns).Load(t.Context())
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("load: %v, want ErrCorrupt", err)
			}
			if len(inv.Tags) != 0 {
				t.Errorf("load returned %d tags with its error", len(inv.Tags))
			}
			// The writer that read it whole once may not replace it now.
			if _, err := s.Load(t.Context()); err == nil {
				t.Fatal("second load succeeded")
			}
			if err := s.Save(t.Context(), keep.Inventory{}); !errors.Is(err, ErrNotLoaded) {
				t.Errorf("save after a failed load: %v, want ErrNotLoaded", err)
			}
		})
	}
}

func TestACorruptHeadFailsLoad(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	save(t, s, keep.Inventory{Tags: tags("mirror-a", 5)})
	h := configMaps(t, c, ns)[HeadName]
	h.Data[headKey] = `{"version":1,"generation":`
	if err := c.Update(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(c, ns).Load(t.Context()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("load: %v, want ErrCorrupt", err)
	}
}

// recreate replaces an (immutable) shard by one of the same name holding gz.
func recreate(t *testing.T, c client.Client, cm *corev1.ConfigMap, gz []byte) {
	t.Helper()
	if err := c.Delete(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	fresh := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, Labels: cm.Labels},
		BinaryData: map[string][]byte{shardKey: gz},
	}
	if err := c.Create(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
}

func TestSaveRemovesThePreviousGeneration(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	save(t, s, keep.Inventory{Tags: tags("mirror-a", 20_000)})
	first, _ := shardNames(t, configMaps(t, c, ns))
	save(t, s, keep.Inventory{Tags: tags("mirror-b", 3)})
	present, named := shardNames(t, configMaps(t, c, ns))
	if len(first) < 2 || len(named) != 1 {
		t.Errorf("shards: %d then %d, want several then 1", len(first), len(named))
	}
	if diff := cmp.Diff(sorted(named), sorted(present)); diff != "" {
		t.Errorf("shards present vs named by the head (-named +present):\n%s", diff)
	}
	// An empty inventory is the head alone.
	save(t, s, keep.Inventory{})
	cms := configMaps(t, c, ns)
	if present, _ := shardNames(t, cms); len(cms) != 1 || len(present) != 0 {
		t.Errorf("after saving an empty inventory: %d ConfigMaps, %d shards; want the head alone", len(cms), len(present))
	}
}

// A Save that stopped after its shards, before its head: readers still see the previous
// inventory, and the next Save removes the orphans.
func TestAnInterruptedSaveLeavesThePreviousInventory(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	want := keep.Inventory{Tags: tags("mirror-a", 4), LastSweep: t0}
	save(t, s, want)

	// What Save writes before the head, for the next generation, and nothing more.
	enc, err := encodeShards(tags("mirror-b", 6))
	if err != nil {
		t.Fatal(err)
	}
	gen := strconv.FormatInt(s.head.Generation+1, 10)
	for i, ch := range enc {
		orphan := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%s-interrupted-%d", HeadName, gen, i), Labels: map[string]string{
				LabelManagedBy: ManagedBy, LabelInventory: roleShard, LabelGeneration: gen,
			}},
			BinaryData: map[string][]byte{shardKey: ch.gz},
		}
		if err := c.Create(t.Context(), orphan); err != nil {
			t.Fatal(err)
		}
	}

	restarted := NewStore(c, ns)
	if diff := cmp.Diff(want, load(t, restarted)); diff != "" {
		t.Fatalf("load after an interrupted save (-previous +got):\n%s", diff)
	}
	next := keep.Inventory{Tags: tags("mirror-c", 2)}
	save(t, restarted, next)
	if diff := cmp.Diff(next, load(t, NewStore(c, ns))); diff != "" {
		t.Errorf("load after the next save (-want +got):\n%s", diff)
	}
	present, named := shardNames(t, configMaps(t, c, ns))
	if diff := cmp.Diff(sorted(named), sorted(present)); diff != "" {
		t.Errorf("orphans left (-named +present):\n%s", diff)
	}
}

func TestAnInventoryOverTheCapIsRefused(t *testing.T) {
	c, ns := setup(t)
	s := NewStore(c, ns)
	load(t, s)
	err := s.Save(t.Context(), keep.Inventory{Tags: make([]keep.Tag, MaxTags+1)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("save of %d tags: %v, want ErrTooLarge", MaxTags+1, err)
	}
	if cms := configMaps(t, c, ns); len(cms) != 0 {
		t.Errorf("%d ConfigMaps written by a refused save", len(cms))
	}
}

func TestSaveBeforeLoadIsRefused(t *testing.T) {
	c, ns := setup(t)
	if err := NewStore(c, ns).Save(t.Context(), keep.Inventory{}); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("save before load: %v, want ErrNotLoaded", err)
	}
}
