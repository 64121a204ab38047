package charts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The secret-syncer's rights and flags for missed pulls: events and pod reads by default;
// evictions (create on pods/eviction, never delete on pods) only with
// syncer.recreateStuckPods.enabled (with the pod-deletes policies, see
// TestRenderedPolicyIsPoliciesDir), get on jobs only with its jobs opt-in; nothing of either
// with syncer.missedPulls.enabled false.
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
	recreateArgs := func(more ...string) []string {
		return append([]string{"--missed-pulls-exclude-namespaces=kube-system," + ns, "--recreate-stuck-pods=true", "--stuck-pod-age=5m",
			"--stuck-pod-recreate-rate=0.05", "--stuck-pod-recreate-burst=2"}, more...)
	}
	for name, tc := range map[string]struct {
		syncer                        map[string]any
		pods, evictions, jobs, events []string
		args                          []string
		policies                      bool
	}{
		"default: report only": {
			pods: []string{"get", "list", "watch"}, events: []string{"list", "watch", "create", "patch"},
			args: []string{"--missed-pulls-exclude-namespaces=kube-system," + ns},
		},
		"recreateStuckPods": {
			syncer: map[string]any{"recreateStuckPods": map[string]any{"enabled": true, "age": "5m", "rate": 0.05, "burst": 2}},
			pods:   []string{"get", "list", "watch"}, evictions: []string{"create"}, events: []string{"list", "watch", "create", "patch"},
			args:     recreateArgs("--recreate-stuck-pod-owners=ReplicaSet.apps,StatefulSet.apps,DaemonSet.apps", "--recreate-stuck-job-pods=false"),
			policies: true,
		},
		"recreateStuckPods with Jobs and other owners": {
			syncer: map[string]any{"recreateStuckPods": map[string]any{"enabled": true, "age": "5m", "rate": 0.05, "burst": 2,
				"owners": []any{"ReplicaSet.apps", "CloneSet.apps.kruise.io"}, "jobs": true}},
			pods: []string{"get", "list", "watch"}, evictions: []string{"create"}, jobs: []string{"get"}, events: []string{"list", "watch", "create", "patch"},
			args:     recreateArgs("--recreate-stuck-pod-owners=ReplicaSet.apps,CloneSet.apps.kruise.io", "--recreate-stuck-job-pods=true"),
			policies: true,
		},
		"missed pulls off": {
			syncer: map[string]any{"missedPulls": map[string]any{"enabled": false}, "recreateStuckPods": map[string]any{"enabled": true, "jobs": true}},
			pods:   []string{"list", "watch"}, events: nil,
			args: []string{"--missed-pulls=false"},
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
				if strings.Contains(a, "missed-pulls") || strings.Contains(a, "stuck-pod") || strings.Contains(a, "stuck-job") {
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
	r := render(t, map[string]any{"syncer": map[string]any{"recreateStuckPods": map[string]any{
		"enabled": true, "owners": []any{"ReplicaSet.apps", "ReplicationController"}, "jobs": true}}})
	if want := `["ReplicaSet.apps","ReplicationController","Job.batch"]`; strings.Count(r.Manifest, want) != 2 {
		t.Errorf("the rendered pod-deletes policies name the owner kinds %q %d times, want 2 (the delete and the eviction checks):\n%s", want, strings.Count(r.Manifest, want), r.Manifest)
	}
}

// The webhook's excluded namespaces are the syncer's: a pod the webhook never sees is never
// reported as missed.
func TestMissedPullsExcludeTheWebhooksNamespaces(t *testing.T) {
	r := render(t, map[string]any{"webhook": map[string]any{"mutating": map[string]any{"excludeNamespaces": []any{"infra", "kube-system"}}}})
	args := deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args
	if want := "--missed-pulls-exclude-namespaces=kube-system," + ns + ",infra"; !slices.Contains(args, want) {
		t.Errorf("syncer args %q, want %q", args, want)
	}
}
