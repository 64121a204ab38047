package app

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/probe"
)

// MissedPullFlags configure the missed-pull controller (internal/missedpulls).
type MissedPullFlags struct {
	// Enabled watches image-pull failure events (needs list/watch on events cluster-wide).
	Enabled bool
	// NodeProviderConfig is the nodes' CredentialProviderConfig file or directory, the webhook's
	// --image-credential-provider-config; empty for none. It is loaded into
	// Options.NodeProviders.
	NodeProviderConfig string
	// Owners are --recreate-stuck-pod-owners as written (Kind.group); validate parses them
	// into Options.RecreateOwners.
	Owners []string
	missedpulls.Options
}

// defaultOwners is --recreate-stuck-pod-owners' default, missedpulls.DefaultRecreateOwners.
func defaultOwners() []string {
	out := make([]string, 0, len(missedpulls.DefaultRecreateOwners))
	for _, gk := range missedpulls.DefaultRecreateOwners {
		out = append(out, gk.String())
	}
	return out
}

func (m *MissedPullFlags) bind(f *pflag.FlagSet) {
	f.BoolVar(&m.Enabled, "missed-pulls", false,
		"watch the kubelet's image-pull failure events and report (ImagePullMissedRouting) the pods failing to pull an image a routing resource routes to an available candidate now (needs list/watch on events cluster-wide, get on pods, create/patch on events everywhere, and egress to the registries)")
	f.BoolVar(&m.AllowDelete, "recreate-stuck-pods", false,
		"evict such pods, when they are Pending and none of their containers ever ran, their controller is of --recreate-stuck-pod-owners and their routing resource has spec.recreateStuckPods, so that their controller recreates them through the webhook (needs create on pods/eviction)")
	f.StringSliceVar(&m.Owners, "recreate-stuck-pod-owners", defaultOwners(),
		"the kinds of controllers whose stuck pods are evicted, Kind.group (a core kind alone): controllers that recreate a deleted pod from their template; Jobs: --recreate-stuck-job-pods")
	f.BoolVar(&m.RecreateJobs, "recreate-stuck-job-pods", false,
		"evict the stuck pods of a Job too, while it has retries left (status.failed below spec.backoffLimit): each eviction counts as a failure (needs get on jobs)")
	f.DurationVar(&m.StuckPodAge, "stuck-pod-age", missedpulls.DefaultStuckPodAge,
		"how long a pod must have been seen failing, since the syncer first verified it, before it is evicted")
	f.Float64Var(&m.RecreateRate, "stuck-pod-recreate-rate", missedpulls.DefaultRecreateRate,
		"stuck pods evicted per second at most, all routing resources together")
	f.IntVar(&m.RecreateBurst, "stuck-pod-recreate-burst", missedpulls.DefaultRecreateBurst,
		"stuck pods evicted at once at most before --stuck-pod-recreate-rate applies")
	f.StringSliceVar(&m.ExcludedNamespaces, "missed-pulls-exclude-namespaces", nil,
		"namespaces the webhook configuration leaves out (kube-system and the cluster resource namespace always are): their pods are never reported nor deleted")
	// The three inputs of the webhook's decision besides the routing resources: the same flags
	// and defaults as the webhook's, which the chart gives both the same values, so that the
	// syncer never calls a pull missed that the webhook would not have routed.
	f.DurationVar(&m.ProbeTimeout, "probe-timeout", probe.DefaultTimeout,
		"timeout of one registry probe of a missed-pull decision: the webhook's --probe-timeout")
	f.DurationVar(&m.ProbeTTL, "cache-ttl", probe.DefaultTTL,
		"how long a probe result of the missed-pull decisions is reused: the webhook's --cache-ttl")
	f.StringVar(&m.NodeProviderConfig, "node-credential-provider-config", "",
		"the nodes' CredentialProviderConfig, the webhook's --image-credential-provider-config: an original image its providers match counts as available when a probe is refused for lack of credentials (401, 403). Empty: none, whatever --image-credential-provider-config (the plugins the syncer runs) says")
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
	if m.ProbeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--probe-timeout must be positive, got %s", m.ProbeTimeout))
	}
	if m.ProbeTTL < 0 {
		errs = append(errs, fmt.Errorf("--cache-ttl must not be negative, got %s", m.ProbeTTL))
	}
	if m.AllowDelete && !m.Enabled {
		errs = append(errs, errors.New("--recreate-stuck-pods needs --missed-pulls"))
	}
	m.RecreateOwners = []schema.GroupKind{}
	for _, o := range m.Owners {
		gk, err := missedpulls.ParseOwner(o)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--recreate-stuck-pod-owners: %w", err))
		case gk == missedpulls.JobKind:
			errs = append(errs, errors.New("--recreate-stuck-pod-owners: Job.batch is --recreate-stuck-job-pods (a Job's pods are evicted only while it has retries left)"))
		default:
			m.RecreateOwners = append(m.RecreateOwners, gk)
		}
	}
	return errors.Join(errs...)
}

// options is the controller's configuration, nil when it is off. The nodes' configuration is
// loaded and checked as the webhook does (an invalid one is an error naming the field).
func (m *MissedPullFlags) options() (*missedpulls.Options, error) {
	if !m.Enabled {
		return nil, nil
	}
	o := m.Options
	if m.NodeProviderConfig != "" {
		cfg, err := credentialprovider.LoadConfig(m.NodeProviderConfig)
		if err != nil {
			return nil, fmt.Errorf("--node-credential-provider-config: %w", err)
		}
		o.NodeProviders = cfg
	}
	return &o, nil
}
