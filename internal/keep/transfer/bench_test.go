package transfer

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BenchmarkCopyVsCrane copies a 2-platform image of KUIK_BENCH_MIB MiB (default 64) between
// two local registries with Copy and with crane.Copy, side by side, into a fresh destination
// each time, and reports keep/crane (time ratio). Timings are reported, never asserted.
func BenchmarkCopyVsCrane(b *testing.B) {
	mib := 64
	if v, err := strconv.Atoi(os.Getenv("KUIK_BENCH_MIB")); err == nil && v > 0 {
		mib = v
	}
	const platforms, layers = 2, 4
	layerSize := mib << 20 / (platforms * layers)
	src := newSide(b, "")
	src.index(b, "lib/app", "v1", types.OCIImageIndex, []v1.Descriptor{
		src.image(b, "lib/app", false, layers, layerSize, "amd64"),
		src.image(b, "lib/app", false, layers, layerSize, "arm64"),
	})
	var keep, crn time.Duration
	for b.Loop() {
		b.StopTimer()
		d1, d2 := newSide(b, ""), newSide(b, "")
		b.StartTimer()
		start := time.Now()
		if _, err := Copy(b.Context(), src.ref(b, "lib/app:v1"), d1.ref(b, "m/app:v1"), Options{}); err != nil {
			b.Fatal(err)
		}
		keep += time.Since(start)
		start = time.Now()
		if err := crane.Copy(src.front.Host+"/lib/app:v1", d2.front.Host+"/m/app:v1", crane.WithContext(b.Context())); err != nil {
			b.Fatal(err)
		}
		crn += time.Since(start)
		b.StopTimer()
		d1.reg.Close()
		d2.reg.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(keep)/float64(crn), "keep/crane")
	b.ReportMetric(float64(mib)/(keep.Seconds()/float64(b.N)), "keep-MiB/s")
	b.ReportMetric(float64(mib)/(crn.Seconds()/float64(b.N)), "crane-MiB/s")
	b.Logf("%d MiB, %d platforms × %d layers: keep %s, crane %s per copy", mib, platforms, layers, keep/time.Duration(b.N), crn/time.Duration(b.N))
}
