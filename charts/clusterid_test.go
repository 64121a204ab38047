package charts_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	webhookapp "github.com/enix/kuik/cmd/webhook/app"
)

// clusterID reaches the webhook as --cluster-id, parsed by the webhook's own command; unset, the
// flag is not passed.
func TestClusterIDIsPassedToTheWebhook(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unset": {},
		"set":   {values: map[string]any{"clusterID": "eu-west-1"}, want: "eu-west-1"},
	} {
		t.Run(name, func(t *testing.T) {
			var args []string
			for _, u := range render(t, tc.values).OfKind("Deployment") {
				if u.GetLabels()["app.kubernetes.io/component"] == "webhook" {
					args = convert[appsv1.Deployment](t, u).Spec.Template.Spec.Containers[0].Args
				}
			}
			if args == nil {
				t.Fatal("no webhook Deployment")
			}
			flagged := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cluster-id") })
			if flagged != (tc.want != "") {
				t.Errorf("args %q: --cluster-id passed %v, want %v", args, flagged, tc.want != "")
			}
			var got webhookapp.Options
			cmd := webhookapp.NewCommand(
				func(_ context.Context, o webhookapp.Options) error { got = o; return nil },
				func(context.Context, webhookapp.CandidatesOptions) error { return nil },
			)
			cmd.SetArgs(args)
			if err := cmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("webhook args %q: %v", args, err)
			}
			if got.ClusterID != tc.want {
				t.Errorf("the webhook's cluster ID = %q, want %q", got.ClusterID, tc.want)
			}
		})
	}
}

// The schema refuses a cluster ID the binaries would refuse (routing.ValidateClusterID).
func TestSchemaRefusesBadClusterIDs(t *testing.T) {
	for name, id := range map[string]any{
		"upper case":      "EU-1",
		"an underscore":   "eu_1",
		"a leading dash":  "-eu",
		"a trailing dash": "eu-",
		"a dot":           "eu.1",
		"over 32 bytes":   strings.Repeat("a", 33),
		"kuik- inside":    "a-kuik-b",
		"starting kuik-":  "kuik-b",
		"not a string":    42,
	} {
		t.Run(name, func(t *testing.T) {
			err := renderErr(map[string]any{"clusterID": id})
			if err == nil || !strings.Contains(err.Error(), "clusterID") {
				t.Fatalf("clusterID %v: %v, want refused by the schema", id, err)
			}
		})
	}
	if err := renderErr(map[string]any{"clusterID": strings.Repeat("a", 32)}); err != nil {
		t.Errorf("a 32-byte cluster ID is refused: %v", err)
	}
}
