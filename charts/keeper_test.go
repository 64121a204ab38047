package charts_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/enix/kuik/charts"
	keeperapp "github.com/enix/kuik/cmd/keeper/app"
	"github.com/enix/kuik/internal/ctrlkit"
	"github.com/enix/kuik/internal/keeper"
)

var keeperOn = map[string]any{"keeper": map[string]any{"enabled": true}}

// keeperDeployment returns the keeper's Deployment of r.
func keeperDeployment(t *testing.T, r *charts.Rendered) *appsv1.Deployment {
	t.Helper()
	return convert[appsv1.Deployment](t, r.Find("Deployment", "kuik-keeper"))
}

// keeperOptions parses the keeper Deployment's args with the keeper's own command.
func keeperOptions(t *testing.T, d *appsv1.Deployment) keeperapp.Options {
	t.Helper()
	var got keeperapp.Options
	cmd := keeperapp.NewCommand(func(_ context.Context, o keeperapp.Options) error { got = o; return nil })
	cmd.SetArgs(d.Spec.Template.Spec.Containers[0].Args)
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("keeper args %v: %v", d.Spec.Template.Spec.Containers[0].Args, err)
	}
	return got
}

// Off by default: no object of the keeper, and no ServiceMonitor for it.
func TestKeeperOffByDefault(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, "monitoring on": {"metrics": monitoringOn["metrics"]}} {
		t.Run(name, func(t *testing.T) {
			for _, o := range render(t, values).Objects {
				if o.GetLabels()["app.kubernetes.io/component"] == "keeper" || strings.Contains(o.GetName(), "keeper") {
					t.Errorf("%s %s rendered with keeper.enabled false", o.GetKind(), o.GetName())
				}
			}
		})
	}
}

func TestKeeperObjects(t *testing.T) {
	r := render(t, keeperOn)
	var got []string
	for _, o := range r.Objects {
		if o.GetLabels()["app.kubernetes.io/component"] == "keeper" {
			got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
		}
	}
	slices.Sort(got)
	want := []string{
		"ClusterRole//kuik-keeper", "ClusterRoleBinding//kuik-keeper",
		"Deployment/" + ns + "/kuik-keeper",
		"Role/" + ns + "/kuik-keeper", "RoleBinding/" + ns + "/kuik-keeper",
		"Service/" + ns + "/kuik-keeper-metrics", "ServiceAccount/" + ns + "/kuik-keeper",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keeper objects (-want +got):\n%s", diff)
	}
	if !strings.Contains(r.Notes, "The keeper runs as system:serviceaccount:"+ns+":kuik-keeper") {
		t.Errorf("NOTES do not name the keeper:\n%s", r.Notes)
	}
	if strings.Contains(render(t, nil).Notes, "keeper") {
		t.Error("NOTES name the keeper although it is off")
	}
	if msgs := charts.Lint(ns, mergeValues(keeperOn, valueSets["everything on"])); len(msgs) != 0 {
		t.Errorf("helm lint with the keeper:\n%s", strings.Join(msgs, "\n"))
	}
}

