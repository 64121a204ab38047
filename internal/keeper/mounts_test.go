package keeper

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestCopiesFillTheKeepersMountTable(t *testing.T) {
	f := newFixture(t, Options{}, nil)
	f.src.Push(t, "app:1")
	ref, err := name.ParseReference(f.src.Host + "/app:1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("%d layers: %v", len(layers), err)
	}
	layer, _ := layers[0].Digest()
	f.setPods(livePod("web", "src.test/app:1"))
	f.start()
	f.waitKept("src.test/app:1", srcDigest(t, f.src, "app:1"))

	// A sibling repository of the mirror would mount the layer from the one just written.
	sibling, err := name.NewRepository(f.dest() + "other/app")
	if err != nil {
		t.Fatal(err)
	}
	from, ok := f.k.mounts.Lookup(sibling, layer)
	if want := f.dest() + "src.test/app"; !ok || from.String() != want {
		t.Fatalf("the table offers %q (%v) for a sibling, want %s", from, ok, want)
	}
}
