package metrics

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	// A metric of the package comment: "  - name{label,label}: help".
	docLineRE = regexp.MustCompile(`^//\s+- (kuik_[a-z_]+)(?:\{([a-z_,]*)\})?:`)
	descRE    = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^{}]*)\}\}$`)
)

// The package comment lists every metric the binaries register, with its labels in order, and
// nothing else (docs/reference/metrics.md is generated from the collectors; the comment is not).
func TestPackageCommentListsEveryMetric(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, l := range strings.Split(string(src), "\n") {
		if m := docLineRE.FindStringSubmatch(l); m != nil {
			documented[m[1]] = m[2]
		}
	}
	registered := map[string]string{}
	for _, c := range append(append(WebhookCollectors(), SyncerCollectors()...), KeeperCollectors()...) {
		ch := make(chan *prometheus.Desc, 4)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, err := strconv.Unquote(m[1])
			if err != nil {
				t.Fatal(err)
			}
			registered[name] = m[2]
		}
	}
	if diff := cmp.Diff(registered, documented); diff != "" {
		t.Errorf("metrics and their labels, registered (-) and in doc.go's list (+):\n%s", diff)
	}
}
