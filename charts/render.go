// Package charts renders kuik's Helm chart (charts/kuik) with the Helm SDK, exactly as `helm
// template` would, for the tests that check it and the tools that install it.
package charts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// KubeVersion is the Kubernetes version charts are rendered for (the one the tests run).
const KubeVersion = "v1.37.2"

// Dir is the directory of the kuik chart.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("charts: cannot locate the chart directory")
	}
	return filepath.Join(filepath.Dir(file), "kuik")
}

// Load loads the kuik chart from Dir.
func Load() (*chart.Chart, error) {
	c, err := loader.Load(Dir())
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", Dir(), err)
	}
	return c, nil
}

// Release names a release to render.
type Release struct {
	Name      string
	Namespace string
	// Values are the user-supplied values, as a -f values file would give them.
	Values map[string]any
	// SkipSchemaValidation renders without values.schema.json, as `helm template
	// --skip-schema-validation` does (to test the templates' own refusals).
	SkipSchemaValidation bool
	// KubeVersion is the cluster version the chart is rendered for; empty is [KubeVersion].
	KubeVersion string
}

// Rendered is a rendered chart.
type Rendered struct {
	// Manifest is the rendered templates, as `helm template` prints them (CRDs excluded).
	Manifest string
	// Objects are the objects of Manifest, in order.
	Objects []*unstructured.Unstructured
	// CRDs are the objects of the chart's crds/ folder.
	CRDs []*unstructured.Unstructured
	// Notes is the rendered NOTES.txt.
	Notes string
}

// Render renders the chart client-side (like `helm template`: lookup finds nothing) with
// schema validation.
func Render(rel Release) (*Rendered, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	version := rel.KubeVersion
	if version == "" {
		version = KubeVersion
	}
	kv, err := chartutil.ParseKubeVersion(version)
	if err != nil {
		return nil, fmt.Errorf("parsing kube version: %w", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly = true
	install.DryRun = true
	install.Replace = true
	install.ReleaseName = rel.Name
	install.Namespace = rel.Namespace
	install.KubeVersion = kv
	install.SkipSchemaValidation = rel.SkipSchemaValidation
	vals := rel.Values
	if vals == nil {
		vals = map[string]any{}
	}
	r, err := install.Run(c, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering chart: %w", err)
	}
	out := &Rendered{Manifest: r.Manifest, Notes: r.Info.Notes}
	if out.Objects, err = Decode([]byte(r.Manifest)); err != nil {
		return nil, err
	}
	for _, crd := range c.CRDObjects() {
		objs, err := Decode(crd.File.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", crd.Filename, err)
		}
		out.CRDs = append(out.CRDs, objs...)
	}
	return out, nil
}

// Find returns the rendered object of that kind and name, or nil.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns the rendered objects of that kind, in order.
func (r *Rendered) OfKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// Lint runs `helm lint` on the chart with those values and returns its messages of severity
// warning or worse (helm lint fails on errors; warnings are kept too, kuik's chart has none).
func Lint(namespace string, values map[string]any) []string {
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return []string{err.Error()}
	}
	linter := lint.AllWithKubeVersion(Dir(), values, namespace, kv)
	var msgs []string
	for _, m := range linter.Messages {
		if m.Severity >= support.WarningSev {
			msgs = append(msgs, m.Error())
		}
	}
	return msgs
}

// PolicyPlaceholders are the strings of policies/*.yaml that the chart replaces.
var PolicyPlaceholders = struct{ Name, Namespace, SyncerServiceAccount, RecreateOwners, WebhookConfiguration string }{
	Name:                 "__KUIK_POLICY_NAME__",
	Namespace:            "__KUIK_NAMESPACE__",
	SyncerServiceAccount: "__KUIK_SYNCER_SERVICE_ACCOUNT__",
	RecreateOwners:       "__KUIK_RECREATE_OWNERS__",
	WebhookConfiguration: "__KUIK_WEBHOOK_CONFIGURATION__",
}

// DefaultRecreateOwners is what the chart puts in place of PolicyPlaceholders.RecreateOwners by
// default: syncer.recreateStuckPods.owners as a JSON list (a CEL list literal).
const DefaultRecreateOwners = `["ReplicaSet.apps","StatefulSet.apps","DaemonSet.apps"]`

// PolicyValues are what the chart puts in place of PolicyPlaceholders.
type PolicyValues struct {
	// Name names the policy and its binding: <fullname>-secret-writes.
	Name                 string
	Namespace            string
	SyncerServiceAccount string
	// RecreateOwners is the JSON list of the owner kinds of pod-deletes.yaml (DefaultRecreateOwners).
	RecreateOwners string
	// WebhookConfiguration is the chart's MutatingWebhookConfiguration, in webhook-writes.yaml:
	// <fullname>-webhook.
	WebhookConfiguration string
}

// SubstitutePolicy does to a policies/*.yaml file what the chart does to its copy.
func SubstitutePolicy(policy []byte, v PolicyValues) []byte {
	return []byte(strings.NewReplacer(
		PolicyPlaceholders.Name, v.Name,
		PolicyPlaceholders.Namespace, v.Namespace,
		PolicyPlaceholders.SyncerServiceAccount, v.SyncerServiceAccount,
		PolicyPlaceholders.RecreateOwners, v.RecreateOwners,
		PolicyPlaceholders.WebhookConfiguration, v.WebhookConfiguration,
	).Replace(string(policy)))
}
