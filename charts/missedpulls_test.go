package charts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The secret-syncer's rights and flags for missed pulls: nothing by default (docs/security.md,
// "RBAC per feature value", says what each value grants); events and pod reads with
// syncer.missedPulls.enabled; evictions (create on pods/eviction, never delete on pods) only with
// syncer.recreateStuckPods.enabled too (with the pod-deletes policies, see
// TestRenderedPolicyIsPoliciesDir), get on jobs only with its jobs opt-in.
func TestMissedPullsRightsAndFlags(t *testing.T) {
	verbs := func(rules []rbacv1.PolicyRule, group, resource string) []string {
		var out []string
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if allows(rules, v, group, resource) {
				out = append(out, v)
			}
		}
		return out
	}
	reportArgs := []string{"--missed-pulls=true", "--missed-pulls-exclude-namespaces=kube-system," + ns, "--probe-timeout=2s", "--cache-ttl=10s"}
	recreateArgs := func(more ...string) []string {
		return append(append(append([]string(nil), reportArgs...), "--recreate-stuck-pods=true", "--stuck-pod-age=5m",
			"--stuck-pod-recreate-rate=0.05", "--stuck-pod-recreate-burst=2"), more...)
	}
	missed := map[string]any{"enabled": true}
	for name, tc := range map[string]struct {
		syncer                        map[string]any
		pods, evictions, jobs, events []string
		args                          []string
		policies                      bool
	}{
		"default: off": {
			pods: []string{"list", "watch"}, events: nil,
			args: []string{"--missed-pulls=false"},
		},
		"missedPulls: report only": {
			syncer: map[string]any{"missedPulls": missed},
			pods:   []string{"get", "list", "watch"}, events: []string{"list", "watch", "create", "patch"},
			args: reportArgs,
		},
		"missedPulls and recreateStuckPods": {
			syncer: map[string]any{"missedPulls": missed, "recreateStuckPods": map[string]any{"enabled": true, "age": "5m", "rate": 0.05, "burst": 2}},
			pods:   []string{"get", "list", "watch"}, evictions: []string{"create"}, events: []string{"list", "watch", "create", "patch"},
			args:     recreateArgs("--recreate-stuck-pod-owners=ReplicaSet.apps,StatefulSet.apps,DaemonSet.apps", "--recreate-stuck-job-pods=false"),
			policies: true,
		},
		"recreateStuckPods with Jobs and other owners": {
			syncer: map[string]any{"missedPulls": missed, "recreateStuckPods": map[string]any{"enabled": true, "age": "5m", "rate": 0.05, "burst": 2,
				"owners": []any{"ReplicaSet.apps", "CloneSet.apps.kruise.io"}, "jobs": true}},
			pods: []string{"get", "list", "watch"}, evictions: []string{"create"}, jobs: []string{"get"}, events: []string{"list", "watch", "create", "patch"},
			args:     recreateArgs("--recreate-stuck-pod-owners=ReplicaSet.apps,CloneSet.apps.kruise.io", "--recreate-stuck-job-pods=true"),
			policies: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			values := map[string]any{"webhook": map[string]any{"mutating": map[string]any{"excludeNamespaces": []any{}}}}
			if tc.syncer != nil {
				values["syncer"] = tc.syncer
			}
			r := render(t, values)
			cluster, _ := rulesOf(t, r, "kuik-secret-syncer")
			for _, c := range []struct {
				group, resource string
				want            []string
			}{{"", "pods", tc.pods}, {"", "pods/eviction", tc.evictions}, {"batch", "jobs", tc.jobs}, {"", "events", tc.events}} {
				if diff := cmp.Diff(c.want, verbs(cluster, c.group, c.resource)); diff != "" {
					t.Errorf("verbs on %s cluster-wide (-want +got):\n%s", c.resource, diff)
				}
			}
			var got []string
			for _, a := range deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args {
				if strings.Contains(a, "missed-pulls") || strings.Contains(a, "stuck-pod") || strings.Contains(a, "stuck-job") || strings.Contains(a, "probe-timeout") || strings.Contains(a, "cache-ttl") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.args, got); diff != "" {
				t.Errorf("the syncer's missed-pull flags (-want +got):\n%s", diff)
			}
			policies := slices.ContainsFunc(r.Objects, func(o *unstructured.Unstructured) bool { return strings.Contains(o.GetName(), "-pod-deletes") })
			if policies != tc.policies {
				t.Errorf("the pod-deletes policies rendered: %v, want %v", policies, tc.policies)
			}
		})
	}
}

// The owner kinds of the pod-deletes policies are the syncer's: syncer.recreateStuckPods.owners,
// plus Job.batch with jobs, as a CEL list in the policy and the same kinds in its flags.
func TestPodDeletesPolicyNamesTheSyncersOwners(t *testing.T) {
	r := render(t, map[string]any{"syncer": map[string]any{"missedPulls": map[string]any{"enabled": true}, "recreateStuckPods": map[string]any{
		"enabled": true, "owners": []any{"ReplicaSet.apps", "ReplicationController"}, "jobs": true}}})
	if want := `["ReplicaSet.apps","ReplicationController","Job.batch"]`; strings.Count(r.Manifest, want) != 2 {
		t.Errorf("the rendered pod-deletes policies name the owner kinds %q %d times, want 2 (the delete and the eviction checks):\n%s", want, strings.Count(r.Manifest, want), r.Manifest)
	}
}

// The webhook's excluded namespaces are the syncer's: a pod the webhook never sees is never
// reported as missed.
func TestMissedPullsExcludeTheWebhooksNamespaces(t *testing.T) {
	r := render(t, map[string]any{
		"webhook": map[string]any{"mutating": map[string]any{"excludeNamespaces": []any{"infra", "kube-system"}}},
		"syncer":  map[string]any{"missedPulls": map[string]any{"enabled": true}},
	})
	args := deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args
	if want := "--missed-pulls-exclude-namespaces=kube-system," + ns + ",infra"; !slices.Contains(args, want) {
		t.Errorf("syncer args %q, want %q", args, want)
	}
}
