package keep_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/enix/kuik/internal/keep"
)

// BenchmarkDesired: the desired set and a sweep at the scale, 50,000 pods on 5,000
// images, half of them routed to the mirror by verified records.
func BenchmarkDesired(b *testing.B) {
	ix := index(b)
	mirrors := []keep.Mirror{keepMirror}
	snap := snapshot()
	for i := range 50_000 {
		image := fmt.Sprintf("docker.io/acme/app%d:1", i%5_000)
		p := pod(fmt.Sprintf("p%d", i), image)
		if i%2 == 1 {
			p = routed(pod(p.Name, dest+image), image, "ImageMirror/keep")
		}
		snap.Pods = append(snap.Pods, withImageID(p, 0, "docker.io/acme/app@"+digestA))
	}
	var inv keep.Inventory
	for i := range 5_000 {
		inv.Tags = append(inv.Tags, keep.Tag{Mirror: "keep", Repository: fmt.Sprintf("%sdocker.io/acme/app%d", dest, i), Tag: "1"})
	}
	b.ReportAllocs()
	for b.Loop() {
		plan := keep.Desired(ix, mirrors, snap)
		if len(plan.Keep) != 5_000 {
			b.Fatalf("%d Wants, want 5000", len(plan.Keep))
		}
		keep.DecideSweep(inv, &plan, mirrors, t0.Add(time.Hour), keep.Safety{Synced: true})
	}
}
