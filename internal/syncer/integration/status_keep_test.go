package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// keeperManager is the field manager the keeper applies status.keep and KeepReady with.
const keeperManager = "kuik-keeper"

var imageMirrors = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "imagemirrors"}

// applyKeep writes status.keep and the KeepReady condition as the keeper does: server-side
// apply of those fields only, as kuik-keeper.
func applyKeep(ctx context.Context, dyn dynamic.Interface, name, message string, present int64) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "ImageMirror",
		"metadata":   map[string]any{"name": name},
		"status": map[string]any{
			"keep": map[string]any{"desired": int64(3), "present": present},
			"conditions": []any{map[string]any{
				"type": v1alpha1.ConditionKeepReady, "status": "True", "reason": "Kept", "message": message,
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		},
	}}
	_, err := dyn.Resource(imageMirrors).ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: keeperManager, Force: true})
	return err
}

// The syncer writes Ready by a merge patch of the conditions list; the keeper applies
// KeepReady and status.keep. The syncer keeps both however often it writes, and also when the
// keeper writes between the syncer's cache read and its patch: that patch is held until the
// keeper's apply is done.
func TestSyncerKeepsTheKeepersStatus(t *testing.T) {
	e := harness(t)
	n := name(t)
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	im := testutil.NewImageMirror(n, "registry.tld/mirror/").Policy(v1alpha1.RewritePolicyAlways).Build()
	im.Spec.Keep = &v1alpha1.MirrorKeep{}
	create(t, e, &im)
	if err := applyKeep(t.Context(), dyn, n, "before the syncer", 1); err != nil {
		t.Fatal(err)
	}

	// race, when set, is the message the keeper applies just before the syncer's next status
	// patch that carries conditions reaches the API server.
	var race atomic.Pointer[string]
	var raced atomic.Int32
	cfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/imagemirrors/"+n+"/status") || req.Body == nil {
				return rt.RoundTrip(req)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if msg := race.Load(); msg != nil && bytes.Contains(body, []byte(`"conditions"`)) && race.CompareAndSwap(msg, nil) {
				if err := applyKeep(req.Context(), dyn, n, *msg, 2); err != nil {
					return nil, fmt.Errorf("the keeper's apply in the race: %w", err)
				}
				raced.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	startSyncerWith(t, syncerConfig(), cfg, nil)

	// holds waits until Ready is at the mirror's generation and KeepReady says message.
	holds := func(message string, present int32) {
		t.Helper()
		eventually(t, fmt.Sprintf("Ready at the generation, KeepReady %q, keep.present %d", message, present), func(ctx context.Context) error {
			var got v1alpha1.ImageMirror
			if err := e.cl.Get(ctx, clientKey(n), &got); err != nil {
				return err
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			switch {
			case ready == nil || ready.ObservedGeneration != got.Generation || got.Status.ObservedGeneration != got.Generation:
				return fmt.Errorf("ready %+v, observedGeneration %d, generation %d", ready, got.Status.ObservedGeneration, got.Generation)
			}
			keep := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionKeepReady)
			if keep == nil || keep.Message != message {
				return fmt.Errorf("KeepReady %+v, want message %q", keep, message)
			}
			if got.Status.Keep == nil || got.Status.Keep.Desired != 3 || got.Status.Keep.Present != present {
				return fmt.Errorf("status.keep %+v, want desired 3, present %d", got.Status.Keep, present)
			}
			owners := map[string]bool{}
			for _, mf := range got.ManagedFields {
				if mf.Subresource == "status" {
					owners[mf.Manager] = true
				}
			}
			if !owners[keeperManager] {
				return fmt.Errorf("status managers %v, want %s among them", owners, keeperManager)
			}
			return nil
		})
	}
	bump := func(i int) {
		t.Helper()
		var cur v1alpha1.ImageMirror
		if err := e.cl.Get(t.Context(), clientKey(n), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.ExcludeImages = append(cur.Spec.ExcludeImages, fmt.Sprintf("example.com/excluded-%d", i))
		if err := e.cl.Update(t.Context(), &cur); err != nil {
			t.Fatal(err)
		}
	}

	holds("before the syncer", 1)
	for i := range 3 { // the syncer writes Ready again at each generation
		bump(i)
		holds("before the syncer", 1)
	}
	for i := range 2 { // the keeper writes between the syncer's read and its patch
		msg := fmt.Sprintf("in the race %d", i)
		race.Store(&msg)
		bump(10 + i)
		holds(msg, 2)
		if race.Load() != nil {
			t.Fatalf("race %d: the syncer sent no status patch with conditions: the test proves nothing", i)
		}
	}
	if got := raced.Load(); got != 2 {
		t.Errorf("the keeper applied in %d races, want 2", got)
	}
}
