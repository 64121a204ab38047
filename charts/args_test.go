package charts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
	"github.com/enix/kuik/internal/probe"
)

// The Deployments' args are parsed by the binaries' own commands: a flag the chart passes that a
// binary does not know would crash-loop the pod, and the values must arrive where intended.
func TestDeploymentArgsParseWithTheBinaries(t *testing.T) {
	r := render(t, map[string]any{
		"webhook": map[string]any{"probeTimeoutSeconds": 3},
		"syncer":  map[string]any{"retention": "20m"},
	})
	args := func(component string) []string {
		t.Helper()
		for _, o := range r.OfKind("Deployment") {
			if o.GetLabels()["app.kubernetes.io/component"] != component {
				continue
			}
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			return d.Spec.Template.Spec.Containers[0].Args
		}
		t.Fatalf("no Deployment for %s", component)
		return nil
	}

	var w webhookapp.Options
	cmd := webhookapp.NewCommand(
		func(_ context.Context, o webhookapp.Options) error { w = o; return nil },
		func(context.Context, webhookapp.CandidatesOptions) error { return nil },
	)
	cmd.SetArgs(args("webhook"))
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("webhook args %v: %v", args("webhook"), err)
	}
	if w.ClusterResourceNamespace != ns || w.ProbeTimeout != 3*time.Second || w.Port != 9443 || w.CertDir == "" {
		t.Errorf("webhook options from the chart = %+v", w)
	}

	var s syncerapp.Options
	scmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
	scmd.SetArgs(args("secret-syncer"))
	if err := scmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("secret-syncer args %v: %v", args("secret-syncer"), err)
	}
	if s.ClusterResourceNamespace != ns || !s.LeaderElection || s.Retention != 20*time.Minute {
		t.Errorf("secret-syncer options from the chart = %+v", s)
	}
}

// With provider credentials on, both binaries accept the flags the chart adds and load what
// the chart mounts there: the pods' files (the ConfigMap's items at their mount, the provider's
// binary in the bin dir) are laid out below a temporary root and the flags' paths moved there.
func TestCredentialProviderArgsParseWithTheBinaries(t *testing.T) {
	for name, binDir := range map[string]map[string]any{
		"hostPath": hostPathBinDir, "image volume": imageVolumeBinDir, "init container": initContainerBinDir,
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, providerValues(binDir))
			cm := convert[corev1.ConfigMap](t, r.Find("ConfigMap", providersConfigMap))
			p := providerDeployments(t, r)
			root := t.TempDir()
			podArgs := func(d *appsv1.Deployment) []string { t.Helper(); return podArgsBelow(t, root, cm, d) }

			args := podArgs(p.syncer)
			var s syncerapp.Options
			scmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
			scmd.SetArgs(args)
			if err := scmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("secret-syncer args %v: %v", args, err)
			}
			wantConfig, _ := flagValue(args, configFlag)
			wantBinDir, _ := flagValue(args, binDirFlag)
			if wantConfig == "" || wantBinDir == "" || s.Providers.Config != wantConfig || s.Providers.BinDir != wantBinDir {
				t.Errorf("secret-syncer provider options = %+v, want config %q, bin dir %q", s.Providers, wantConfig, wantBinDir)
			}
			// The syncer loads them as it does at start: the configuration decodes and
			// validates, and the provider's binary is found in the bin dir.
			plugins, err := s.Providers.Plugins()
			if err != nil {
				t.Fatalf("the secret-syncer refuses what the chart mounts: %v", err)
			}
			if plugins == nil || plugins.Config().Provider("ecr-credential-provider") == nil {
				t.Errorf("the secret-syncer's providers lack ecr-credential-provider")
			}

			args = podArgs(p.webhook)
			wcmd := webhookapp.NewCommand(
				func(context.Context, webhookapp.Options) error { return nil },
				func(context.Context, webhookapp.CandidatesOptions) error { return nil },
			)
			wcmd.SetArgs(args)
			if err := wcmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("webhook args %v: %v", args, err)
			}
			want, _ := flagValue(args, configFlag)
			if got := wcmd.Flags().Lookup("image-credential-provider-config"); got == nil || got.Value.String() != want {
				t.Errorf("webhook --image-credential-provider-config = %v, want %s", got, want)
			}
		})
	}
}

// podArgsBelow lays out below root the files the flags of d's container name (the ConfigMap's
// items at their mount, a provider binary in the bin dir) and returns its args with their
// paths moved there.
func podArgsBelow(t *testing.T, root string, cm *corev1.ConfigMap, d *appsv1.Deployment) []string {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	var args []string
	for _, a := range c.Args {
		for _, f := range []string{configFlag, binDirFlag, nodeConfigFlag} {
			v, ok := strings.CutPrefix(a, f)
			if !ok {
				continue
			}
			m, vol, rel := mountOf(t, d.Spec.Template.Spec, c, v)
			host := filepath.Join(root, d.Name, v)
			switch {
			case vol.ConfigMap != nil:
				for _, item := range vol.ConfigMap.Items {
					if item.Path == rel {
						writeFile(t, host, cm.Data[item.Key], 0o644)
					}
				}
			case f == binDirFlag:
				writeFile(t, filepath.Join(host, "ecr-credential-provider"), "#!/bin/sh\nexit 1\n", 0o755)
			default:
				t.Fatalf("%s: %s is on mount %+v of volume %+v", d.Name, v, m, vol)
			}
			a = f + host
		}
		args = append(args, a)
	}
	return args
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// The logging flags passed through webhook.extraArgs reach the webhook's logger.
func TestWebhookLoggingFlagsThroughExtraArgs(t *testing.T) {
	r := render(t, map[string]any{"webhook": map[string]any{"extraArgs": []any{"-v=2", "--zap-encoder=console"}}})
	var args []string
	for _, o := range r.OfKind("Deployment") {
		if o.GetLabels()["app.kubernetes.io/component"] == "webhook" {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			args = d.Spec.Template.Spec.Containers[0].Args
		}
	}
	var logger logr.Logger
	cmd := webhookapp.NewCommand(
		func(ctx context.Context, _ webhookapp.Options) error {
			logger = logr.FromContextOrDiscard(ctx)
			return nil
		},
		func(context.Context, webhookapp.CandidatesOptions) error { return nil },
	)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("webhook args %v: %v", args, err)
	}
	if !logger.V(2).Enabled() || logger.V(3).Enabled() {
		t.Errorf("with -v=2, V(2) enabled = %v, V(3) = %v", logger.V(2).Enabled(), logger.V(3).Enabled())
	}
}

