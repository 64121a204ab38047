package probe

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// fillDue stores n Available results of images on host as probes landing at now would, each
// read by a deciding caller and due for refresh, and puts host at its PerRegistry bound: every
// refresher step then examines every one of them and starts none.
func fillDue(p *Prober, n int, host string, now time.Time) Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t Target
	for i := range n {
		t = Target{Reference: fmt.Sprintf("%s/acme/app-%d:v1", host, i)}
		expires := now.Add(time.Second + time.Duration(i)*time.Microsecond)
		p.cache[t.key()] = cached{result: Available, expires: expires, used: now, decisive: true, target: t, host: host}
		p.pushDueLocked(t.key(), expires, now)
	}
	p.perRegistry[host] = p.opts.Refresh.PerRegistry
	return t
}

// Ten thousand results due on a registry at its PerRegistry bound (one that hangs): each step
// examines all of them, and no hold of the Prober's lock examines more than refreshBatch, so
// an admission's cache read never waits on a pass over the cache.
func TestRefresherExaminesABatchAtMostUnderTheLock(t *testing.T) {
	const n = 10_000
	now := time.Unix(1_000_000, 0)
	p := New(Options{Now: func() time.Time { return now }})
	fillDue(p, n, "hanging.example:5000", now)
	r := p.newRefresher()
	var most, examined int
	r.onHold = func(e int, _ time.Duration) { most, examined = max(most, e), examined+e }
	for step := range 2 {
		examined = 0
		if started := r.step(t.Context()); len(started) != 0 {
			t.Fatalf("step %d started %d refreshes on a registry at its PerRegistry bound", step, len(started))
		}
		if examined < n {
			t.Fatalf("step %d examined %d entries, want all %d due", step, examined, n)
		}
	}
	if most > refreshBatch {
		t.Errorf("%d entries examined under one hold of the lock, want %d at most", most, refreshBatch)
	}
	if len(r.soon) != n || !slices.IsSortedFunc(r.soon, func(a, b dueRecord) int { return a.expires.Compare(b.expires) }) {
		t.Errorf("%d entries kept for the next step, want all %d, lapsing first first", len(r.soon), n)
	}
}

// BenchmarkRefresherScan reports the holds of the Prober's lock by refresher steps with 10k
// and 100k results due (none startable, so every step examines them all): the longest and the
// median, as multiples of one cache read under the lock (an admission's) measured in the same
// run. The longest includes the machine's noise (preemption, GC); the median is the design's.
func BenchmarkRefresherScan(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			now := time.Unix(1_000_000, 0)
			p := New(Options{Now: func() time.Time { return now }})
			last := fillDue(p, n, "hanging.example:5000", now)
			k := last.key()
			runtime.GC() // the fill's garbage, not the refresher's
			const per = 100
			reads := make([]time.Duration, 100)
			for i := range reads {
				begin := time.Now()
				for range per {
					p.read(k, last)
				}
				reads[i] = time.Since(begin) / per
			}
			r := p.newRefresher()
			var holds []time.Duration
			var most int
			r.onHold = func(e int, held time.Duration) { holds, most = append(holds, held), max(most, e) }
			for b.Loop() {
				r.step(b.Context())
			}
			read, hold := median(reads), median(holds)
			b.ReportMetric(float64(slices.Max(holds))/float64(read), "longest-hold/read")
			b.ReportMetric(float64(hold)/float64(read), "median-hold/read")
			b.ReportMetric(float64(most), "entries/hold")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