// The keeper's rights, exactly: reads of pods, namespaces, workload templates and routing
// resources; ImageMirror status writes; events; and in the release namespace only, Secret reads,
// its inventory ConfigMaps and its Lease. No pod delete, no Secret write, nothing on Secrets
// outside the release namespace.
func TestKeeperRights(t *testing.T) {
	r := render(t, keeperOn)
	cluster, namespaced := rulesOf(t, r, "kuik-keeper")
	read := []string{"get", "list", "watch"}
	wantCluster := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "statefulsets", "daemonsets"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: read},
		{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagemirrors", "imagealternatives"}, Verbs: read},
		{APIGroups: []string{"kuik.enix.io"}, Resources: []string{"imagemirrors/status"}, Verbs: []string{"patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if diff := cmp.Diff(wantCluster, cluster); diff != "" {
		t.Errorf("the keeper's cluster-wide rules (-want +got):\n%s", diff)
	}
	wantNamespaced := map[string][]rbacv1.PolicyRule{ns: {
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}}
	if diff := cmp.Diff(wantNamespaced, namespaced); diff != "" {
		t.Errorf("the keeper's namespaced rules (-want +got):\n%s", diff)
	}
	// The same, said as the issue says it, through the evaluation the API server makes.
	for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
		if allows(cluster, verb, "", "secrets") {
			t.Errorf("the keeper may %s Secrets cluster-wide", verb)
		}
		if verb != "get" && verb != "list" && verb != "watch" && allows(namespaced[ns], verb, "", "secrets") {
			t.Errorf("the keeper may %s Secrets in %s", verb, ns)
		}
	}
	for _, verb := range []string{"delete", "deletecollection", "create", "update", "patch"} {
		if allows(cluster, verb, "", "pods") || allows(cluster, verb, "", "pods/eviction") {
			t.Errorf("the keeper may %s pods", verb)
		}
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		if allows(cluster, verb, "kuik.enix.io", "imagemirrors") || allows(cluster, verb, "kuik.enix.io", "imagealternatives") {
			t.Errorf("the keeper may %s routing resources (only ImageMirror status)", verb)
		}
	}
	// Another component's rights are unchanged by the keeper.
	syncerOff, _ := rulesOf(t, render(t, nil), "kuik-secret-syncer")
	syncerOn, _ := rulesOf(t, r, "kuik-secret-syncer")
	if diff := cmp.Diff(syncerOff, syncerOn); diff != "" {
		t.Errorf("keeper.enabled changes the secret-syncer's rules (-off +on):\n%s", diff)
	}
}

// The keeper's args parse with its own command, and the chart's defaults are its Go defaults.
func TestKeeperArgsParseWithTheBinary(t *testing.T) {
	got := keeperOptions(t, keeperDeployment(t, render(t, keeperOn)))
	want := keeper.Options{
		Namespace: ns, Workers: keeper.DefaultWorkers, StallTimeout: keeper.DefaultStallTimeout,
		PlanInterval: keeper.DefaultPlanInterval, SelfHealInterval: keeper.DefaultSelfHealInterval,
		SweepInterval: keeper.DefaultSweepInterval, StatusInterval: keeper.DefaultStatusInterval,
		ManagerOptions: ctrlkit.ManagerOptions{
			MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081",
			LeaderElection: true, LeaderElectionID: keeper.DefaultLeaderElectionID,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		},
	}
	want.Pacer.Rate, want.Pacer.Burst, want.Pacer.Reserve = keeperapp.DefaultPacerRate, keeperapp.DefaultPacerBurst, keeperapp.DefaultPacerReserve
	if diff := cmp.Diff(want, got.Options); diff != "" {
		t.Errorf("keeper options from the default values (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the chart's keeper options are invalid: %v", err)
	}

	got = keeperOptions(t, keeperDeployment(t, render(t, map[string]any{
		"clusterID": "eu-west-1",
		"metrics":   map[string]any{"port": 9090},
		"keeper": map[string]any{"enabled": true, "replicaCount": 2, "workers": 8, "stallTimeout": "45s", "maxImageSize": "20Gi",
			"pacer": map[string]any{"rate": 2.5, "burst": 5, "reserve": 0.25}, "extraArgs": []any{"--sweep-interval=6h"}},
	})))
	if got.ClusterID != "eu-west-1" || got.Workers != 8 || got.StallTimeout != 45*time.Second || got.MaxImageSize != 20<<30 ||
		got.Pacer.Rate != 2.5 || got.Pacer.Burst != 5 || got.Pacer.Reserve != 0.25 || got.SweepInterval != 6*time.Hour ||
		got.MetricsBindAddress != ":9090" || !got.LeaderElection {
		t.Errorf("keeper options from the values = %+v", got.Options)
	}
}

