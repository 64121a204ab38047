package charts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The secret-syncer's rights and flags for missed pulls: nothing by default (the chart README's
// upgrade notes say what each value grants); events and pod reads with
// syncer.missedPulls.enabled; pod deletes only with syncer.recreateStuckPods.enabled too (with
// the pod-deletes policy, see TestRenderedPolicyIsPoliciesDir).
func TestMissedPullsRightsAndFlags(t *testing.T) {
	podVerbs := func(rules []rbacv1.PolicyRule, resource string) []string {
		var out []string
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			if allows(rules, v, "", resource) {
				out = append(out, v)
			}
		}
		return out
	}
	for name, tc := range map[string]struct {
		syncer             map[string]any
		pods, events, args []string
	}{
		"default: off": {
			pods: []string{"list", "watch"}, events: nil,
			args: []string{"--missed-pulls=false"},
		},
		"missedPulls: report only": {
			syncer: map[string]any{"missedPulls": map[string]any{"enabled": true}},
			pods:   []string{"get", "list", "watch"}, events: []string{"list", "watch", "create", "patch"},
			args: []string{"--missed-pulls=true", "--missed-pulls-exclude-namespaces=kube-system," + ns},
		},
		"missedPulls and recreateStuckPods": {
			syncer: map[string]any{"missedPulls": map[string]any{"enabled": true}, "recreateStuckPods": map[string]any{"enabled": true, "age": "5m", "rate": 0.05, "burst": 2}},
			pods:   []string{"get", "list", "watch", "delete"}, events: []string{"list", "watch", "create", "patch"},
			args: []string{"--missed-pulls=true", "--missed-pulls-exclude-namespaces=kube-system," + ns, "--recreate-stuck-pods=true", "--stuck-pod-age=5m",
				"--stuck-pod-recreate-rate=0.05", "--stuck-pod-recreate-burst=2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			values := map[string]any{"webhook": map[string]any{"mutating": map[string]any{"excludeNamespaces": []any{}}}}
			if tc.syncer != nil {
				values["syncer"] = tc.syncer
			}
			r := render(t, values)
			cluster, _ := rulesOf(t, r, "kuik-secret-syncer")
			if diff := cmp.Diff(tc.pods, podVerbs(cluster, "pods")); diff != "" {
				t.Errorf("verbs on pods cluster-wide (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.events, podVerbs(cluster, "events")); diff != "" {
				t.Errorf("verbs on events cluster-wide (-want +got):\n%s", diff)
			}
			var got []string
			for _, a := range deployments(t, r)["kuik-secret-syncer"].Spec.Template.Spec.Containers[0].Args {
				if strings.Contains(a, "missed-pulls") || strings.Contains(a, "stuck-pod") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.args, got); diff != "" {
				t.Errorf("the syncer's missed-pull flags (-want +got):\n%s", diff)
			}
			policies := slices.ContainsFunc(r.Objects, func(o *unstructured.Unstructured) bool { return strings.HasSuffix(o.GetName(), "-pod-deletes") })
			if want := slices.Contains(tc.pods, "delete"); policies != want {
				t.Errorf("the pod-deletes policy rendered: %v, want %v", policies, want)
			}
		})
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
