package syncer

import (
	"testing"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/missedpulls"
)

// The missed-pull decisions count as the nodes' providers only what they are given as such
// (the webhook's configuration, with credentialProviders.sameAsNodes), never the plugins the
// syncer runs itself.
func TestMissedPullOptionsNeverTakeTheSyncersPluginsForTheNodes(t *testing.T) {
	ecr := &credentialprovider.Config{Providers: []credentialprovider.Provider{{
		Name: "ecr-credential-provider", MatchImages: []string{"*.dkr.ecr.*.amazonaws.com"}, APIVersion: "credentialprovider.kubelet.k8s.io/v1",
	}}}
	plugins := credentialprovider.NewPlugins(ecr, t.TempDir(), credentialprovider.Options{})
	for name, tc := range map[string]struct {
		nodes *credentialprovider.Config
	}{
		"only the syncer runs them (sameAsNodes false)": {nodes: nil},
		"the nodes run them too":                        {nodes: ecr},
	} {
		t.Run(name, func(t *testing.T) {
			opts := Options{Config: Config{ClusterResourceNamespace: "kuik-system", ClusterID: "eu-1", Plugins: plugins},
				MissedPulls: &missedpulls.Options{NodeProviders: tc.nodes}}
			got := missedPullOptions(opts)
			if got == nil {
				t.Fatal("missed pulls are off")
			}
			if got.NodeProviders != tc.nodes {
				t.Errorf("the missed-pull decisions' node providers = %+v, want %+v", got.NodeProviders, tc.nodes)
			}
			if got.ClusterResourceNamespace != "kuik-system" {
				t.Errorf("cluster resource namespace %q, want the syncer's", got.ClusterResourceNamespace)
			}
			if got.ClusterID != "eu-1" {
				t.Errorf("cluster ID %q, want the syncer's", got.ClusterID)
			}
		})
	}
	if missedPullOptions(Options{Config: Config{Plugins: plugins}}) != nil {
		t.Error("missed pulls on without options")
	}
}
