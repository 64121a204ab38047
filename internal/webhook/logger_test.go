package webhook

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/logflags"
)

func logRequest() *admission.Request {
	return &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "3f1c9d2e-5b7a-4e8f-9a0b-1c2d3e4f5a6b", Namespace: "team-a", Name: "app-7d9f",
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller"},
	}}
}

// Each admission webhook's LogConstructor, or controller-runtime's default where it sets none
// (as controller-runtime does).
func logConstructors() map[string]func(logr.Logger, *admission.Request) logr.Logger {
	out := map[string]func(logr.Logger, *admission.Request) logr.Logger{}
	for name, a := range map[string]*admission.Webhook{
		MutatePodsPath:      podAdmission(time.Second, &PodMutator{}).(*reviewHandler).slow,
		ValidateRoutingPath: routingAdmission(&RoutingValidator{}),
	} {
		out[name] = a.LogConstructor
		if out[name] == nil {
			out[name] = admission.DefaultLogConstructor
		}
	}
	return out
}

// counting is a LogSink that counts its WithValues calls and enables V(0) and V(1).
type counting struct{ withValues *int }

func (counting) Init(logr.RuntimeInfo)            {}
func (counting) Enabled(level int) bool           { return level <= 1 }
func (counting) Info(int, string, ...any)         {}
func (counting) Error(error, string, ...any)      {}
func (c counting) WithName(string) logr.LogSink   { return c }
func (c counting) WithValues(...any) logr.LogSink { *c.withValues++; return c }
func (c counting) WithCallDepth(int) logr.LogSink { return c }

var _ logr.CallDepthLogSink = counting{}

// An admission that logs nothing hands the request's values to no sink: encoding them (zap
// encodes on WithValues) cost as much CPU as decoding the pod.
func TestAdmissionLoggerEncodesNothingWhenNothingIsLogged(t *testing.T) {
	for path, construct := range logConstructors() {
		t.Run(path, func(t *testing.T) {
			n := 0
			base := logr.New(counting{withValues: &n}).WithName("admission")
			// What controller-runtime and the handlers do with it on every admission.
			for range 2 {
				l := construct(base, logRequest())
				l.V(5).Info("received request")
				_ = l.V(1).Enabled()
			}
			if n != 0 {
				t.Errorf("the request's values were handed to the sink %d times, want 0", n)
			}
		})
	}
}

// What the admission loggers log is what controller-runtime's default logs, byte for byte
// but the time, through kuik's own logger.
func TestAdmissionLoggerLogsWhatTheDefaultLogs(t *testing.T) {
	logLines := func(construct func(logr.Logger, *admission.Request) logr.Logger) []string {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		flags := logflags.Bind(fs)
		if err := fs.Parse([]string{"-v=1"}); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		base, err := flags.Logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		l := construct(base.WithName("admission"), logRequest())
		l.V(5).Info("received request")
		l.WithValues("namespace", "team-a", "uid", "3f1c").Error(errors.New("boom"), "Admitting pod unchanged", "stage", "decode")
		l.V(1).WithName("route").Info("Rewrote container image", "container", "app")
		l.Info("plain")
		var lines []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			// The time differs; everything else must not.
			if i := strings.Index(line, `"ts":`); i >= 0 {
				j := strings.Index(line[i:], ",")
				line = line[:i] + line[i+j+1:]
			}
			lines = append(lines, line)
		}
		return lines
	}
	for path, construct := range logConstructors() {
		t.Run(path, func(t *testing.T) {
			// From one call site, so that the error line's stack trace is the same.
			var logged [][]string
			for _, c := range []func(logr.Logger, *admission.Request) logr.Logger{admission.DefaultLogConstructor, construct} {
				logged = append(logged, logLines(c))
			}
			if len(logged[0]) != 3 || !strings.Contains(logged[0][0], `"stacktrace"`) {
				t.Fatalf("the default logged %q, want 3 lines, the error's with its stack trace", logged[0])
			}
			if diff := cmp.Diff(logged[0], logged[1]); diff != "" {
				t.Errorf("logged (-default +got):\n%s", diff)
			}
		})
	}
}

// The deferred values keep their order across WithValues, and a logger built from one is not
// changed by what is added to another.
func TestDeferredValuesKeepOrderAndDoNotLeak(t *testing.T) {
	var got [][]any
	base := logr.New(recordingSink{lines: &got})
	parent := deferValues(base).WithValues("a", 1)
	parent.WithValues("b", 2).Info("one")
	parent.WithValues("c", 3).Info("two")
	parent.Info("three")
	want := [][]any{{"a", 1, "b", 2, "one"}, {"a", 1, "c", 3, "two"}, {"a", 1, "three"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// recordingSink records each line as its values then its message.
type recordingSink struct {
	lines *[][]any
	kv    []any
}

func (recordingSink) Init(logr.RuntimeInfo) {}
func (recordingSink) Enabled(int) bool      { return true }
func (s recordingSink) Info(_ int, msg string, kv ...any) {
	*s.lines = append(*s.lines, append(append(slices.Clone(s.kv), kv...), msg))
}
func (s recordingSink) Error(_ error, msg string, kv ...any) { s.Info(0, msg, kv...) }
func (s recordingSink) WithName(string) logr.LogSink         { return s }
func (s recordingSink) WithValues(kv ...any) logr.LogSink {
	return recordingSink{lines: s.lines, kv: append(slices.Clone(s.kv), kv...)}
}

// BenchmarkAdmissionLogger is what controller-runtime does with an admission's logger on every
// request (two loggers built, a V(5) line not logged), with kuik's logger at its defaults:
// controller-runtime's default constructor against requestLogger.
func BenchmarkAdmissionLogger(b *testing.B) {
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	flags := logflags.Bind(fs)
	if err := fs.Parse(nil); err != nil {
		b.Fatal(err)
	}
	base, err := flags.Logger(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	base = base.WithName("admission")
	req := logRequest()
	for name, construct := range map[string]func(logr.Logger, *admission.Request) logr.Logger{
		"default": admission.DefaultLogConstructor, "requestLogger": requestLogger,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				construct(base, req).V(5).Info("received request")
				_ = construct(base, req).V(1).Enabled()
			}
		})
	}
}
