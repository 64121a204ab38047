package webhook

import (
	"slices"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// requestLogger is the logger each admission request gets (the webhooks' LogConstructor):
// controller-runtime's default, with the request's values (object, resource, user, request
// UID) encoded only when a line is logged.
//
// The default encodes them at once: controller-runtime builds two such loggers per request,
// and zap's WithValues encodes every value as it is given, through the kube-aware encoder.
// That is tens of microseconds of every admission's CPU, about what decoding the pod costs,
// for lines that are almost never logged (V(5), or an error). What is logged is unchanged.
func requestLogger(base logr.Logger, req *admission.Request) logr.Logger {
	return admission.DefaultLogConstructor(deferValues(base), req)
}

// deferValues is base, but its WithValues keeps the values and hands them to base's sink only
// when a line is logged.
func deferValues(base logr.Logger) logr.Logger {
	sink := base.GetSink()
	if sink == nil {
		return base
	}
	// The deferring sink is one more call between the caller and base's sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logr.New(deferredSink{sink: sink}).V(base.GetV())
}

// deferredSink holds key/value pairs for sink until a line is logged.
type deferredSink struct {
	sink logr.LogSink
	kv   []any
}

// Init does nothing: sink was initialized with base.
func (deferredSink) Init(logr.RuntimeInfo) {}

func (s deferredSink) Enabled(level int) bool { return s.sink.Enabled(level) }

func (s deferredSink) Info(level int, msg string, kv ...any) {
	s.withValues().Info(level, msg, kv...)
}

func (s deferredSink) Error(err error, msg string, kv ...any) {
	s.withValues().Error(err, msg, kv...)
}

func (s deferredSink) WithValues(kv ...any) logr.LogSink {
	return deferredSink{sink: s.sink, kv: append(slices.Clip(s.kv), kv...)}
}

func (s deferredSink) WithName(name string) logr.LogSink {
	return deferredSink{sink: s.sink.WithName(name), kv: s.kv}
}

// WithCallDepth implements logr.CallDepthLogSink when sink does.
func (s deferredSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.sink.(logr.CallDepthLogSink); ok {
		return deferredSink{sink: cd.WithCallDepth(depth), kv: s.kv}
	}
	return s
}

func (s deferredSink) withValues() logr.LogSink {
	if len(s.kv) == 0 {
		return s.sink
	}
	return s.sink.WithValues(s.kv...)
}
