package benchutil

import (
	"fmt"
	"testing"
)

// TB lets a program use internal/testutil's real servers outside a test: a failure panics
// with a Failure (Recover turns it into an error), Cleanup records what Close runs.
type TB struct {
	testing.TB
	cleanups []func()
}

// Failure is the panic of a TB failure.
type Failure struct{ Msg string }

func (f Failure) Error() string { return f.Msg }

func (t *TB) Helper()                   {}
func (t *TB) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *TB) Fatal(args ...any)         { panic(Failure{fmt.Sprint(args...)}) }
func (t *TB) Fatalf(f string, a ...any) { panic(Failure{fmt.Sprintf(f, a...)}) }
func (t *TB) Errorf(f string, a ...any) { panic(Failure{fmt.Sprintf(f, a...)}) }
func (t *TB) Logf(string, ...any)       {}

// Close runs the cleanups, the last recorded first.
func (t *TB) Close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

// Recover, deferred, turns a TB failure into *err; other panics go on.
func Recover(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(Failure)
		if !ok {
			panic(r)
		}
		*err = f
	}
}
