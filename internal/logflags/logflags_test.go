package logflags_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/enix/kuik/internal/logflags"
)

func parse(t *testing.T, args ...string) (*logflags.Flags, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f := logflags.Bind(fs)
	return f, fs.Parse(args)
}

// Each flag set gives a logger enabling exactly V(0)…V(want).
func TestVerbosity(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want int
	}{
		"defaults: info":                         {want: 0},
		"-v=3":                                   {args: []string{"-v=3"}, want: 3},
		"-v 2":                                   {args: []string{"-v", "2"}, want: 2},
		"--v=4, klog's long form":                {args: []string{"--v=4"}, want: 4},
		"-v=0":                                   {args: []string{"-v=0"}, want: 0},
		"-v=127, the most":                       {args: []string{"-v=127"}, want: 127},
		"--zap-log-level=debug":                  {args: []string{"--zap-log-level=debug"}, want: 1},
		"--zap-log-level=5":                      {args: []string{"--zap-log-level=5"}, want: 5},
		"--zap-log-level=error hides info":       {args: []string{"--zap-log-level=error"}, want: -1},
		"--zap-devel: debug":                     {args: []string{"--zap-devel"}, want: 1},
		"--zap-devel with -v=3":                  {args: []string{"--zap-devel", "-v=3"}, want: 3},
		"--zap-devel with -v=0":                  {args: []string{"--zap-devel", "-v=0"}, want: 0},
		"-v with the other --zap-* flags":        {args: []string{"-v=2", "--zap-encoder=console", "--zap-stacktrace-level=panic", "--zap-time-encoding=rfc3339"}, want: 2},
		"--zap-log-level=info after --zap-devel": {args: []string{"--zap-devel", "--zap-log-level=info"}, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			logger, err := f.Logger(&bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if got := logger.GetSink().Enabled(0); got != (tc.want >= 0) {
				t.Errorf("info enabled = %v, want %v", got, tc.want >= 0)
			}
			for v := 1; v <= logflags.MaxVerbosity; v++ {
				if got := logger.V(v).Enabled(); got != (v <= tc.want) {
					t.Fatalf("V(%d) enabled = %v, want %v", v, got, v <= tc.want)
				}
			}
			if tc.want >= 0 {
				if got := logflags.Verbosity(logger); got != tc.want {
					t.Errorf("Verbosity = %d, want %d", got, tc.want)
				}
			}
		})
	}
}

func TestRefused(t *testing.T) {
	for name, args := range map[string][]string{
		"-v and --zap-log-level": {"-v=2", "--zap-log-level=debug"},
		"a negative -v":          {"-v=-1"},
		"-v over 127":            {"-v=128"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := parse(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Logger(&bytes.Buffer{}); err == nil {
				t.Error("built a logger, want refused")
			}
		})
	}
	for name, args := range map[string][]string{
		"an unknown level":   {"--zap-log-level=loud"},
		"an unknown encoder": {"--zap-encoder=xml"},
		"-v not a number":    {"-v=high"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parse(t, args...); err == nil {
				t.Error("parsed, want refused")
			}
		})
	}
}

// The logger writes where it is told, JSON by default, console text with --zap-encoder=console,
// V(n) lines only up to its verbosity.
func TestOutput(t *testing.T) {
	f, err := parse(t, "-v=1")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger, err := f.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.V(1).Info("shown", "k", "v")
	logger.V(2).Info("hidden")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("output %q, want one line", buf.String())
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("output %q is not JSON: %v", lines[0], err)
	}
	if entry["msg"] != "shown" || entry["k"] != "v" {
		t.Errorf("entry = %v", entry)
	}

	f, err = parse(t, "--zap-encoder=console")
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if logger, err = f.Logger(&buf); err != nil {
		t.Fatal(err)
	}
	logger.Info("plain", "k", "v")
	if out := buf.String(); strings.HasPrefix(out, "{") || !strings.Contains(out, "plain") || !strings.Contains(out, `"k": "v"`) {
		t.Errorf("console output = %q", out)
	}
}

// Install hands the logger to klog (client-go logs through it) with klog's verbosity set to
// the logger's, so klog.V(n) is enabled exactly when the logger's V(n) is.
func TestInstall(t *testing.T) {
	f, err := parse(t, "-v=4")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger, err := f.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logflags.Install(logger)
	t.Cleanup(func() {
		klog.ClearLogger()
		var fs flag.FlagSet
		klog.InitFlags(&fs)
		_ = fs.Set("v", "0")
	})
	if !klog.V(4).Enabled() || klog.V(5).Enabled() {
		t.Errorf("klog V(4) enabled = %v, V(5) = %v; want true, false", klog.V(4).Enabled(), klog.V(5).Enabled())
	}
	klog.V(4).InfoS("from client-go")
	klog.V(5).InfoS("too verbose")
	if out := buf.String(); !strings.Contains(out, "from client-go") || strings.Contains(out, "too verbose") {
		t.Errorf("klog output through the logger = %q", out)
	}
}
