package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// scenarios are the four kinds of pod, on the stack's registries.
func (s *stack) scenarios() []scenario {
	reg, down, silent := s.reg.Host, s.down, s.silent.Host
	return []scenario{
		{name: "uncovered", image: fixed("registry.example/team/app:v1"), want: fixed("registry.example/team/app:v1")},
		{name: "covered, original up", image: fixed(reg + "/acme/up:v1"), want: fixed(reg + "/acme/up:v1")},
		{name: "covered, rewritten", image: fixed(down + "/acme/app:v1"), want: fixed(reg + "/acme/app:v1")},
		{name: "covered, upstream hangs", image: func(r int) string { return silent + "/acme/hang:r" + strconv.Itoa(r) },
			want: func(r int) string { return reg + "/acme/hang:r" + strconv.Itoa(r) }},
	}
}

// warmUp, unmeasured, opens the connections, the API server's webhook client and the probe
// cache, with kuik installed.
func (s *stack) warmUp(ctx context.Context, scenarios []scenario) error {
	if err := waitMode(ctx, s.sentinel, s.warned, s.down, s.reg.Host, s.current); err != nil {
		return err
	}
	for i, sc := range scenarios[:3] {
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

// rounds runs every scenario in every mode, -rounds times; each round runs the three modes in
// another order (rotated, and reversed every other round) to spread a shared machine's drift.
func (s *stack) rounds(ctx context.Context, scenarios []scenario, start time.Time) (*results, error) {
	res := &results{per: *flagPods / *flagRounds, tallies: map[mode][]tally{}}
	for _, m := range modes {
		res.tallies[m] = make([]tally, len(scenarios))
	}
	fmt.Printf("\n%d rounds of %d pods per scenario and mode, %d creators\n", *flagRounds, res.per, *flagConcurrency)
	for r := range *flagRounds {
		order := []mode{modes[r%3], modes[(r+1)%3], modes[(r+2)%3]}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			if err := s.setMode(ctx, m); err != nil {
				return nil, err
			}
			for i, sc := range scenarios {
				b, err := createBatch(ctx, s.cs, s.procs[m], i, sc, r, res.per, m)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, %s: %w", r, sc.name, m, err)
				}
				res.tallies[m][i].add(b)
				if m == modeNone {
					res.idle += b.cpu
				}
			}
			fmt.Printf("round %d %-22s done at +%s\n", r, m, time.Since(start).Round(time.Second))
		}
	}
	return res, nil
}
