package keeper

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// reasonErr is a credential error that names its reason.
type reasonErr struct{ reason string }

func (e reasonErr) Error() string  { return "push secret: " + e.reason }
func (e reasonErr) Reason() string { return e.reason }

func TestStatusOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	fail := func(r v1alpha1.KeepFailureReason, m int) *failure {
		return &failure{reason: r, message: string(r), at: at(m)}
	}
	keeping := metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonKeeping, Message: "kuik writes the kept images into the mirror"}
	many := make([]statusItem, 120)
	for i := range many {
		many[i] = statusItem{image: fmt.Sprintf("src.test/app:%03d", i), fail: fail(v1alpha1.KeepPushFailed, i)}
	}

	for name, tc := range map[string]struct {
		in       statusInput
		want     v1alpha1.KeepStatus
		wantCond metav1.Condition
		// failures, when set, checks the number of failures listed instead of the list.
		failures int
	}{
		"nothing desired: zero counts, ready": {
			wantCond: keeping,
		},
		"counts: present, failed, missing source, pending deletion": {
			in: statusInput{
				items: []statusItem{
					{image: "a", present: true},
					{image: "b", fail: fail(v1alpha1.KeepSourceUnavailable, 1)},
					{image: "c", fail: fail(v1alpha1.KeepStalled, 2)},
					{image: "d"},
				},
				tags: []keep.Tag{{Tag: "1"}, {Tag: "2", UnusedSince: t0}},
			},
			want: v1alpha1.KeepStatus{
				Desired: 4, Present: 1, MissingSource: 1, Failed: 2, PendingDeletion: 1,
				Failures: []v1alpha1.KeepFailure{
					{Image: "c", Reason: v1alpha1.KeepStalled, Message: "Stalled", LastAttempt: metav1.NewTime(at(2))},
					{Image: "b", Reason: v1alpha1.KeepSourceUnavailable, Message: "SourceUnavailable", LastAttempt: metav1.NewTime(at(1))},
				},
			},
			wantCond: keeping,
		},
		"plan skips are failures too, one per image, the most recent kept": {
			in: statusInput{
				items: []statusItem{{image: "x", fail: fail(v1alpha1.KeepPushFailed, 5)}},
				skips: []v1alpha1.KeepFailure{
					{Image: "x", Reason: v1alpha1.KeepAuthRequired, LastAttempt: metav1.NewTime(at(1))},
					{Image: "host:5000/y", Reason: v1alpha1.KeepUnnameable, LastAttempt: metav1.NewTime(at(0))},
				},
			},
			want: v1alpha1.KeepStatus{
				Desired: 1, Failed: 2,
				Failures: []v1alpha1.KeepFailure{
					{Image: "x", Reason: v1alpha1.KeepPushFailed, Message: "PushFailed", LastAttempt: metav1.NewTime(at(5))},
					{Image: "host:5000/y", Reason: v1alpha1.KeepUnnameable, LastAttempt: metav1.NewTime(at(0))},
				},
			},
			wantCond: keeping,
		},
		"at most 100 failures listed, failed counts them all": {
			in:       statusInput{items: many},
			want:     v1alpha1.KeepStatus{Desired: 120, Failed: 120},
			failures: 100,
			wantCond: keeping,
		},
		"a push credential error without a reason: SecretNotFound": {
			in:       statusInput{credErr: errors.New("secret push not found")},
			wantCond: metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSecretNotFound, Message: "secret push not found"},
		},
		"a push credential error names its reason": {
			in:       statusInput{credErr: fmt.Errorf("resolving: %w", reasonErr{v1alpha1.ReasonInvalidDockerConfig}), dest: v1alpha1.ReasonPushDenied},
			wantCond: metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidDockerConfig, Message: "resolving: push secret: InvalidDockerConfig"},
		},
		"a refused write: PushDenied": {
			in:       statusInput{dest: v1alpha1.ReasonPushDenied, destMessage: "401"},
			wantCond: metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPushDenied, Message: "401"},
		},
		"an unreachable destination: DestinationUnavailable": {
			in:       statusInput{dest: v1alpha1.ReasonDestinationUnavailable, destMessage: "connection refused"},
			wantCond: metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDestinationUnavailable, Message: "connection refused"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			st, cond := statusOf(&tc.in)
			if tc.failures > 0 {
				if len(st.Failures) != tc.failures {
					t.Fatalf("%d failures listed, want %d", len(st.Failures), tc.failures)
				}
				if !st.Failures[0].LastAttempt.After(st.Failures[1].LastAttempt.Time) {
					t.Fatalf("failures not most recent first: %v, %v", st.Failures[0].LastAttempt, st.Failures[1].LastAttempt)
				}
				st.Failures = nil
			}
			if d := cmp.Diff(tc.want, st); d != "" {
				t.Errorf("status (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantCond, cond); d != "" {
				t.Errorf("condition (-want +got):\n%s", d)
			}
		})
	}
}
