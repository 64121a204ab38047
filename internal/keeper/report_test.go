package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep"
	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const syncerManager = "kuik-secret-syncer"

// createKeepMirror creates a keep-enabled ImageMirror named after the test's namespace.
func createKeepMirror(t *testing.T, k kube, name string) *v1alpha1.ImageMirror {
	t.Helper()
	m := &v1alpha1.ImageMirror{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ImageMirrorSpec{
			Destination: v1alpha1.MirrorDestination{Path: "mirror.example/"},
			Keep:        &v1alpha1.MirrorKeep{},
		},
	}
	if err := k.cl.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.cl.Delete(t.Context(), m) })
	return m
}

func (k kube) getMirror(t *testing.T, name string) *v1alpha1.ImageMirror {
	t.Helper()
	var m v1alpha1.ImageMirror
	if err := k.cl.Get(t.Context(), client.ObjectKey{Name: name}, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// syncerWrite writes the status as the secret-syncer does: a JSON merge patch of the status it
// read, changed by edit.
func (k kube) syncerWrite(t *testing.T, name string, edit func(*v1alpha1.RoutingStatus)) {
	t.Helper()
	orig := k.getMirror(t, name)
	m := orig.DeepCopy()
	edit(&m.Status.RoutingStatus)
	if err := k.cl.Status().Patch(t.Context(), m, client.MergeFrom(orig), client.FieldOwner(syncerManager)); err != nil {
		t.Fatal(err)
	}
}

// ownedStatus lists the status fields manager owns (status.conditions by key), as the API
// server records them.
func ownedStatus(t *testing.T, m *v1alpha1.ImageMirror, manager string) []string {
	t.Helper()
	var out []string
	for _, f := range m.ManagedFields {
		if f.Manager != manager || f.Subresource != "status" || f.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Status map[string]json.RawMessage `json:"f:status"`
		}
		if err := json.Unmarshal(f.FieldsV1.GetRawBytes(), &fields); err != nil {
			t.Fatal(err)
		}
		for k, v := range fields.Status {
			if k != "f:conditions" {
				out = append(out, k)
				continue
			}
			var conds map[string]json.RawMessage
			if err := json.Unmarshal(v, &conds); err != nil {
				t.Fatal(err)
			}
			for c := range conds {
				out = append(out, k+"/"+c)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestStatusAppliesOnlyTheKeepFieldsAndKeepsTheSyncers(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	name := k.namespace(t, nil) + "-status"
	createKeepMirror(t, k, name)

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced, Message: "synced", LastTransitionTime: metav1.NewTime(time.Unix(1000, 0))}
	k.syncerWrite(t, name, func(s *v1alpha1.RoutingStatus) {
		s.ObservedGeneration, s.Entries, s.Namespaces = 1, 1, 3
		meta.SetStatusCondition(&s.Conditions, ready)
	})

	clock := time.Unix(2000, 0).UTC()
	r := newReporter(k.cl, nil, 0, func() time.Time { return clock })
	st := v1alpha1.KeepStatus{Desired: 2, Present: 1, Failed: 1, Failures: []v1alpha1.KeepFailure{
		{Image: "docker.io/library/nginx:1.27", Reason: v1alpha1.KeepPushFailed, Message: "denied", LastAttempt: metav1.NewTime(clock)},
	}}
	denied := metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPushDenied, Message: "the destination refused a write"}
	if err := r.Status(ctx, k.getMirror(t, name), st, denied); err != nil {
		t.Fatal(err)
	}

	got := k.getMirror(t, name)
	wantKeepReady := metav1.Condition{Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPushDenied, Message: "the destination refused a write", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(clock)}
	want := v1alpha1.ImageMirrorStatus{
		RoutingStatus: v1alpha1.RoutingStatus{ObservedGeneration: 1, Entries: 1, Namespaces: 3, Conditions: []metav1.Condition{ready, wantKeepReady}},
		Keep:          &st,
	}
	sortConditions := cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type })
	if d := cmp.Diff(want, got.Status, sortConditions); d != "" {
		t.Errorf("status after the keeper's write (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{`f:conditions/k:{"type":"KeepReady"}`, "f:keep"}, ownedStatus(t, got, FieldManager)); d != "" {
		t.Errorf("the status fields the keeper owns (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{".", "f:conditions/.", `f:conditions/k:{"type":"Ready"}`, "f:entries", "f:namespaces", "f:observedGeneration"}, ownedStatus(t, got, syncerManager)); d != "" {
		t.Errorf("the status fields the syncer owns (-want +got):\n%s", d)
	}

	// The syncer writes again, with the keeper's fields in what it read: they stay.
	ready.Message = "synced again"
	k.syncerWrite(t, name, func(s *v1alpha1.RoutingStatus) {
		s.Namespaces = 4
		meta.SetStatusCondition(&s.Conditions, ready)
	})
	got = k.getMirror(t, name)
	want.Namespaces, want.Conditions = 4, []metav1.Condition{ready, wantKeepReady}
	if d := cmp.Diff(want, got.Status, sortConditions); d != "" {
		t.Errorf("status after the syncer's second write (-want +got):\n%s", d)
	}

	// The keeper writes again: no failure left (its item goes), KeepReady turns True.
	clock = clock.Add(time.Minute)
	st = v1alpha1.KeepStatus{Desired: 2, Present: 2}
	if err := r.Status(ctx, got, st, metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonKeeping, Message: "keeping"}); err != nil {
		t.Fatal(err)
	}
	got = k.getMirror(t, name)
	want.Keep = &st
	want.Conditions = []metav1.Condition{ready, {Type: v1alpha1.ConditionKeepReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonKeeping, Message: "keeping", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(clock)}}
	if d := cmp.Diff(want, got.Status, sortConditions); d != "" {
		t.Errorf("status after the keeper's second write (-want +got):\n%s", d)
	}
}

func TestStatusSkipsUnchangedAndTooFrequentWrites(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	name := k.namespace(t, nil) + "-throttle"
	createKeepMirror(t, k, name)
	clock := time.Unix(5000, 0).UTC()
	r := newReporter(k.cl, nil, time.Minute, func() time.Time { return clock })
	keeping := metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonKeeping, Message: "keeping"}
	// A failure attempted at a time finer than the API server keeps.
	failed := func() v1alpha1.KeepStatus {
		return v1alpha1.KeepStatus{Desired: 1, Present: 1, Failures: []v1alpha1.KeepFailure{{Image: "docker.io/library/a:1", Reason: v1alpha1.KeepStalled, LastAttempt: metav1.NewTime(time.Unix(4999, 123456789))}}}
	}
	if err := r.Status(ctx, k.getMirror(t, name), failed(), keeping); err != nil {
		t.Fatal(err)
	}
	first := k.getMirror(t, name)

	// The same status again, a minute later: nothing to write.
	clock = clock.Add(2 * time.Minute)
	if err := r.Status(ctx, first, failed(), keeping); err != nil {
		t.Fatal(err)
	}
	if got := k.getMirror(t, name); got.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged status was written: %+v", got.Status)
	}
	// A change written, then another one within the interval: held back.
	if err := r.Status(ctx, first, v1alpha1.KeepStatus{Desired: 2, Present: 1}, keeping); err != nil {
		t.Fatal(err)
	}
	second := k.getMirror(t, name)
	if second.Status.Keep == nil || second.Status.Keep.Desired != 2 {
		t.Fatalf("the change was not written: %+v", second.Status.Keep)
	}
	clock = clock.Add(time.Second)
	if err := r.Status(ctx, second, v1alpha1.KeepStatus{Desired: 3, Present: 1}, keeping); err != nil {
		t.Fatal(err)
	}
	if got := k.getMirror(t, name); got.ResourceVersion != second.ResourceVersion {
		t.Errorf("a write within the status interval went through: %+v", got.Status.Keep)
	}
	// Past the interval, the next call writes it.
	clock = clock.Add(time.Minute)
	if err := r.Status(ctx, second, v1alpha1.KeepStatus{Desired: 3, Present: 1}, keeping); err != nil {
		t.Fatal(err)
	}
	got := k.getMirror(t, name)
	if got.Status.Keep == nil || got.Status.Keep.Desired != 3 {
		t.Errorf("the change was not written past the interval: %+v", got.Status.Keep)
	}
	// KeepReady kept its transition time: its status never changed.
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKeepReady)
	if c == nil || !c.LastTransitionTime.Time.Equal(time.Unix(5000, 0)) {
		t.Errorf("KeepReady %+v, want its first transition time", c)
	}
}

