package app

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/enix/kuik/internal/missedpulls"
)

func TestMissedPullFlags(t *testing.T) {
	got, called, err := execute(t, "--recreate-stuck-pods", "--stuck-pod-age=30s", "--stuck-pod-recreate-rate=0.5",
		"--stuck-pod-recreate-burst=3", "--missed-pulls-exclude-namespaces=infra,ops",
		"--recreate-stuck-pod-owners=ReplicaSet.apps,ReplicationController,CloneSet.apps.kruise.io", "--recreate-stuck-job-pods")
	if err != nil || !called {
		t.Fatalf("called %v, err %v", called, err)
	}
	want := &missedpulls.Options{AllowDelete: true, StuckPodAge: 30 * time.Second, RecreateRate: 0.5, RecreateBurst: 3, ExcludedNamespaces: []string{"infra", "ops"},
		RecreateOwners: []schema.GroupKind{{Group: "apps", Kind: "ReplicaSet"}, {Kind: "ReplicationController"}, {Group: "apps.kruise.io", Kind: "CloneSet"}},
		RecreateJobs:   true}
	if diff := cmp.Diff(want, got.MissedPulls); diff != "" {
		t.Errorf("missed-pull options (-want +got):\n%s", diff)
	}

	got, called, err = execute(t, "--recreate-stuck-pod-owners=")
	if err != nil || !called || len(got.MissedPulls.RecreateOwners) != 0 || got.MissedPulls.RecreateOwners == nil {
		t.Errorf("an empty --recreate-stuck-pod-owners: called %v, err %v, owners %#v; want none (not the defaults)", called, err, got.MissedPulls.RecreateOwners)
	}

	got, called, err = execute(t, "--missed-pulls=false")
	if err != nil || !called || got.MissedPulls != nil {
		t.Errorf("--missed-pulls=false: called %v, err %v, options %+v; want the controller off", called, err, got.MissedPulls)
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
		"jobs among the owners":     {[]string{"--recreate-stuck-pod-owners=ReplicaSet.apps,Job.batch"}, "Job.batch is --recreate-stuck-job-pods"},
		"a resource, not a kind":    {[]string{"--recreate-stuck-pod-owners=apps/v1/replicasets"}, "want Kind.group"},
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
