package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/admitscope"
	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// stack is the control plane with its registries and both webhooks: what the rounds share.
type stack struct {
	cp    *testenv.ControlPlane
	admin *rest.Config
	cs    kubernetes.Interface
	cl    client.Client
	// reg is up, silent accepts and never answers, nothing listens on down.
	reg    *testutil.Registry
	silent *testutil.SilentRegistry
	down   string
	wh     *webhookProcess // kuik's
	noop   *webhookProcess
	same   *webhookProcess // the same-patch webhook, started by samePatch
	chart  *kuikenv.Chart
	// askedPatches is the patch kuik answered for each scenario's pod (samePatch).
	askedPatches map[int][]byte
	// configs is the MutatingWebhookConfiguration that calls each installed mode.
	configs map[mode]*unstructured.Unstructured
	// sentinel is a client whose last warning from the API server warned holds.
	sentinel kubernetes.Interface
	warned   *atomic.Value
	procs    map[mode]*webhookProcess
	current  mode
}

// newStack starts the registries, kuik's webhook (a subprocess, as the chart installs it) and
// the no-op webhook (this program, behind the same webhook configuration).
func newStack(ctx context.Context, cp *testenv.ControlPlane, tb *benchutil.TB) (_ *stack, err error) {
	s := &stack{cp: cp, admin: benchutil.Unthrottled(cp), askedPatches: map[int][]byte{}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if s.cs, err = kubernetes.NewForConfig(s.admin); err != nil {
		return nil, err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return nil, err
	}
	if s.cl, err = client.New(s.admin, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if err := s.registries(tb); err != nil {
		return nil, err
	}
	if err := s.webhooks(ctx); err != nil {
		return nil, err
	}
	s.sentinel, s.warned, err = sentinelClient(cp)
	return s, err
}

func (s *stack) stop() {
	if s.same != nil {
		s.same.stop()
	}
	if s.noop != nil {
		s.noop.stop()
	}
	if s.wh != nil {
		s.wh.stop()
	}
}

// registries starts one registry up (go-containerregistry's), one that accepts and never
// answers, and picks a port nothing listens on.
func (s *stack) registries(tb *benchutil.TB) (err error) {
	s.reg = testutil.NewRegistry(tb, "", "")
	s.reg.Push(tb, "acme/up:v1")
	s.reg.Push(tb, "acme/app:v1")
	for r := range *flagRounds + 1 {
		s.reg.Push(tb, "acme/hang:r"+strconv.Itoa(r))
	}
	s.silent = testutil.NewSilentRegistry(tb)
	s.down, err = kuikenv.FreeAddr()
	return err
}

// webhooks installs kuik as the chart does (CRDs, identity, admission policy, webhook
// configurations), starts its webhook and the no-op one, and keeps both configurations.
func (s *stack) webhooks(ctx context.Context) error {
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return err
	}
	s.chart = chart
	port, err := kuikenv.FreePort()
	if err != nil {
		return err
	}
	hooks, err := chart.WebhookConfigurations(port, s.cp.CA.PEM)
	if err != nil {
		return err
	}
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": crns}}}
	objs := append([]*unstructured.Unstructured{nsObj}, chart.CRDs()...)
	objs = append(objs, chart.Identity(kuikenv.ComponentWebhook)...)
	objs = append(objs, chart.AdmissionPolicy()...)
	if err := testenv.Apply(ctx, s.admin, append(objs, hooks...)); err != nil {
		return err
	}
	if s.wh, err = startWebhook(ctx, s.cp, chart, port); err != nil {
		return err
	}
	fmt.Printf("webhook subprocess (pid %d) ready; probe timeout %s, cache TTL %s (the chart's)\n", s.wh.cmd.Process.Pid, s.wh.args["probe-timeout"], s.wh.args["cache-ttl"])
	if s.noop, err = startNoop(ctx, s.wh.certDir, s.cp.CA.PEM, ""); err != nil {
		return err
	}
	noopHooks, err := chart.WebhookConfigurations(s.noop.port, s.cp.CA.PEM)
	if err != nil {
		return err
	}
	s.configs = map[mode]*unstructured.Unstructured{modeKuik: mutatingOf(hooks), modeNoop: mutatingOf(noopHooks)}
	s.procs = map[mode]*webhookProcess{modeNone: s.wh, modeNoop: s.noop, modeKuik: s.wh}
	s.current = modeKuik
	return nil
}

func mutatingOf(hooks []*unstructured.Unstructured) *unstructured.Unstructured {
	var m *unstructured.Unstructured
	for _, h := range hooks {
		if h.GetKind() == "MutatingWebhookConfiguration" {
			m = h
		}
	}
	return m
}

// routingResources creates the scenarios' ImageAlternatives, through the validating webhook,
// and waits until the webhook indexed them.
func (s *stack) routingResources(ctx context.Context) error {
	reg, down, silent := s.reg.Host, s.down, s.silent.Host
	ias := []v1alpha1.ImageAlternative{
		testutil.NewImageAlternative("up").Repository(reg + "/acme/up").Insecure().Repository(down + "/acme/up").Insecure().Build(),
		testutil.NewImageAlternative("rewritten").Repository(down + "/acme/app").Insecure().Repository(reg + "/acme/app").Insecure().Build(),
		testutil.NewImageAlternative("hang").Repository(silent + "/acme/hang").Insecure().Repository(reg + "/acme/hang").Insecure().Build(),
	}
	for i := range ias {
		if err := s.cl.Create(ctx, &ias[i]); err != nil {
			return fmt.Errorf("creating ImageAlternative %s: %w", ias[i].Name, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := s.wh.scrape(ctx)
		return err == nil && m["kuik_webhook_routing_resources"] == float64(len(ias)), nil
	})
	if err != nil {
		return fmt.Errorf("the webhook never indexed the %d routing resources: %w", len(ias), err)
	}
	if *flagMatchConditions {
		return s.matchConditions(ctx, admitscope.Conditions(ias, nil))
	}
	return nil
}

// matchConditions puts res's conditions on kuik's pod webhook, as the syncer's leader
// would, and applies the configuration again if it is the one the API server calls.
func (s *stack) matchConditions(ctx context.Context, res admitscope.Result) error {
	if len(res.Conditions) == 0 {
		return fmt.Errorf("the routing resources give no matchConditions (%s: %s)", res.Reason, res.Message)
	}
	cfg := s.configs[modeKuik]
	hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
	found := false
	for _, h := range hooks {
		hook := h.(map[string]any)
		if hook["name"] != admitscope.WebhookName {
			continue
		}
		var mcs []any
		for _, mc := range res.Conditions {
			mcs = append(mcs, map[string]any{"name": mc.Name, "expression": mc.Expression})
		}
		hook["matchConditions"] = mcs
		found = true
	}
	if !found {
		return fmt.Errorf("no webhook %s in %s", admitscope.WebhookName, cfg.GetName())
	}
	if err := unstructured.SetNestedSlice(cfg.Object, hooks, "webhooks"); err != nil {
		return err
	}
	fmt.Printf("kuik's pod webhook has matchConditions (%s, %d bytes, up to %d containers a pod)\n", res.Reason, res.ExpressionBytes, res.MaxContainers)
	if s.current == modeKuik {
		return testenv.Apply(ctx, s.admin, []*unstructured.Unstructured{cfg.DeepCopy()})
	}
	return nil
}

// namespaces creates one namespace per scenario and the sentinel's.
func (s *stack) namespaces(ctx context.Context, scenarios int) error {
	for i := range scenarios {
		if err := benchutil.CreateNamespace(ctx, s.cs, nsName(i), nil); err != nil {
			return err
		}
	}
	return benchutil.CreateNamespace(ctx, s.cs, "sentinel", nil)
}

// setMode makes the API server call the webhook of mode m, and waits until it does.
func (s *stack) setMode(ctx context.Context, m mode) error {
	if m == s.current {
		return nil
	}
	if err := setMode(ctx, s.cs, s.admin, s.configs, m); err != nil {
		return err
	}
	if err := waitMode(ctx, s.sentinel, s.warned, s.down, s.reg.Host, m); err != nil {
		return err
	}
	s.current = m
	return nil
}