func TestOutcomeEventsOnTheMirror(t *testing.T) {
	k := newKube(t)
	ctx := t.Context()
	name := k.namespace(t, nil) + "-events"
	mirror := createKeepMirror(t, k, name)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: k.cs.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	r := newReporter(k.cl, broadcaster.NewRecorder(scheme, corev1.EventSource{Component: FieldManager}), 0, nil)

	digest, err := v1.NewHash("sha256:" + strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	want := func(origin string) keep.Want {
		return keep.Want{Mirror: name, Origin: origin, Destination: "mirror.example/" + origin}
	}
	outcomes := []Outcome{
		{Want: want("docker.io/library/present:1"), Result: transfer.Result{Digest: digest, Action: transfer.AlreadyPresent}},
		{Want: want("docker.io/library/copied:1"), Result: transfer.Result{Digest: digest, Action: transfer.Copied}},
		{Want: want("docker.io/library/tagged:1"), Result: transfer.Result{Digest: digest, Action: transfer.Tagged}},
		{Want: want("docker.io/library/failed:1"), Err: errors.New("401 unauthorized"), Reason: v1alpha1.KeepAuthRequired},
	}
	for _, o := range outcomes {
		r.Outcome(ctx, mirror, o)
	}

	type event struct{ Type, Reason, Message string }
	wantEvents := []event{
		{corev1.EventTypeNormal, v1alpha1.EventImageKept, fmt.Sprintf("docker.io/library/copied:1 → mirror.example/docker.io/library/copied:1 (%s): Copied", digest)},
		{corev1.EventTypeNormal, v1alpha1.EventImageKept, fmt.Sprintf("docker.io/library/tagged:1 → mirror.example/docker.io/library/tagged:1 (%s): Tagged", digest)},
		{corev1.EventTypeWarning, v1alpha1.EventKeepFailed, "docker.io/library/failed:1: AuthRequired: 401 unauthorized"},
	}
	var got []event
	eventuallyOK(t, func() error {
		var list corev1.EventList
		if err := k.cl.List(ctx, &list, client.InNamespace(metav1.NamespaceDefault), client.MatchingFields{"involvedObject.name": name}); err != nil {
			return err
		}
		got = got[:0]
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "ImageMirror" || e.InvolvedObject.UID != mirror.UID || e.Source.Component != FieldManager {
				return fmt.Errorf("event on %+v from %+v", e.InvolvedObject, e.Source)
			}
			got = append(got, event{e.Type, e.Reason, e.Message})
		}
		slices.SortFunc(got, func(a, b event) int { return strings.Compare(a.Reason+a.Message, b.Reason+b.Message) })
		if !slices.ContainsFunc(got, func(e event) bool { return e.Reason == v1alpha1.EventKeepFailed }) {
			return fmt.Errorf("no KeepFailed event yet: %v", got)
		}
		return nil
	})
	slices.SortFunc(wantEvents, func(a, b event) int { return strings.Compare(a.Reason+a.Message, b.Reason+b.Message) })
	if d := cmp.Diff(wantEvents, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}
