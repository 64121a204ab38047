package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestOrderIsABalancedLatinSquare(t *testing.T) {
	n := len(modes)
	place := map[[2]int]int{}  // (mode, place) → rounds
	after := map[[2]mode]int{} // (mode, the mode right after it) → rounds
	for r := range n {
		o := order(r)
		if len(o) != n {
			t.Fatalf("round %d: %d modes, want %d", r, len(o), n)
		}
		for k, m := range o {
			place[[2]int{int(m), k}]++
			if k > 0 {
				after[[2]mode{o[k-1], m}]++
			}
		}
	}
	for _, m := range modes {
		for k := range n {
			if got := place[[2]int{int(m), k}]; got != 1 {
				t.Errorf("%s in place %d in %d of %d rounds, want 1", m, k, got, n)
			}
		}
		for _, next := range modes {
			want := 1
			if next == m {
				want = 0
			}
			if got := after[[2]mode{m, next}]; got != want {
				t.Errorf("%s right after %s in %d rounds, want %d", next, m, got, want)
			}
		}
	}
}

func TestSamePatchWebhookAnswersItsScenarioAndRoundsPatchOnly(t *testing.T) {
	p := patchSet{
		"bench-2": {"": []byte(`[{"op":"add","path":"/metadata/labels/a","value":"every round"}]`)},
		"bench-3": {"r1": []byte(`[{"op":"add","path":"/metadata/labels/a","value":"round 0"}]`), "r2": []byte(`[{"op":"add","path":"/metadata/labels/a","value":"round 1"}]`)},
	}
	cases := map[string]struct {
		namespace, name string
		want            string // the patch, "" for none
	}{
		"a scenario patched in every round": {"bench-2", "r3-00007", `[{"op":"add","path":"/metadata/labels/a","value":"every round"}]`},
		"a scenario patched by round":       {"bench-3", "r2-00001", `[{"op":"add","path":"/metadata/labels/a","value":"round 1"}]`},
		"a round it has no patch for":       {"bench-3", "r4-00001", ""},
		"a scenario kuik leaves unchanged":  {"bench-0", "r1-00000", ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Namespace: c.namespace, Name: c.name}}
			resp := p.admit(req)
			if !resp.Allowed || len(resp.Warnings) > 0 {
				t.Fatalf("allowed %t, warnings %v", resp.Allowed, resp.Warnings)
			}
			if diff := cmp.Diff(c.want, string(resp.Patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if (resp.PatchType != nil) != (c.want != "") || (resp.PatchType != nil && *resp.PatchType != admissionv1.PatchTypeJSONPatch) {
				t.Errorf("patch type %v", resp.PatchType)
			}
		})
	}
}
