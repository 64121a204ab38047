package charts_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
)

// clusterID reaches the secret-syncer as the webhook's --cluster-id, each parsed by its own
// binary's command, with missed pulls off and on; unset, neither gets the flag.
func TestClusterIDIsTheSyncersAsTheWebhooks(t *testing.T) {
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"unset":                  {},
		"set":                    {values: map[string]any{"clusterID": "eu-west-1"}, want: "eu-west-1"},
		"set, with missed pulls": {values: map[string]any{"clusterID": "eu-west-1", "syncer": map[string]any{"missedPulls": map[string]any{"enabled": true}}}, want: "eu-west-1"},
	} {
		t.Run(name, func(t *testing.T) {
			args := map[string][]string{}
			for _, u := range render(t, tc.values).OfKind("Deployment") {
				c := u.GetLabels()["app.kubernetes.io/component"]
				args[c] = convert[appsv1.Deployment](t, u).Spec.Template.Spec.Containers[0].Args
			}
			for _, c := range []string{"webhook", "secret-syncer"} {
				if args[c] == nil {
					t.Fatalf("no %s Deployment", c)
				}
				flagged := slices.ContainsFunc(args[c], func(a string) bool { return strings.HasPrefix(a, "--cluster-id") })
				if flagged != (tc.want != "") {
					t.Errorf("%s args %q: --cluster-id passed %v, want %v", c, args[c], flagged, tc.want != "")
				}
			}

			var w webhookapp.Options
			wcmd := webhookapp.NewCommand(
				func(_ context.Context, o webhookapp.Options) error { w = o; return nil },
				func(context.Context, webhookapp.CandidatesOptions) error { return nil },
			)
			wcmd.SetArgs(args["webhook"])
			if err := wcmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("webhook args %q: %v", args["webhook"], err)
			}
			var s syncerapp.Options
			scmd := syncerapp.NewCommand(func(_ context.Context, o syncerapp.Options) error { s = o; return nil })
			scmd.SetArgs(args["secret-syncer"])
			if err := scmd.ExecuteContext(t.Context()); err != nil {
				t.Fatalf("secret-syncer args %q: %v", args["secret-syncer"], err)
			}
			if s.ClusterID != tc.want || w.ClusterID != tc.want {
				t.Errorf("cluster ID: secret-syncer %q, webhook %q; want %q both", s.ClusterID, w.ClusterID, tc.want)
			}
		})
	}
}