// --cluster-id is passed only when clusterID is set.
func TestKeeperClusterID(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
	}{
		"unset": {keeperOn, nil},
		"empty": {mergeValues(keeperOn, map[string]any{"clusterID": ""}), nil},
		"set":   {mergeValues(keeperOn, map[string]any{"clusterID": "prod-a"}), []string{"--cluster-id=prod-a"}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, a := range keeperDeployment(t, render(t, tc.values)).Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--cluster-id") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("--cluster-id args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeeperPod(t *testing.T) {
	r := render(t, keeperOn)
	d := keeperDeployment(t, r)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if *d.Spec.Replicas != 1 || spec.ServiceAccountName != "kuik-keeper" || c.Image != "ghcr.io/enix/kuik-keeper:0.1.0" {
		t.Errorf("replicas %d, ServiceAccount %s, image %s", *d.Spec.Replicas, spec.ServiceAccountName, c.Image)
	}
	evaluator, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range evaluator.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &d.Spec.Template.ObjectMeta, &spec) {
		if !res.Allowed {
			t.Errorf("not restricted: %s: %s", res.ForbiddenReason, res.ForbiddenDetail)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the keeper's root filesystem is writable")
	}
	if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env = %+v, want POD_NAMESPACE from metadata.namespace", c.Env)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "health" {
			t.Fatalf("probe %+v, want HTTP on the health port", p)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" && p.ContainerPort == 8081 }) {
		t.Errorf("ports %+v lack health on 8081", c.Ports)
	}
	// Blobs are streamed: the limit is sized for the watched objects (target RSS < 150 MiB).
	if l := c.Resources.Limits[corev1.ResourceMemory]; l.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("memory limit %s, want 256Mi", l.String())
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Error("no memory request")
	}
	svc := convert[corev1.Service](t, r.Find("Service", "kuik-keeper-metrics"))
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || svc.Labels["kuik.enix.io/metrics"] != "true" {
		t.Errorf("the metrics Service does not select the keeper pods: %v", svc.Spec.Selector)
	}
	for _, other := range []string{"kuik-webhook", "kuik-secret-syncer"} {
		o := convert[appsv1.Deployment](t, r.Find("Deployment", other))
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(o.Spec.Template.Labels)) {
			t.Errorf("the keeper's metrics Service selects %s pods", other)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v", svc.Spec.Ports)
	}
}

// The extra CAs are mounted into the keeper as into the syncer, and a new PEM rolls it.
func TestKeeperCABundle(t *testing.T) {
	pem := newCAPEM(t)
	r := render(t, mergeValues(keeperOn, map[string]any{"caBundle": map[string]any{"pem": pem}}))
	k, s := keeperDeployment(t, r), convert[appsv1.Deployment](t, r.Find("Deployment", "kuik-secret-syncer"))
	if diff := cmp.Diff(caMounts(s), caMounts(k)); diff != "" || len(caMounts(k)) != 1 {
		t.Errorf("keeper CA mounts (-syncer +keeper):\n%s", diff)
	}
	if diff := cmp.Diff(caVolume(s), caVolume(k)); diff != "" || caVolume(k) == nil {
		t.Errorf("keeper CA volume (-syncer +keeper):\n%s", diff)
	}
	other := keeperDeployment(t, render(t, mergeValues(keeperOn, map[string]any{"caBundle": map[string]any{"pem": newCAPEM(t)}})))
	if k.Spec.Template.Annotations["kuik.enix.io/ca-bundle-checksum"] == "" ||
		k.Spec.Template.Annotations["kuik.enix.io/ca-bundle-checksum"] == other.Spec.Template.Annotations["kuik.enix.io/ca-bundle-checksum"] {
		t.Error("a new caBundle.pem does not roll the keeper")
	}
	if d := keeperDeployment(t, render(t, keeperOn)); len(d.Spec.Template.Spec.Volumes) != 0 || len(d.Spec.Template.Spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("volumes without a CA bundle: %+v", d.Spec.Template.Spec.Volumes)
	}
}

