package charts_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enix/kuik/charts"
	"github.com/enix/kuik/internal/testenv"
)

// keeperPlaceholder is the keeper's ServiceAccount in policies/keeper-writes.yaml.
const keeperPlaceholder = "__KUIK_KEEPER_SERVICE_ACCOUNT__"

// keeperPolicyObjects are the rendered objects of policies/keeper-writes.yaml (named
// <fullname>-keeper-writes*), sorted by kind and name.
func keeperPolicyObjects(r *charts.Rendered) []*unstructured.Unstructured {
	var got []*unstructured.Unstructured
	for _, o := range r.Objects {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && strings.Contains(o.GetName(), "-keeper-writes") {
			got = append(got, o)
		}
	}
	slices.SortFunc(got, kindNameOrder)
	return got
}

func kindNameOrder(a, b *unstructured.Unstructured) int {
	return strings.Compare(a.GetKind()+"/"+a.GetName(), b.GetKind()+"/"+b.GetName())
}

// The keeper-writes policies are rendered with the keeper only, and then are
// policies/keeper-writes.yaml with the policy name, the release namespace and the keeper's
// ServiceAccount filled in, object for object.
func TestKeeperWritesPolicyRenderedWithTheKeeper(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "policies", "keeper-writes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		values     map[string]any
		policy, sa string // "" policy: none rendered
	}{
		"keeper off":                     {},
		"keeper off, everything else on": {values: valueSets["everything on"]},
		"keeper on":                      {values: keeperOn, policy: "kuik-keeper-writes", sa: "kuik-keeper"},
		"keeper on, named ServiceAccount": {
			values: mergeValues(keeperOn, map[string]any{"serviceAccount": map[string]any{"keeperName": "keeper"}}), policy: "kuik-keeper-writes", sa: "keeper",
		},
		"keeper on, fullnameOverride": {
			values: mergeValues(keeperOn, map[string]any{"fullnameOverride": "images"}), policy: "images-keeper-writes", sa: "images-keeper",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, tc.values)
			got := keeperPolicyObjects(r)
			if tc.policy == "" {
				if len(got) != 0 {
					t.Errorf("keeper-writes objects rendered with keeper.enabled false: %d", len(got))
				}
				return
			}
			substituted := charts.SubstitutePolicy(b, charts.PolicyValues{Name: tc.policy, Namespace: ns})
			want, err := charts.Decode([]byte(strings.ReplaceAll(string(substituted), keeperPlaceholder, tc.sa)))
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(want, kindNameOrder)
			if len(want) != 6 {
				t.Fatalf("policies/keeper-writes.yaml has %d objects, want three policies and their bindings", len(want))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rendered keeper-writes objects differ from policies/keeper-writes.yaml (-want +got):\n%s", diff)
			}
			for _, o := range got {
				if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
					continue
				}
				vap := convert[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
				if len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != "request.userInfo.username == 'system:serviceaccount:"+ns+":"+tc.sa+"'" {
					t.Errorf("policy %s matches %+v, want the keeper's ServiceAccount %s only", o.GetName(), vap.Spec.MatchConditions, tc.sa)
				}
			}
			for _, p := range []string{charts.PolicyPlaceholders.Name, charts.PolicyPlaceholders.Namespace, keeperPlaceholder} {
				if strings.Contains(r.Manifest, p) {
					t.Errorf("placeholder %s was left in the rendered chart", p)
				}
			}
			// And the keeper runs as that ServiceAccount.
			d := convert[appsv1.Deployment](t, r.Find("Deployment", strings.TrimSuffix(tc.policy, "-writes")))
			if got := d.Spec.Template.Spec.ServiceAccountName; got != tc.sa {
				t.Errorf("the keeper runs as %q, want %q", got, tc.sa)
			}
		})
	}
}
