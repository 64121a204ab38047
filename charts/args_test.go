package charts_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
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