func TestKeeperServiceMonitor(t *testing.T) {
	r := render(t, mergeValues(keeperOn, monitoringOn))
	sm := r.Find("ServiceMonitor", "kuik-keeper")
	if sm == nil {
		t.Fatal("no ServiceMonitor for the keeper")
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	var matched []string
	for _, svc := range r.OfKind("Service") {
		if labels.SelectorFromSet(sel).Matches(labels.Set(svc.GetLabels())) {
			matched = append(matched, svc.GetName())
		}
	}
	if diff := cmp.Diff([]string{"kuik-keeper-metrics"}, matched); diff != "" {
		t.Errorf("the keeper's ServiceMonitor selects (-want +got):\n%s", diff)
	}
}

func TestKeeperRefusedValues(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"several keepers without leader election": {"keeper": map[string]any{"enabled": true, "replicaCount": 2, "leaderElection": false}},
		"no workers":                   {"keeper": map[string]any{"enabled": true, "workers": 0}},
		"a zero stall timeout":         {"keeper": map[string]any{"enabled": true, "stallTimeout": "0s"}},
		"a size that is not one":       {"keeper": map[string]any{"enabled": true, "maxImageSize": "20 GB"}},
		"a reserve of one":             {"keeper": map[string]any{"enabled": true, "pacer": map[string]any{"reserve": 1}}},
		"a zero rate":                  {"keeper": map[string]any{"enabled": true, "pacer": map[string]any{"rate": 0}}},
		"a cluster ID not a DNS label": {"clusterID": "EU_1"},
		"a cluster ID too long":        {"clusterID": strings.Repeat("a", 33)},
		"a misspelt keeper key":        {"keeper": map[string]any{"enable": true}},
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(values)
			if err == nil {
				t.Fatal("rendered, want refused")
			}
			t.Log(err)
		})
	}
}

// The keeper's alerts render only with the keeper, and its copy alert counts failures only.
func TestKeeperAlertsOnlyWithTheKeeper(t *testing.T) {
	keeperAlerts := []string{"KuikKeeperCopiesFailing", "KuikKeeperRegistryFrozen", "KuikKeeperGarbageCollectionHeld", "KuikKeeperKeptTagsDisappearing", "KuikKeeperDown"}
	alerts := func(values map[string]any) map[string]string {
		t.Helper()
		rules, _ := ruleExprs(t, render(t, values))
		out := map[string]string{}
		for _, e := range rules {
			out[strings.TrimPrefix(e.where, "alert ")] = e.expr
		}
		return out
	}
	off := alerts(map[string]any{"metrics": monitoringOn["metrics"]})
	for _, a := range keeperAlerts {
		if _, ok := off[a]; ok {
			t.Errorf("%s rendered without the keeper", a)
		}
	}
	on := alerts(monitoringOn)
	for _, a := range keeperAlerts {
		if !strings.Contains(on[a], `job="kuik-keeper-metrics",namespace="`+ns+`"`) {
			t.Errorf("%s = %q, not on the keeper's series", a, on[a])
		}
	}
	if !strings.Contains(on["KuikKeeperCopiesFailing"], `result!~"AlreadyPresent|Tagged|Copied"`) {
		t.Errorf("KuikKeeperCopiesFailing counts successes: %s", on["KuikKeeperCopiesFailing"])
	}
	custom := alerts(mergeValues(keeperOn, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{
		"enabled": true, "keeperSelector": `job="keeper",cluster="b"`,
		"alerts": map[string]any{"keeperDown": map[string]any{"enabled": false}},
	}}}))
	if _, ok := custom["KuikKeeperDown"]; ok {
		t.Error("KuikKeeperDown rendered although disabled")
	}
	if !strings.Contains(custom["KuikKeeperRegistryFrozen"], `{job="keeper",cluster="b"}`) {
		t.Errorf("keeperSelector not used: %s", custom["KuikKeeperRegistryFrozen"])
	}
}