// The secret-syncer's missed-pull decisions make the webhook's decision again, so they take the
// webhook's inputs from the same values: webhook.probeTimeoutSeconds, webhook.cacheTTL and
// (with credentialProviders.sameAsNodes) the nodes' providers, each parsed by both binaries'
// own commands. With sameAsNodes false neither counts the nodes' providers, though the syncer
// still runs the plugins.
func TestWebhookAndMissedPullsDecideFromTheSameValues(t *testing.T) {
	for name, tc := range map[string]struct {
		sameAsNodes bool
	}{
		"the nodes run the providers":     {sameAsNodes: true},
		"only the secret-syncer has them": {sameAsNodes: false},
	} {
		t.Run(name, func(t *testing.T) {
			values := providerValues(hostPathBinDir)
			values["credentialProviders"].(map[string]any)["sameAsNodes"] = tc.sameAsNodes
			values["webhook"] = map[string]any{"probeTimeoutSeconds": 7, "cacheTTL": "45s"}
			values["syncer"] = map[string]any{"missedPulls": map[string]any{"enabled": true}}
			r := render(t, values)
			cm := convert[corev1.ConfigMap](t, r.Find("ConfigMap", providersConfigMap))
			p := providerDeployments(t, r)
			root := t.TempDir()

			var w webhookapp.Options
			wcmd := webhookapp.NewCommand(
				func(_ context.Context, o webhookapp.Options) error { w = o; return nil },
				func(context.Context, webhookapp.CandidatesOptions) error { return nil },
			)
			wcmd.SetArgs(podArgsBelow(t, root, cm, p.webhook))
			if err := wcmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("webhook args: %v", err)
			}
			var s syncerapp.Options
			scmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
			scmd.SetArgs(podArgsBelow(t, root, cm, p.syncer))
			if err := scmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("secret-syncer args: %v", err)
			}
			if s.MissedPulls == nil {
				t.Fatal("missed pulls are off")
			}
			if w.ProbeTimeout != 7*time.Second || s.MissedPulls.ProbeTimeout != w.ProbeTimeout {
				t.Errorf("probe timeout: webhook %s, secret-syncer %s; want 7s both", w.ProbeTimeout, s.MissedPulls.ProbeTimeout)
			}
			if w.CacheTTL != 45*time.Second || s.MissedPulls.ProbeTTL != w.CacheTTL {
				t.Errorf("probe cache TTL: webhook %s, secret-syncer %s; want 45s both", w.CacheTTL, s.MissedPulls.ProbeTTL)
			}
			webhookNodes := w.CredentialProviders != nil && w.CredentialProviders.Provider("ecr-credential-provider") != nil
			syncerNodes := s.MissedPulls.NodeProviders != nil && s.MissedPulls.NodeProviders.Provider("ecr-credential-provider") != nil
			if webhookNodes != tc.sameAsNodes || syncerNodes != tc.sameAsNodes {
				t.Errorf("the nodes' ecr-credential-provider counted by the webhook: %v, by the missed-pull decisions: %v; want %v both", webhookNodes, syncerNodes, tc.sameAsNodes)
			}
			if s.Plugins == nil {
				t.Error("the secret-syncer runs no plugins")
			}
		})
	}
}

// One Go default each: the two binaries' probe flags have the same names and defaults, so a
// syncer run without the chart decides as a webhook run without it.
func TestProbeFlagDefaultsAreSharedByBothBinaries(t *testing.T) {
	w := webhookapp.NewCommand(
		func(context.Context, webhookapp.Options) error { return nil },
		func(context.Context, webhookapp.CandidatesOptions) error { return nil },
	).Flags()
	s := syncerapp.NewCommand(func(context.Context, syncerapp.Options) error { return nil }).Flags()
	for flag, want := range map[string]string{"probe-timeout": probe.DefaultTimeout.String(), "cache-ttl": probe.DefaultTTL.String()} {
		wf, sf := w.Lookup(flag), s.Lookup(flag)
		if wf == nil || sf == nil {
			t.Errorf("--%s: webhook %v, secret-syncer %v; want both", flag, wf, sf)
			continue
		}
		if wf.DefValue != want || sf.DefValue != want {
			t.Errorf("--%s defaults: webhook %s, secret-syncer %s; want %s both", flag, wf.DefValue, sf.DefValue, want)
		}
	}
	if wf, sf := w.Lookup("image-credential-provider-config"), s.Lookup("node-credential-provider-config"); wf == nil || sf == nil || wf.DefValue != "" || sf.DefValue != "" {
		t.Errorf("the nodes' providers: webhook --image-credential-provider-config %v, secret-syncer --node-credential-provider-config %v; want both, empty by default", wf, sf)
	}
}
