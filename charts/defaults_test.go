package charts_test

import (
	"context"
	"testing"

	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
	"github.com/enix/kuik/internal/probe"
)

// The chart's defaults of the settings both processes share are the Go defaults: a release with
// default values probes as the binaries run without the chart (probe.DefaultTimeout,
// probe.DefaultTTL, no nodes' providers).
func TestSharedSettingsDefaultToTheGoDefaults(t *testing.T) {
	r := render(t, map[string]any{"syncer": map[string]any{"missedPulls": map[string]any{"enabled": true}}})
	d := deployments(t, r)

	var w webhookapp.Options
	wcmd := webhookapp.NewCommand(
		func(_ context.Context, o webhookapp.Options) error { w = o; return nil },
		func(context.Context, webhookapp.CandidatesOptions) error { return nil },
	)
	wcmd.SetArgs(d["kuik-webhook"].Spec.Template.Spec.Containers[0].Args)
	if err := wcmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("webhook args: %v", err)
	}
	var s syncerapp.Options
	scmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
	scmd.SetArgs(d["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args)
	if err := scmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("secret-syncer args: %v", err)
	}
	if s.MissedPulls == nil {
		t.Fatal("missed pulls are off")
	}
	if w.ProbeTimeout != probe.DefaultTimeout || s.MissedPulls.ProbeTimeout != probe.DefaultTimeout {
		t.Errorf("default probe timeout: webhook %s, secret-syncer %s; want probe.DefaultTimeout %s both", w.ProbeTimeout, s.MissedPulls.ProbeTimeout, probe.DefaultTimeout)
	}
	if w.CacheTTL != probe.DefaultTTL || s.MissedPulls.ProbeTTL != probe.DefaultTTL {
		t.Errorf("default probe cache TTL: webhook %s, secret-syncer %s; want probe.DefaultTTL %s both", w.CacheTTL, s.MissedPulls.ProbeTTL, probe.DefaultTTL)
	}
	if w.CredentialProviders != nil || s.MissedPulls.NodeProviders != nil {
		t.Errorf("default nodes' providers: webhook %v, secret-syncer %v; want none", w.CredentialProviders, s.MissedPulls.NodeProviders)
	}
}
