package app

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/enix/kuik/internal/missedpulls"
)

// MissedPullFlags configure the missed-pull controller (internal/missedpulls).
type MissedPullFlags struct {
	// Enabled watches image-pull failure events (needs list/watch on events cluster-wide).
	Enabled bool
	missedpulls.Options
}

func (m *MissedPullFlags) bind(f *pflag.FlagSet) {
	f.BoolVar(&m.Enabled, "missed-pulls", true,
		"watch the kubelet's image-pull failure events and report (ImagePullMissedRouting) the pods failing to pull an image a routing resource routes to an available candidate now")
	f.BoolVar(&m.AllowDelete, "recreate-stuck-pods", false,
		"delete such pods, when a controller owns them and their routing resource has spec.recreateStuckPods, so that their controller recreates them through the webhook (needs delete on pods)")
	f.DurationVar(&m.StuckPodAge, "stuck-pod-age", missedpulls.DefaultStuckPodAge,
		"how long a pod must have been seen failing, since the syncer first verified it, before it is deleted")
	f.Float64Var(&m.RecreateRate, "stuck-pod-recreate-rate", missedpulls.DefaultRecreateRate,
		"stuck pods deleted per second at most, all routing resources together")
	f.IntVar(&m.RecreateBurst, "stuck-pod-recreate-burst", missedpulls.DefaultRecreateBurst,
		"stuck pods deleted at once at most before --stuck-pod-recreate-rate applies")
	f.StringSliceVar(&m.ExcludedNamespaces, "missed-pulls-exclude-namespaces", nil,
		"namespaces the webhook configuration leaves out (kube-system and the cluster resource namespace always are): their pods are never reported nor deleted")
}

func (m *MissedPullFlags) validate() error {
	var errs []error
	if m.StuckPodAge <= 0 {
		errs = append(errs, fmt.Errorf("--stuck-pod-age must be positive, got %s", m.StuckPodAge))
	}
	if m.RecreateRate <= 0 {
		errs = append(errs, fmt.Errorf("--stuck-pod-recreate-rate must be positive, got %g", m.RecreateRate))
	}
	if m.RecreateBurst < 1 {
		errs = append(errs, fmt.Errorf("--stuck-pod-recreate-burst must be at least 1, got %d", m.RecreateBurst))
	}
	if m.AllowDelete && !m.Enabled {
		errs = append(errs, errors.New("--recreate-stuck-pods needs --missed-pulls"))
	}
	return errors.Join(errs...)
}

// options is the controller's configuration, nil when it is off.
func (m *MissedPullFlags) options() *missedpulls.Options {
	if !m.Enabled {
		return nil
	}
	o := m.Options
	return &o
}
