package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/google/go-cmp/cmp"
)

// scenarios are the four kinds of pod, on the stack's registries, those -scenarios matches.
func (s *stack) scenarios() ([]scenario, error) {
	reg, down, silent := s.reg.Host, s.down, s.silent.Host
	all := []scenario{
		{name: "uncovered", image: fixed("registry.example/team/app:v1"), want: fixed("registry.example/team/app:v1"), warm: true,
			goal: "kuik / none <= 1.03x"},
		{name: "covered, original up", image: fixed(reg + "/acme/up:v1"), want: fixed(reg + "/acme/up:v1"), warm: true,
			goal: "kuik / none <= 1.10x"},
		{name: "covered, rewritten", image: fixed(down + "/acme/app:v1"), want: fixed(reg + "/acme/app:v1"), warm: true,
			goal: "kuik / none <= 1.10x; kuik / same <= 1.05x (1.15x)"},
		{name: "covered, upstream hangs", image: func(r int) string { return silent + "/acme/hang:r" + strconv.Itoa(r) },
			want: func(r int) string { return reg + "/acme/hang:r" + strconv.Itoa(r) }, goal: "bounded by the probe timeout"},
	}
	re, err := regexp.Compile(*flagScenarios)
	if err != nil {
		return nil, fmt.Errorf("-scenarios: %w", err)
	}
	var out []scenario
	for _, sc := range all {
		if re.MatchString(sc.name) {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-scenarios %q matches none of the scenarios", *flagScenarios)
	}
	return out, nil
}

// warmUp, unmeasured, opens the connections, the API server's webhook client and the probe
// cache, with kuik installed.
func (s *stack) warmUp(ctx context.Context, scenarios []scenario) error {
	if err := waitMode(ctx, s.sentinel, s.warned, s.down, s.reg.Host, s.current); err != nil {
		return err
	}
	for i, sc := range scenarios {
		if !sc.warm {
			continue
		}
		if _, err := createBatch(ctx, s.cs, s.wh, i, sc, -1, *flagConcurrency*2, s.current); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// results are the rounds' tallies, per mode and scenario.
type results struct {
	per     int // pods per scenario, mode and round
	tallies map[mode][]tally
	idle    time.Duration // kuik's CPU over the batches it was not installed for
}

// rounds runs every scenario in every mode, -rounds times; each round runs the modes in another
// order (order) to spread a shared machine's drift.
func (s *stack) rounds(ctx context.Context, scenarios []scenario, start time.Time) (*results, error) {
	res := &results{per: *flagPods / *flagRounds, tallies: map[mode][]tally{}}
	for _, m := range modes {
		res.tallies[m] = make([]tally, len(scenarios))
	}
	fmt.Printf("\n%d rounds of %d pods per scenario and mode, %d creators\n", *flagRounds, res.per, *flagConcurrency)
	for r := range *flagRounds {
		for _, m := range order(r) {
			if err := s.setMode(ctx, m); err != nil {
				return nil, err
			}
			for i, sc := range scenarios {
				b, err := createBatch(ctx, s.cs, s.procs[m], i, sc, r, res.per, m)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, %s: %w", r, sc.name, m, err)
				}
				res.tallies[m][i].add(r, b)
				if m == modeNone {
					res.idle += b.cpu
				}
			}
			fmt.Printf("round %d %-22s done at +%s\n", r, m, time.Since(start).Round(time.Second))
		}
	}
	return res, samePods(scenarios, res)
}

// order is round r's order of the modes: a balanced Latin square (Williams'), so that over
// len(modes) rounds every mode runs once in every place, and every mode right after every other
// one once (for an odd number of modes, over twice as many rounds, every other one reversed).
func order(r int) []mode {
	n := len(modes)
	out := make([]mode, n)
	for k := range n {
		// 0, 1, n-1, 2, n-2, ...
		b := (k + 1) / 2
		if k%2 == 0 {
			b = (n - k/2) % n
		}
		out[k] = modes[(b+r)%n]
	}
	if n%2 == 1 && (r/n)%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// podDiff is the difference between two alike pods.
func podDiff(a, b string) string {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a + "\n" + b
	}
	return cmp.Diff(x, y)
}

// samePods checks that the same-patch webhook's pods are kuik's, and the no-op webhook's the
// floor's, in every scenario and round (but for what tells pods apart: alike).
func samePods(scenarios []scenario, res *results) error {
	for i, sc := range scenarios {
		for _, pair := range [][2]mode{{modeSame, modeKuik}, {modeNoop, modeNone}} {
			a, b := res.tallies[pair[0]][i].pods, res.tallies[pair[1]][i].pods
			for r := range *flagRounds {
				if a[r] != b[r] {
					return fmt.Errorf("%s, round %d: the %s webhook's pods are not those of %s (-%s +%s):\n%s", sc.name, r, pair[0], pair[1], pair[0], pair[1], podDiff(a[r], b[r]))
				}
			}
		}
	}
	return nil
}
