// Package logflags binds the logging flags of kuik's binaries, klog's -v=N and
// controller-runtime's --zap-* flags, and builds the logr.Logger they describe.
//
// -v=N enables logr's V(N) and below, as --zap-log-level=N does (V(n) is zap's level -n); the
// two set the same thing, so giving both is an error. Without either, the logger logs V(0)
// (info), or V(1) (debug) with --zap-devel.
package logflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// MaxVerbosity is the highest -v: zap levels are an int8.
const MaxVerbosity = 127

// Flags are the parsed logging flags.
type Flags struct {
	zap       zap.Options
	verbosity int
	v, level  *pflag.Flag
}

// Bind adds -v (also --v) and controller-runtime's --zap-devel, --zap-encoder,
// --zap-log-level, --zap-stacktrace-level and --zap-time-encoding to fs.
func Bind(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	var zfs flag.FlagSet
	f.zap.BindFlags(&zfs)
	fs.AddGoFlagSet(&zfs)
	fs.IntVarP(&f.verbosity, "v", "v", 0, "Log verbosity: messages up to V(N) are logged (the same as --zap-log-level=N; 0 is info).")
	f.v, f.level = fs.Lookup("v"), fs.Lookup("zap-log-level")
	return f
}

// Logger builds the logger the parsed flags describe, writing to w.
func (f *Flags) Logger(w io.Writer) (logr.Logger, error) {
	if f.v.Changed && f.level.Changed {
		return logr.Discard(), errors.New("-v and --zap-log-level both set the log verbosity: give one of them")
	}
	if f.verbosity < 0 || f.verbosity > MaxVerbosity {
		return logr.Discard(), fmt.Errorf("-v must be between 0 and %d, got %d", MaxVerbosity, f.verbosity)
	}
	opts := f.zap
	if f.v.Changed {
		level := uberzap.NewAtomicLevelAt(zapcore.Level(-f.verbosity))
		opts.Level = &level
	}
	opts.DestWriter = w
	return zap.New(zap.UseFlagOptions(&opts)), nil
}

// Verbosity is the highest V level logger enables.
func Verbosity(logger logr.Logger) int {
	for n := MaxVerbosity; n > 0; n-- {
		if logger.V(n).Enabled() {
			return n
		}
	}
	return 0
}

// Install makes logger the process's logger: controller-runtime's, and klog's (client-go
// logs through it) with klog's own verbosity set to the logger's, so that a klog.V(n) line
// is logged exactly when the logger enables V(n).
func Install(logger logr.Logger) {
	ctrllog.SetLogger(logger)
	klog.SetLogger(logger)
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	// "v" is klog's own flag; setting it to an integer cannot fail.
	_ = fs.Set("v", strconv.Itoa(Verbosity(logger)))
}
