// Package kuikenv runs kuik's webhook in-process against a testenv control plane, set up the
// way the chart sets it up: the chart is rendered (charts.Render), its ServiceAccounts, RBAC,
// webhook configurations and admission policy are applied, and the webhook runs under its
// ServiceAccount identity (impersonated, so the chart's RBAC and policy really apply) with the
// flags of the chart's Deployment. The chart's own pods, on a real node, are e2e/node's. Only the webhook
// configurations change: they call https://127.0.0.1:<port> with the control plane's CA, as
// envtest's WebhookInstallOptions would.
package kuikenv

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/webhook"
)

// Components, as the chart's app.kubernetes.io/component label names them.
const (
	ComponentWebhook = "webhook"
	ComponentSyncer  = "secret-syncer"
)

// ReleaseName is the Helm release the chart is rendered as.
const ReleaseName = "kuik"

const componentLabel = "app.kubernetes.io/component"

// Chart is kuik's chart rendered for a release in Namespace (the cluster resource namespace).
type Chart struct {
	Namespace string
	Rendered  *charts.Rendered
}

// Render renders the chart with its default values.
func Render(namespace string) (*Chart, error) { return RenderValues(namespace, nil) }

// RenderValues renders the chart with these values, as a -f values file gives them.
func RenderValues(namespace string, values map[string]any) (*Chart, error) {
	r, err := charts.Render(charts.Release{Name: ReleaseName, Namespace: namespace, Values: values})
	if err != nil {
		return nil, err
	}
	return &Chart{Namespace: namespace, Rendered: r}, nil
}

// CRDs are the chart's CustomResourceDefinitions (copies).
func (c *Chart) CRDs() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range c.Rendered.CRDs {
		out = append(out, o.DeepCopy())
	}
	return out
}

// ServiceAccount is the name of a component's ServiceAccount.
func (c *Chart) ServiceAccount(component string) (string, error) {
	for _, o := range c.Rendered.OfKind("ServiceAccount") {
		if o.GetLabels()[componentLabel] == component {
			return o.GetName(), nil
		}
	}
	return "", fmt.Errorf("the chart renders no ServiceAccount for component %s", component)
}

// Identity is a component's ServiceAccount and RBAC (copies).
func (c *Chart) Identity(component string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range c.Rendered.Objects {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if o.GetLabels()[componentLabel] == component {
				out = append(out, o.DeepCopy())
			}
		}
	}
	return out
}

// AdmissionPolicy is the chart's ValidatingAdmissionPolicy and its binding (copies).
func (c *Chart) AdmissionPolicy() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range c.Rendered.Objects {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			out = append(out, o.DeepCopy())
		}
	}
	return out
}

// WebhookConfigurations are the chart's mutating and validating webhook configurations, each
// webhook calling https://127.0.0.1:port<path> with caPEM as its CA bundle instead of the
// chart's Service; everything else is as the chart wrote it.
func (c *Chart) WebhookConfigurations(port int, caPEM []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, o := range c.Rendered.Objects {
		switch o.GetKind() {
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			o = o.DeepCopy()
			if err := pointAtLocal(o, port, caPEM); err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
			out = append(out, o)
		}
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("the chart renders %d webhook configurations, want 2", len(out))
	}
	return out, nil
}

