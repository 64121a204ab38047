package app

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/probe"
)

func TestMissedPullFlags(t *testing.T) {
	got, called, err := execute(t, "--missed-pulls", "--recreate-stuck-pods", "--stuck-pod-age=30s", "--stuck-pod-recreate-rate=0.5",
		"--stuck-pod-recreate-burst=3", "--missed-pulls-exclude-namespaces=infra,ops", "--probe-timeout=5s", "--cache-ttl=1m",
		"--recreate-stuck-pod-owners=ReplicaSet.apps,ReplicationController,CloneSet.apps.kruise.io", "--recreate-stuck-job-pods")
	if err != nil || !called {
		t.Fatalf("called %v, err %v", called, err)
	}
	want := &missedpulls.Options{AllowDelete: true, StuckPodAge: 30 * time.Second, RecreateRate: 0.5, RecreateBurst: 3, ExcludedNamespaces: []string{"infra", "ops"},
		ProbeTimeout: 5 * time.Second, ProbeTTL: time.Minute,
		RecreateOwners: []schema.GroupKind{{Group: "apps", Kind: "ReplicaSet"}, {Kind: "ReplicationController"}, {Group: "apps.kruise.io", Kind: "CloneSet"}},
		RecreateJobs:   true}
	if diff := cmp.Diff(want, got.MissedPulls); diff != "" {
		t.Errorf("missed-pull options (-want +got):\n%s", diff)
	}

	got, called, err = execute(t, "--missed-pulls", "--recreate-stuck-pod-owners=")
	if err != nil || !called || len(got.MissedPulls.RecreateOwners) != 0 || got.MissedPulls.RecreateOwners == nil {
		t.Errorf("an empty --recreate-stuck-pod-owners: called %v, err %v, owners %#v; want none (not the defaults)", called, err, got.MissedPulls.RecreateOwners)
	}

	got, called, err = execute(t, "--missed-pulls=false")
	if err != nil || !called || got.MissedPulls != nil {
		t.Errorf("--missed-pulls=false: called %v, err %v, options %+v; want the controller off", called, err, got.MissedPulls)
	}
	// Off by default: it needs rights (events cluster-wide) and egress (registries) of its own.
	got, called, err = execute(t)
	if err != nil || !called || got.MissedPulls != nil {
		t.Errorf("no flag: called %v, err %v, options %+v; want the controller off", called, err, got.MissedPulls)
	}
}

func TestInvalidMissedPullFlagsDoNotRun(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"a zero stuck age":          {[]string{"--stuck-pod-age=0s"}, "--stuck-pod-age must be positive"},
		"a negative rate":           {[]string{"--stuck-pod-recreate-rate=-1"}, "--stuck-pod-recreate-rate must be positive"},
		"a zero burst":              {[]string{"--stuck-pod-recreate-burst=0"}, "--stuck-pod-recreate-burst must be at least 1"},
		"deletes without the watch": {[]string{"--missed-pulls=false", "--recreate-stuck-pods"}, "--recreate-stuck-pods needs --missed-pulls"},
		"a zero probe timeout":      {[]string{"--probe-timeout=0s"}, "--probe-timeout must be positive"},
		"a negative cache TTL":      {[]string{"--cache-ttl=-1s"}, "--cache-ttl must not be negative"},
		"a missing node configuration": {[]string{"--missed-pulls", "--node-credential-provider-config=/nonexistent/config.yaml"},
			"--node-credential-provider-config"},
		"jobs among the owners":  {[]string{"--missed-pulls", "--recreate-stuck-pod-owners=ReplicaSet.apps,Job.batch"}, "Job.batch is --recreate-stuck-job-pods"},
		"a resource, not a kind": {[]string{"--missed-pulls", "--recreate-stuck-pod-owners=apps/v1/replicasets"}, "want Kind.group"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, called, err := execute(t, tc.args...)
			if called || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("called %v, err %v; want refused with %q", called, err, tc.want)
			}
		})
	}
}

// The probe settings are the webhook's flags, with the webhook's defaults (one constant each).
func TestMissedPullProbeDefaultsAreTheWebhooks(t *testing.T) {
	got, _, err := execute(t, "--missed-pulls")
	if err != nil {
		t.Fatal(err)
	}
	if got.MissedPulls.ProbeTimeout != probe.DefaultTimeout || got.MissedPulls.ProbeTTL != probe.DefaultTTL {
		t.Errorf("probe timeout %s, TTL %s; want probe.DefaultTimeout %s, probe.DefaultTTL %s",
			got.MissedPulls.ProbeTimeout, got.MissedPulls.ProbeTTL, probe.DefaultTimeout, probe.DefaultTTL)
	}
}

// The missed-pull decisions count the nodes' providers only from
// --node-credential-provider-config (the webhook's configuration), never from the plugins the
// syncer runs: with credentialProviders.sameAsNodes false the webhook has none, and a syncer
// counting them would call pulls missed that the webhook routes differently.
func TestMissedPullNodeProvidersAreTheWebhooks(t *testing.T) {
	config, binDir, _ := providerFiles(t, "")
	for name, tc := range map[string]struct {
		args []string
		want bool
	}{
		"the syncer's plugins only":            {args: []string{"--image-credential-provider-config=" + config, "--image-credential-provider-bin-dir=" + binDir}},
		"the nodes' configuration":             {args: []string{"--node-credential-provider-config=" + config}, want: true},
		"the syncer's plugins, the nodes' too": {args: []string{"--image-credential-provider-config=" + config, "--image-credential-provider-bin-dir=" + binDir, "--node-credential-provider-config=" + config}, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, called, err := execute(t, append([]string{"--missed-pulls"}, tc.args...)...)
			if err != nil || !called {
				t.Fatalf("called %v, err %v", called, err)
			}
			nodes := got.MissedPulls.NodeProviders
			if has := nodes != nil && nodes.Provider("fake-ecr") != nil; has != tc.want {
				t.Errorf("the missed-pull decisions count the nodes' fake-ecr: %v, want %v", has, tc.want)
			}
		})
	}
}
