package main

import (
	"context"
	"fmt"
	"time"

	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
)

// kuik is kuik's webhook and secret-syncer, in-process, as the chart installs them.
type kuik struct {
	timeout time.Duration // the mutating webhook's timeoutSeconds
	budget  time.Duration // the webhook's admission budget
	stop    func()
}

// startKuik applies the chart's identities, admission policy and webhook configurations, runs
// the webhook and the syncer under their identities and waits until both are ready.
func (w *world) startKuik(ctx context.Context, cp *testenv.ControlPlane) (_ *kuik, err error) {
	k := &kuik{}
	var stops []func()
	k.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			k.stop()
		}
	}()
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return nil, err
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		return nil, err
	}
	hooks, err := chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		return nil, err
	}
	if k.timeout, err = mutatingTimeout(hooks); err != nil {
		return nil, err
	}
	objs := append(chart.Identity(kuikenv.ComponentWebhook), chart.Identity(kuikenv.ComponentSyncer)...)
	objs = append(objs, chart.AdmissionPolicy()...)
	if err := testenv.Apply(ctx, cp.Config(), append(objs, hooks...)); err != nil {
		return nil, err
	}
	wh, err := kuikenv.StartWebhook(ctx, cp, chart, port, webhook.Config{})
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { _ = wh.Stop(10 * time.Second) })
	w.webhookHealth = wh.HealthAddr
	args, err := chart.Args(kuikenv.ComponentWebhook)
	if err != nil {
		return nil, err
	}
	probeTimeout, err := time.ParseDuration(args["probe-timeout"])
	if err != nil {
		return nil, err
	}
	k.budget = webhook.AdmissionBudget(probeTimeout)
	fmt.Printf("webhook ready: probe timeout %s, admission budget %s, the API server's timeoutSeconds %s\n", probeTimeout, k.budget, k.timeout)

	sa, err := chart.ServiceAccount(kuikenv.ComponentSyncer)
	if err != nil {
		return nil, err
	}
	if w.syncerHealth, err = kuikenv.FreeAddr(); err != nil {
		return nil, err
	}
	sctx, stopSyncer := context.WithCancel(ctx)
	stops = append(stops, stopSyncer)
	w.syncerDone = make(chan error, 1)
	go func() {
		w.syncerDone <- syncer.Run(sctx, cp.ConfigAsServiceAccount(crns, sa), syncer.Options{
			Config:         syncer.Config{ClusterResourceNamespace: crns},
			ManagerOptions: ctrlkit.ManagerOptions{MetricsBindAddress: "0", HealthProbeBindAddress: w.syncerHealth},
		})
	}()
	return k, w.waitReady(ctx)
}
