package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// NamespaceLabels returns a namespace's labels (from an informer's cache).
type NamespaceLabels func(ctx context.Context, namespace string) (labels.Set, error)

// PodMutator is the mutating admission handler for pods and pods/ephemeralcontainers.
type PodMutator struct {
	// Index is the current routing index; nil until the informers have synced.
	Index      *atomic.Pointer[routing.Index]
	Namespaces NamespaceLabels
	Choose     route.Chooser
}

const mutateWebhook = "mutate-pods"

// Handle routes the pod and answers with a JSON patch. It never denies: any internal error
// admits the pod unchanged, with a warning, logged and counted.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	// Built only when something is logged: the common admission logs nothing.
	logger := func() logr.Logger {
		return log.FromContext(ctx).WithValues("namespace", req.Namespace, "name", req.Name, "uid", req.UID)
	}
	result := admissionsUnchanged
	defer func() {
		if r := recover(); r != nil {
			logger().Error(fmt.Errorf("panic: %v", r), "Admitting pod unchanged after a panic")
			metrics.AdmissionErrors.WithLabelValues("panic").Inc()
			resp, result = admitUnchanged("internal error"), admissionsError
		}
		result().Inc()
		admissionDuration().Observe(time.Since(start).Seconds())
	}()

	ops, decisions, stage, err := m.mutate(ctx, req)
	if err != nil {
		logger().Error(err, "Admitting pod unchanged", "stage", stage)
		metrics.AdmissionErrors.WithLabelValues(stage).Inc()
		result = admissionsError
		return admitUnchanged(stage)
	}
	// The context's logger without a copy (log.FromContext's WithValues makes one).
	debug := log.Log
	if l, err := logr.FromContext(ctx); err == nil {
		debug = l
	}
	debug = debug.V(1)
	for _, d := range decisions {
		if d.DryRun != nil {
			metrics.DryRunDecisions.WithLabelValues(string(d.DryRun.Resource.Kind), d.DryRun.Resource.Name, d.DryRun.Reason).Inc()
			if debug.Enabled() {
				debug.Info("Dry run: would route container otherwise", "namespace", req.Namespace, "name", req.Name, "uid", req.UID, "container", d.Container, "image", d.Image, "would", d.DryRun.Image, "by", d.DryRun.By, "reason", d.DryRun.Reason)
			}
		}
		switch {
		case d.Pinned:
			digestsPinned().Inc()
		case d.Unpinned:
			digestsUnpinned().Inc()
		}
		switch {
		case d.Image != d.Original:
			metrics.Rewrites.WithLabelValues(string(d.Source.Kind), d.Source.Name, d.Reason).Inc()
			if debug.Enabled() {
				debug.Info("Rewrote container image", "namespace", req.Namespace, "name", req.Name, "uid", req.UID, "container", d.Container, "from", d.Original, "to", d.Image, "by", d.Source.String(), "reason", d.Reason)
			}
		case d.Reason != "":
			// Counted always, logged at V(1) only: during an outage every pod of a rollout
			// would log it, and the metric and the pod's reason annotation already say it.
			metrics.NoAlternatives.Inc()
			if debug.Enabled() {
				debug.Info("No candidate available, container left untouched", "namespace", req.Namespace, "name", req.Name, "uid", req.UID, "container", d.Container, "image", d.Original, "candidates", d.Candidates)
			}
		}
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	result = admissionsPatched
	// The patch's bytes, not admission.Patched's operations, which controller-runtime would
	// encode again by reflection.
	resp = admission.Allowed("")
	resp.Patch, resp.PatchType = ops, &jsonPatch
	return resp
}

var jsonPatch = admissionv1.PatchTypeJSONPatch

// The series every pod admission counts, each looked up once (on first use, as WithLabelValues
// would create it) rather than hashed and looked up on every admission.
var (
	admissionsUnchanged = sync.OnceValue(func() prometheus.Counter { return metrics.Admissions.WithLabelValues(mutateWebhook, "unchanged") })
	admissionsPatched   = sync.OnceValue(func() prometheus.Counter { return metrics.Admissions.WithLabelValues(mutateWebhook, "patched") })
	admissionsError     = sync.OnceValue(func() prometheus.Counter { return metrics.Admissions.WithLabelValues(mutateWebhook, "error") })
	admissionDuration   = sync.OnceValue(func() prometheus.Observer { return metrics.AdmissionDuration.WithLabelValues(mutateWebhook) })
	digestsPinned       = sync.OnceValue(func() prometheus.Counter { return metrics.DigestPins.WithLabelValues("pinned") })
	digestsUnpinned     = sync.OnceValue(func() prometheus.Counter { return metrics.DigestPins.WithLabelValues("no-digest") })
)

