// Command webhook is kuik's admission webhook. See `webhook --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	// Public CA roots for probing registries over HTTPS when no bundle can be read (the image
	// ships one at /etc/ssl/certs/ca-certificates.crt; SSL_CERT_FILE still takes precedence).
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/enix/kuik/cmd/webhook/app"
	"github.com/enix/kuik/internal/logflags"
	"github.com/enix/kuik/internal/manifest"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/webhook"
)

func main() {
	err := app.NewCommand(serve, candidates).ExecuteContext(ctrl.SetupSignalHandler())
	var usage app.UsageError
	switch {
	case err == nil:
	case errors.As(err, &usage) || errors.Is(err, route.ErrInvalidResources):
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, o app.Options) error {
	logflags.Install(ctrl.LoggerFrom(ctx))
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	// API Priority and Fairness governs; a client-side limit would only add latency.
	cfg.QPS, cfg.Burst = -1, -1
	ctrlmetrics.Registry.MustRegister(metrics.WebhookCollectors()...)
	return webhook.Run(ctx, webhook.Config{
		RestConfig:                cfg,
		ClusterResourceNamespace:  o.ClusterResourceNamespace,
		ProbeTimeout:              o.ProbeTimeout,
		CacheTTL:                  o.CacheTTL,
		MaxProbesInFlight:         o.MaxProbesInFlight,
		MaxConnsPerRegistry:       o.MaxConnsPerRegistry,
		CertDir:                   o.CertDir,
		Host:                      o.Host,
		Port:                      o.Port,
		MetricsBindAddress:        o.MetricsBindAddress,
		HealthProbeBindAddress:    o.HealthProbeBindAddress,
		PprofBindAddress:          o.PprofBindAddress,
		CredentialProviders:       o.CredentialProviders,
		ClusterID:                 o.ClusterID,
		MatchConditionsGate:       o.MatchConditionsGate,
		ProbeRefreshIdle:          o.ProbeRefreshIdle,
		ProbeRefreshesPerSecond:   o.ProbeRefreshesPerSecond,
		ProbeRefreshesPerRegistry: o.ProbeRefreshesPerRegistry,
		HintedWait:                o.HintedWait,
		HintMaxAge:                o.HintMaxAge,
	})
}

func candidates(ctx context.Context, o app.CandidatesOptions) error {
	logflags.Install(ctrl.LoggerFrom(ctx))
	objs, err := manifest.ReadFiles(o.Resources...)
	if err != nil {
		return app.UsageError{Err: err}
	}
	return route.PrintCandidates(os.Stdout, objs, o.Image, o.PodLabels, o.NamespaceLabels, o.ClusterID)
}
