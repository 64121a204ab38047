package testutil

import (
	"time"
)

// Peak samples value every millisecond until the returned stop is called, which returns the
// highest value seen. For bounds a test checks while a load runs (probes in flight,
// goroutines); a peak, not a timing, is asserted.
func Peak(value func() int) (stop func() int) {
	done := make(chan struct{})
	result := make(chan int, 1)
	go func() {
		peak := value()
		for {
			select {
			case <-done:
				result <- max(peak, value())
				return
			case <-time.After(time.Millisecond):
				peak = max(peak, value())
			}
		}
	}()
	return func() int {
		close(done)
		return <-result
	}
}