func admitUnchanged(stage string) admission.Response {
	return admission.Allowed("").WithWarnings("kuik: image routing skipped after an internal error (" + stage + ")")
}

// mutate returns the JSON patch for the pod, empty when nothing changes.
func (m *PodMutator) mutate(ctx context.Context, req admission.Request) (ops []byte, decisions []route.Decision, stage string, err error) {
	var scope route.Scope
	switch {
	case req.Kind.Kind != "Pod":
		return nil, nil, "", nil
	case req.SubResource == "" && req.Operation == admissionv1.Create:
	case req.SubResource == "ephemeralcontainers" && req.Operation == admissionv1.Update:
		scope.EphemeralOnly = true
		scope.Previous = &corev1.Pod{}
		if err := decodePod(req.OldObject.Raw, scope.Previous); err != nil {
			return nil, nil, "decode", fmt.Errorf("decoding old pod: %w", err)
		}
	default:
		return nil, nil, "", nil
	}
	var decoded corev1.Pod // on the stack: Route and the patch keep nothing of it
	pod := &decoded
	if err := decodePod(req.Object.Raw, pod); err != nil {
		return nil, nil, "decode", fmt.Errorf("decoding pod: %w", err)
	}
	ix := m.Index.Load()
	if ix == nil {
		return nil, nil, "index", errors.New("routing index not built yet")
	}
	namespace := req.Namespace
	if namespace == "" {
		namespace = pod.Namespace
	}
	nsLabels, err := m.Namespaces(ctx, namespace)
	if err != nil {
		return nil, nil, "namespace", fmt.Errorf("reading labels of namespace %s: %w", namespace, err)
	}
	b := snapshot(pod)
	decisions, err = route.Route(ctx, pod, nsLabels, ix, m.Choose, scope)
	if err != nil {
		return nil, nil, "route", err
	}
	// kuik's records must not take a pod the API server would admit over its limit on
	// annotations: the pod would be refused because of kuik. The dry-run record goes first (a
	// dry run must not change what is decided); if that is not enough the pod is admitted
	// unchanged.
	if _, ok := pod.Annotations[v1alpha1.AnnotationDryRun]; ok && annotationsSize(pod.Annotations) > apivalidation.TotalAnnotationSizeLimitB {
		delete(pod.Annotations, v1alpha1.AnnotationDryRun)
		for i := range decisions {
			decisions[i].DryRun = nil
		}
	}
	if after := annotationsSize(pod.Annotations); after > apivalidation.TotalAnnotationSizeLimitB && b.annotationsSize <= apivalidation.TotalAnnotationSizeLimitB {
		return nil, nil, "annotations", fmt.Errorf("kuik's records would take the pod's annotations to %d bytes, over the API server's limit of %d", after, apivalidation.TotalAnnotationSizeLimitB)
	}
	// Nor must they be more than the secret-syncer keeps of a pod: it would count the pod as
	// not rewritten, and never write the credential the pod is routed to.
	if n := recordBytes(pod); n > routing.MaxRecordBytes {
		return nil, nil, "records", fmt.Errorf("kuik's records would take %d bytes, over the %d the secret-syncer keeps of a pod", n, routing.MaxRecordBytes)
	}
	return patch(b, pod, decisions), decisions, "", nil
}

// recordBytes is the size of kuik's records on a pod as the secret-syncer counts it
// (routing.RecordBytes of every container rewritten-by names).
func recordBytes(pod *corev1.Pod) int {
	n := 0
	for r := range route.RewrittenContainers(pod) {
		n += routing.RecordBytes(r.Container, r.Original, r.Image, r.By)
	}
	return n
}

// annotationsSize is the size the API server limits: every key and value, in bytes.
func annotationsSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

var _ admission.Handler = (*PodMutator)(nil)
