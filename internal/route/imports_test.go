package route_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/enix/kuik/"

// processes are the packages of each process: a package under one of a process's roots must
// not depend, directly or not, on a package under the other's. The shared rooms (route,
// routing, probe, credentials, metrics…) are under neither.
var processes = map[string][]string{
	"webhook":       {"internal/webhook", "cmd/webhook"},
	"secret-syncer": {"internal/syncer", "internal/missedpulls", "cmd/secret-syncer"},
	"keeper":        {"internal/keeper", "cmd/keeper"},
}

func processOf(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return ""
	}
	for name, roots := range processes {
		for _, root := range roots {
			if rel == root || strings.HasPrefix(rel, root+"/") {
				return name
			}
		}
	}
	return ""
}

// TestNoProcessImportsTheOther: no package of the webhook, the secret-syncer or the keeper
// depends on a package of another of them (non-test dependencies, from go list -deps). Tests may
// start both processes (internal/testutil/kuikenv); the binaries may not link each other's
// code.
func TestNoProcessImportsTheOther(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.CommandContext(t.Context(), gobin, "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg, deps := fields[0], fields[1:]
		own := processOf(pkg)
		if own == "" {
			continue
		}
		checked++
		for _, dep := range deps {
			if other := processOf(dep); other != "" && other != own {
				t.Errorf("%s (%s) depends on %s (%s)", pkg, own, dep, other)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("go list listed no package of any process")
	}
}
