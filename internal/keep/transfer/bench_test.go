package transfer

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// benchCase is an image to copy: platforms × layers summing to MiB.
type benchCase struct {
	mib, platforms, layers int
}

func (c benchCase) String() string {
	return fmt.Sprintf("%dMiB-%dx%d", c.mib, c.platforms, c.layers)
}

// BenchmarkCopyVsCrane copies multi-platform images between two local registries with Copy
// and with crane.Copy, side by side, into a fresh destination each time, and reports
// keep/crane (time ratio). KUIK_BENCH_MIB sets the first case's size (default 64). It then
// copies once more in a child process per tool and reports its memory growth over idle: peak
// heap and peak RSS (VmHWM). Timings and memory are reported, never asserted.
func BenchmarkCopyVsCrane(b *testing.B) {
	first := benchCase{64, 2, 4}
	if v, err := strconv.Atoi(os.Getenv("KUIK_BENCH_MIB")); err == nil && v > 0 {
		first.mib = v
	}
	// issue 21's target: ≥ 200 MiB, multi-platform; small layers, then one large layer each.
	for _, c := range []benchCase{first, {200, 4, 8}, {200, 4, 1}} {
		b.Run(c.String(), func(b *testing.B) { benchCopy(b, c) })
	}
}

func benchCopy(b *testing.B, c benchCase) {
	layerSize := c.mib << 20 / (c.platforms * c.layers)
	src := newSide(b, "")
	var children []v1.Descriptor
	for i := range c.platforms {
		children = append(children, src.image(b, "lib/app", false, c.layers, layerSize, fmt.Sprintf("arch%d", i)))
	}
	src.index(b, "lib/app", "v1", types.OCIImageIndex, children)
	var keep, crn time.Duration
	copyKeep := func(d *regSide) {
		start := time.Now()
		if _, err := Copy(b.Context(), src.ref(b, "lib/app:v1"), d.ref(b, "m/app:v1"), Options{}); err != nil {
			b.Fatal(err)
		}
		keep += time.Since(start)
	}
	copyCrane := func(d *regSide) {
		start := time.Now()
		if err := crane.Copy(src.front.Host+"/lib/app:v1", d.front.Host+"/m/app:v1", crane.WithContext(b.Context())); err != nil {
			b.Fatal(err)
		}
		crn += time.Since(start)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		d1, d2 := newSide(b, ""), newSide(b, "")
		b.StartTimer()
		// Alternate which goes first, so neither always meets cold connections.
		if i%2 == 0 {
			copyKeep(d1)
			copyCrane(d2)
		} else {
			copyCrane(d2)
			copyKeep(d1)
		}
		b.StopTimer()
		d1.reg.Close()
		d2.reg.Close()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(keep)/float64(crn), "keep/crane")
	b.ReportMetric(float64(c.mib)/(keep.Seconds()/float64(b.N)), "keep-MiB/s")
	b.ReportMetric(float64(c.mib)/(crn.Seconds()/float64(b.N)), "crane-MiB/s")
	b.Logf("%s: %d MiB, %d platforms × %d layers of %d KiB: keep %s, crane %s per copy, keep/crane %.2f",
		c, c.mib, c.platforms, c.layers, layerSize>>10, keep/time.Duration(b.N), crn/time.Duration(b.N), float64(keep)/float64(crn))
	for _, tool := range []string{"keep", "crane"} {
		d := newSide(b, "")
		m := memoryOfCopy(b, tool, src.front.Host+"/lib/app:v1", d.front.Host+"/m/app:v1")
		d.reg.Close()
		b.ReportMetric(float64(m.heap)/(1<<20), tool+"-heap-MiB")
		b.ReportMetric(float64(m.rss)/(1<<20), tool+"-rss-MiB")
		b.Logf("%s: %s copy in a child process: peak heap +%.1f MiB, peak RSS +%.1f MiB over idle (target ≤ 64 MiB)",
			c, tool, float64(m.heap)/(1<<20), float64(m.rss)/(1<<20))
	}
}

// memChildEnv, set to "<tool> <source> <destination>", makes the test binary only run
// TestCopyMemoryChild: one copy, its memory growth printed.
const memChildEnv = "KUIK_TRANSFER_MEM_CHILD"

// growth is a copy's memory above idle, in bytes.
type growth struct{ heap, rss int64 }

// memoryOfCopy runs one copy in a child process and returns its memory growth.
func memoryOfCopy(b *testing.B, tool, src, dst string) growth {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCopyMemoryChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), memChildEnv+"="+tool+" "+src+" "+dst)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("memory child: %v\n%s", err, out)
	}
	var g growth
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if _, after, ok := strings.Cut(sc.Text(), "MEMORY "); ok {
			if _, err := fmt.Sscanf(after, "heap=%d rss=%d", &g.heap, &g.rss); err == nil {
				return g
			}
		}
	}
	b.Fatalf("memory child printed no MEMORY line:\n%s", out)
	return g
}

// TestCopyMemoryChild is BenchmarkCopyVsCrane's child: it copies once and prints the peak
// heap (sampled every millisecond) and peak RSS (VmHWM) above idle.
func TestCopyMemoryChild(t *testing.T) {
	spec := strings.Fields(os.Getenv(memChildEnv))
	if len(spec) != 3 {
		t.Skip("run by BenchmarkCopyVsCrane only")
	}
	runtime.GC()
	idleRSS, _ := procStatus(t, "VmRSS")
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() int64 {
		metrics.Read(sample)
		return int64(sample[0].Value.Uint64())
	}
	idleHeap := heap()
	peak := idleHeap
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, heap())
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	switch spec[0] {
	case "keep":
		src, _ := name.ParseReference(spec[1])
		dst, _ := name.ParseReference(spec[2])
		if _, err := Copy(t.Context(), src, dst, Options{}); err != nil {
			t.Fatal(err)
		}
	case "crane":
		if err := crane.Copy(spec[1], spec[2], crane.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	<-sampled
	hwm, _ := procStatus(t, "VmHWM")
	_, _ = fmt.Fprintf(os.Stdout, "MEMORY heap=%d rss=%d\n", peak-idleHeap, hwm-idleRSS)
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) (int64, bool) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
