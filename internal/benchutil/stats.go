package benchutil

import (
	"fmt"
	"slices"
	"time"
)

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Percentile is the p-th percentile (nearest rank) of sorted, which must not be empty.
func Percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// Sorted is a sorted copy of d.
func Sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// Over counts the durations of d longer than limit.
func Over(d []time.Duration, limit time.Duration) int {
	n := 0
	for _, l := range d {
		if l > limit {
			n++
		}
	}
	return n
}

// Ratio is a / b, a figure against its floor; 0 when the floor is 0.
func Ratio[T ~int64 | ~float64](a, b T) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
