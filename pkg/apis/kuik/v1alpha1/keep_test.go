package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// keep: {} turns keeping on with the CRD's defaults, which the Go accessors repeat for objects
// that did not come through the API server; a mirror without keep stays without.
func TestCRDDefaultsKeep(t *testing.T) {
	c := newClient(t)
	without := im("registry.tld/mirror/")
	if err := c.Create(t.Context(), without); err != nil {
		t.Fatal(err)
	}
	if without.Spec.Keep != nil {
		t.Errorf("a mirror without keep got keep %+v", without.Spec.Keep)
	}

	with := im("registry.tld/mirror/")
	with.Spec.Keep = &v1alpha1.MirrorKeep{}
	if err := c.Create(t.Context(), with); err != nil {
		t.Fatal(err)
	}
	k := with.Spec.Keep
	switch {
	case k == nil:
		t.Fatal("keep: {} was dropped")
	case k.Retention == nil || k.Retention.Duration != 168*time.Hour:
		t.Errorf("retention defaulted to %v, want 168h", k.Retention)
	case k.CountTemplates == nil || !*k.CountTemplates:
		t.Errorf("countTemplates defaulted to %v, want true", k.CountTemplates)
	case k.Referrers == nil || !*k.Referrers:
		t.Errorf("referrers defaulted to %v, want true", k.Referrers)
	case k.PrivateSources != v1alpha1.PrivateSourcesDeny:
		t.Errorf("privateSources defaulted to %q, want Deny", k.PrivateSources)
	}
	unset := &v1alpha1.MirrorKeep{}
	if unset.RetentionOrDefault() != *k.Retention || unset.CountsTemplates() != *k.CountTemplates ||
		unset.CopiesReferrers() != *k.Referrers || unset.AllowsPrivateSources() {
		t.Errorf("the Go defaults differ from the CRD's %+v", k)
	}
}

// status.keep is bounded: at most 100 failures, one per image, each with a known reason.
func TestCRDBoundsKeepStatus(t *testing.T) {
	c := newClient(t)
	obj := im("registry.tld/mirror/")
	obj.Spec.Keep = &v1alpha1.MirrorKeep{}
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	failures := func(n int, reason v1alpha1.KeepFailureReason) []v1alpha1.KeepFailure {
		out := make([]v1alpha1.KeepFailure, n)
		for i := range out {
			out[i] = v1alpha1.KeepFailure{Image: fmt.Sprintf("quay.io/acme/x%d:v1", i), Reason: reason, LastAttempt: now}
		}
		return out
	}
	tests := map[string]struct {
		keep v1alpha1.KeepStatus
		want string // "" when admitted, else a field the refusal names
	}{
		"counts and 100 failures": {keep: v1alpha1.KeepStatus{Desired: 120, Present: 10, MissingSource: 3, Failed: 107, PendingDeletion: 4,
			Failures: failures(100, v1alpha1.KeepPushFailed)}},
		"101 failures":           {keep: v1alpha1.KeepStatus{Failures: failures(101, v1alpha1.KeepStalled)}, want: "status.keep.failures"},
		"an unknown reason":      {keep: v1alpha1.KeepStatus{Failures: failures(1, "Unlucky")}, want: "status.keep.failures[0].reason"},
		"an image twice":         {keep: v1alpha1.KeepStatus{Failures: append(failures(1, v1alpha1.KeepTooLarge), failures(1, v1alpha1.KeepTooLarge)...)}, want: "status.keep.failures[1]"},
		"a negative count":       {keep: v1alpha1.KeepStatus{Present: -1}, want: "status.keep.present"},
		"an image of 1025 bytes": {keep: v1alpha1.KeepStatus{Failures: []v1alpha1.KeepFailure{{Image: "quay.io/" + strings.Repeat("a", 1017), Reason: v1alpha1.KeepUnnameable, LastAttempt: now}}}, want: "status.keep.failures[0].image"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := obj.DeepCopy()
			o.Status.Keep = &tc.keep
			err := c.Status().Update(t.Context(), o, client.DryRunAll)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("the API server refused status.keep: %v", err)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("status update = %v, want Invalid naming %s", err, tc.want)
			}
		})
	}
}

// push.auth holds only a secretRef: a provider (which only the kubelet and the syncer run) is
// no field of it. A client that validates fields strictly (kubectl) is refused for the unknown
// field; any other is refused for the missing secretRef, or has the provider dropped.
func TestCRDRefusesAProviderForPush(t *testing.T) {
	c := newClient(t)
	mirror := func(auth map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(),
			"kind":       "ImageMirror",
			"metadata":   map[string]any{"generateName": "im-"},
			"spec": map[string]any{
				"destination": map[string]any{"path": "registry.tld/mirror/"},
				"keep":        map[string]any{"push": map[string]any{"auth": auth}},
			},
		}}
	}
	provider := map[string]any{"provider": map[string]any{"name": "ecr"}}
	if err := c.Create(t.Context(), mirror(provider), client.DryRunAll); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.keep.push.auth.secretRef") {
		t.Errorf("a provider alone = %v, want Invalid naming spec.keep.push.auth.secretRef", err)
	}
	both := map[string]any{"secretRef": map[string]any{"name": "push"}, "provider": map[string]any{"name": "ecr"}}
	if err := c.Create(t.Context(), mirror(both), client.DryRunAll, client.FieldValidation("Strict")); err == nil || !strings.Contains(err.Error(), "spec.keep.push.auth.provider") {
		t.Errorf("a provider next to a secretRef, strictly = %v, want refused naming spec.keep.push.auth.provider", err)
	}
}