func pointAtLocal(o *unstructured.Unstructured, port int, caPEM []byte) error {
	hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
	if err != nil {
		return err
	}
	for i := range hooks {
		h, ok := hooks[i].(map[string]any)
		if !ok {
			return errors.New("a webhook is not an object")
		}
		cc, _ := h["clientConfig"].(map[string]any)
		svc, _ := cc["service"].(map[string]any)
		path, _ := svc["path"].(string)
		if path == "" {
			return errors.New("a webhook has no clientConfig.service.path")
		}
		cc["url"] = "https://127.0.0.1:" + strconv.Itoa(port) + path
		delete(cc, "service")
		cc["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
	}
	return unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
}

// Args are the arguments of the first container of a component's Deployment, flag name
// (without dashes) to value.
func (c *Chart) Args(component string) (map[string]string, error) {
	for _, o := range c.Rendered.OfKind("Deployment") {
		if o.GetLabels()[componentLabel] != component {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) == 0 {
			return nil, fmt.Errorf("deployment %s: no containers: %w", o.GetName(), err)
		}
		args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		if err != nil {
			return nil, fmt.Errorf("deployment %s: %w", o.GetName(), err)
		}
		out := map[string]string{}
		for _, a := range args {
			k, v, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			out[k] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("the chart renders no Deployment for component %s", component)
}

// FreeAddr is a 127.0.0.1:port nothing listens on right now.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// FreePort is a port of 127.0.0.1 nothing listens on right now.
func FreePort() (int, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Process is a kuik process running in a goroutine.
type Process struct {
	// HealthAddr serves /healthz and /readyz.
	HealthAddr string
	cancel     context.CancelFunc
	done       chan error
	cleanup    func()
}

// Stop cancels the process and waits for it to return, at most timeout.
func (p *Process) Stop(timeout time.Duration) error {
	p.cancel()
	defer func() {
		if p.cleanup != nil {
			p.cleanup()
		}
	}()
	select {
	case err := <-p.done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("did not stop within %s", timeout)
	}
}

func (p *Process) waitReady(ctx context.Context, what string) error {
	last := errors.New("no answer yet")
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			return false, fmt.Errorf("%s exited: %w", what, err)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HealthAddr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		last = fmt.Errorf("readyz: %s", resp.Status)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s never turned ready (last: %w): %w", what, last, err)
	}
	return nil
}

// StartWebhook runs the webhook under the chart's webhook ServiceAccount, serving on
// 127.0.0.1:port with a certificate of the control plane's CA, and waits until it is ready (its
// informers need the chart's RBAC: apply Identity(ComponentWebhook) first). Zero fields of cfg
// take the chart's values (probe timeout, cache TTL) or the test defaults (no metrics).
func StartWebhook(ctx context.Context, cp *testenv.ControlPlane, c *Chart, port int, cfg webhook.Config) (*Process, error) {
	sa, err := c.ServiceAccount(ComponentWebhook)
	if err != nil {
		return nil, err
	}
	args, err := c.Args(ComponentWebhook)
	if err != nil {
		return nil, err
	}
	if cfg.ProbeTimeout == 0 {
		if cfg.ProbeTimeout, err = time.ParseDuration(args["probe-timeout"]); err != nil {
			return nil, fmt.Errorf("the chart's --probe-timeout: %w", err)
		}
	}
	if cfg.CacheTTL == 0 {
		if cfg.CacheTTL, err = time.ParseDuration(args["cache-ttl"]); err != nil {
			return nil, fmt.Errorf("the chart's --cache-ttl: %w", err)
		}
	}
	if cfg.RestConfig == nil {
		cfg.RestConfig = cp.ConfigAsServiceAccount(c.Namespace, sa)
	}
	if cfg.ClusterResourceNamespace == "" {
		cfg.ClusterResourceNamespace = c.Namespace
	}
	if cfg.MetricsBindAddress == "" {
		cfg.MetricsBindAddress = "0"
	}
	if cfg.HealthProbeBindAddress == "" {
		if cfg.HealthProbeBindAddress, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	cfg.Host, cfg.Port = "127.0.0.1", port
	certDir, err := os.MkdirTemp("", "kuik-webhook-certs-")
	if err != nil {
		return nil, err
	}
	pair, err := cp.CA.ServingPair()
	if err != nil {
		return nil, err
	}
	if err := pair.WriteFiles(certDir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	cfg.CertDir = certDir

	ctx, cancel := context.WithCancel(ctx)
	p := &Process{HealthAddr: cfg.HealthProbeBindAddress, cancel: cancel, done: make(chan error, 1), cleanup: func() { _ = os.RemoveAll(certDir) }}
	go func() { p.done <- webhook.Run(ctx, cfg) }()
	if err := p.waitReady(ctx, "webhook"); err != nil {
		_ = p.Stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}
