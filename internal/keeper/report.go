package keeper

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep/transfer"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// maxEventNote keeps an event message readable.
const maxEventNote = 1024

// reporter publishes the scheduler's outcomes as core/v1 events on the ImageMirror, and its
// status.keep and KeepReady condition by server-side apply, owned by FieldManager: the
// syncer's status fields are another manager's and stay as they are.
type reporter struct {
	client   client.Client
	recorder record.EventRecorder
	// interval is the least time between two status writes of one mirror.
	interval time.Duration
	now      func() time.Time

	mu sync.Mutex
	// written is when each mirror's status was last written.
	written map[types.UID]time.Time
}

func newReporter(c client.Client, recorder record.EventRecorder, interval time.Duration, now func() time.Time) *reporter {
	if now == nil {
		now = time.Now
	}
	return &reporter{client: c, recorder: recorder, interval: interval, now: now, written: map[types.UID]time.Time{}}
}

// Outcome emits ImageKept when the copy wrote the image (Copied or Tagged), KeepFailed when it
// failed; nothing when the image was already there.
func (r *reporter) Outcome(_ context.Context, mirror *v1alpha1.ImageMirror, o Outcome) {
	if r.recorder == nil {
		return
	}
	if o.Err != nil {
		note := fmt.Sprintf("%s: %s: %v", o.Want.Origin, o.Reason, o.Err)
		r.recorder.Event(mirror, corev1.EventTypeWarning, v1alpha1.EventKeepFailed, eventNote(note))
		return
	}
	switch o.Result.Action {
	case transfer.Copied, transfer.Tagged:
		note := fmt.Sprintf("%s → %s (%s): %s", o.Want.Origin, o.Want.Destination, o.Result.Digest, o.Result.Action)
		r.recorder.Event(mirror, corev1.EventTypeNormal, v1alpha1.EventImageKept, eventNote(note))
	}
}

// eventNote bounds an event message to maxEventNote bytes.
func eventNote(note string) string {
	if len(note) > maxEventNote {
		return strings.ToValidUTF8(note[:maxEventNote-3], "") + "..."
	}
	return note
}

// Status applies status.keep and the KeepReady condition of mirror, and nothing else, as
// FieldManager. It writes nothing when mirror (the cached object) already shows them, nor
// within the status interval of the previous write of this mirror: the scheduler calls it
// every pass, and the next pass writes what was held back. The condition keeps its
// lastTransitionTime while its status does not change.
func (r *reporter) Status(ctx context.Context, mirror *v1alpha1.ImageMirror, st v1alpha1.KeepStatus, ready metav1.Condition) error {
	// The API server keeps seconds: compare and write what it will hold.
	st.Failures = slices.Clone(st.Failures)
	for i := range st.Failures {
		st.Failures[i].LastAttempt = apiSeconds(st.Failures[i].LastAttempt)
	}
	ready.LastTransitionTime = apiSeconds(ready.LastTransitionTime)
	ready.Type = v1alpha1.ConditionKeepReady
	if ready.ObservedGeneration == 0 {
		ready.ObservedGeneration = mirror.Generation
	}
	current := meta.FindStatusCondition(mirror.Status.Conditions, v1alpha1.ConditionKeepReady)
	switch {
	case current != nil && current.Status == ready.Status:
		ready.LastTransitionTime = current.LastTransitionTime
	case ready.LastTransitionTime.IsZero():
		ready.LastTransitionTime = apiSeconds(metav1.NewTime(r.now()))
	}
	if current != nil && equality.Semantic.DeepEqual(*current, ready) && equality.Semantic.DeepEqual(mirror.Status.Keep, &st) {
		return nil
	}
	now := r.now()
	r.mu.Lock()
	last, ok := r.written[mirror.UID]
	if ok && now.Sub(last) < r.interval {
		r.mu.Unlock()
		return nil
	}
	r.written[mirror.UID] = now
	r.mu.Unlock()

	patch, err := statusPatch(mirror.Name, &st, &ready)
	if err != nil {
		return err
	}
	if err := r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		r.mu.Lock()
		delete(r.written, mirror.UID)
		r.mu.Unlock()
		if apierrors.IsNotFound(err) {
			return nil // the mirror is gone
		}
		return fmt.Errorf("applying the keep status of ImageMirror %q: %w", mirror.Name, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("keep status written", "imageMirror", mirror.Name, "ready", ready.Status, "reason", ready.Reason)
	return nil
}

// apiSeconds is t truncated to the second, as the API server stores it.
func apiSeconds(t metav1.Time) metav1.Time {
	if t.IsZero() {
		return t
	}
	return metav1.NewTime(t.Truncate(time.Second))
}

// statusPatch is the apply patch of an ImageMirror's status.keep and KeepReady condition. The
// conditions list is a map keyed by type: the apply owns the KeepReady item only.
func statusPatch(name string, st *v1alpha1.KeepStatus, ready *metav1.Condition) (*unstructured.Unstructured, error) {
	keep, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
	if err != nil {
		return nil, fmt.Errorf("encoding status.keep: %w", err)
	}
	cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ready)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s condition: %w", v1alpha1.ConditionKeepReady, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "ImageMirror",
		"metadata":   map[string]any{"name": name},
		"status":     map[string]any{"keep": keep, "conditions": []any{cond}},
	}}, nil
}
