package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/metrics"
)

// maxReviewBytes is the size of a request body controller-runtime's webhook refuses; smaller
// ones it reads.
const maxReviewBytes = 7 * 1024 * 1024

// reviewHandler serves the pod webhook. An AdmissionReview of admission.k8s.io/v1 written as
// the API server writes one is read by the walker, only the fields the pod mutator and its
// logger read (reviewFields), and answered as controller-runtime's webhook would answer it.
// Every other request (another version or content type, a field twice or under another case,
// a value of another type, a body too large, anything not JSON) goes to slow,
// controller-runtime's webhook, which answers it as before.
//
// controller-runtime decodes the whole review twice (once with encoding/json to find its kind,
// once by reflection into every field of the request, the pod's bytes checked again), which
// measured 180 µs of the 440 µs a no-op webhook's process spends on a pod (hack/bench/admission
// -profile), while the pod mutator reads eight fields, and its logger two more.
type reviewHandler struct {
	handler admission.Handler
	slow    *admission.Webhook
}

func (h *reviewHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, whole := readBody(r)
	var req admission.Request
	if !whole || r.Header.Get("Content-Type") != "application/json" || !decodeReviewFields(body, &req.AdmissionRequest) {
		if len(body) > 0 { // what was read, then the rest
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		}
		reviewsSlow().Inc()
		h.slow.ServeHTTP(w, r)
		return
	}
	reviewsFast().Inc()
	base := logf.Log.WithName("admission")
	logger := requestLogger(base, &req)
	logger.V(5).Info("received request")
	ctx := logf.IntoContext(r.Context(), logger)
	resp := h.handle(ctx, req)
	if err := resp.Complete(req); err != nil {
		logger.Error(err, "unable to encode response")
		resp = admission.Errored(http.StatusInternalServerError, err)
		resp.UID = req.UID
	}
	review := admissionv1.AdmissionReview{Response: &resp.AdmissionResponse}
	review.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	if err := json.NewEncoder(w).Encode(review); err != nil {
		base.Error(err, "unable to encode and write the response")
		return
	}
	if l := base.V(5); l.Enabled() {
		if res := resp.Result; res != nil {
			l = l.WithValues("code", res.Code, "reason", res.Reason, "message", res.Message)
		}
		l.Info("wrote response", "requestID", resp.UID, "allowed", resp.Allowed)
	}
}

var (
	reviewsFast = sync.OnceValue(func() prometheus.Counter { return metrics.PodReviews.WithLabelValues("kuik") })
	reviewsSlow = sync.OnceValue(func() prometheus.Counter { return metrics.PodReviews.WithLabelValues("controller-runtime") })
)

// handle is the handler's answer, an error answer if it panics, after the panic handlers (as
// controller-runtime's; the pod mutator recovers its own panics before).
func (h *reviewHandler) handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	defer func() {
		if r := recover(); r != nil {
			for _, fn := range utilruntime.PanicHandlers {
				fn(ctx, r)
			}
			resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("panic: %v [recovered]", r))
			resp.UID = req.UID
		}
	}()
	return h.handler.Handle(ctx, req)
}

// readBody reads r's body, less than maxReviewBytes of it; whole is false when it could not
// read all of it (an error, or a body of maxReviewBytes or more, which controller-runtime
// refuses): what it read is then still to be read again. Content-Length sizes the first buffer
// only, up to firstBuffer: a client may claim 7 MiB and send nothing.
func readBody(r *http.Request) (body []byte, whole bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false
	}
	size := int64(firstBuffer)
	if r.ContentLength > 0 {
		size = min(r.ContentLength, firstBuffer)
	}
	// ReadFrom wants MinRead bytes free before each read, the one that finds the end too.
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	n, err := buf.ReadFrom(io.LimitReader(r.Body, maxReviewBytes))
	return buf.Bytes(), err == nil && n > 0 && n < maxReviewBytes
}

// firstBuffer bounds the buffer a body is first read into (a pod's review is a few KiB).
const firstBuffer = 64 << 10

// decodeReviewFields reads into req what the pod mutator reads of an AdmissionReview's request
// (reviewFields), when body is an AdmissionReview of admission.k8s.io/v1 written as the API
// server writes it: valid JSON, each of these fields once, under its own name, with a value of
// its type (a string, an object; never null). It reads nothing else, and checks the syntax of
// all. false otherwise: controller-runtime's decoder then decides.
func decodeReviewFields(body []byte, req *admissionv1.AdmissionRequest) bool {
	w := walker{b: body}
	var apiVersion, kind string
	hasRequest := false
	ok := w.whole(func() bool {
		return w.object(func(key []byte) (bool, bool) {
			switch string(key) {
			case "apiVersion":
				return true, w.strTo(&apiVersion)
			case "kind":
				return true, w.strTo(&kind)
			case "request":
				hasRequest = true
				return true, w.object(func(key []byte) (bool, bool) {
					return reviewRequestField(&w, key, req)
				})
			}
			return false, !foldsTo(key, "apiVersion", "kind", "request")
		})
	})
	return ok && hasRequest && apiVersion == admissionv1.SchemeGroupVersion.String() && kind == "AdmissionReview"
}

// reviewFields are the fields of an AdmissionRequest the pod mutator and its logger read: what
// decodeReviewFields decodes. A field either comes to read must be added here.
// resource and userInfo.username are read for the request's logger (requestLogger logs them).
var reviewFields = []string{"uid", "kind", "resource", "subResource", "name", "namespace", "operation", "userInfo", "object", "oldObject"}

// The fields read of a request's kind, resource and userInfo.
var (
	kindFields     = []string{"group", "version", "kind"}
	resourceFields = []string{"group", "version", "resource"}
	userFields     = []string{"username"}
)

// reviewRequestField reads the request's member key into req when it is one of reviewFields.
func reviewRequestField(w *walker, key []byte, req *admissionv1.AdmissionRequest) (read, ok bool) {
	switch string(key) {
	case "uid":
		var uid string
		ok = w.strTo(&uid)
		req.UID = types.UID(uid)
	case "kind":
		ok = w.strings(kindFields, &req.Kind.Group, &req.Kind.Version, &req.Kind.Kind)
	case "resource":
		ok = w.strings(resourceFields, &req.Resource.Group, &req.Resource.Version, &req.Resource.Resource)
	case "userInfo":
		ok = w.strings(userFields, &req.UserInfo.Username)
	case "subResource":
		ok = w.strTo(&req.SubResource)
	case "name":
		ok = w.strTo(&req.Name)
	case "namespace":
		ok = w.strTo(&req.Namespace)
	case "operation":
		var op string
		ok = w.strTo(&op)
		req.Operation = admissionv1.Operation(op)
	case "object":
		ok = w.raw(&req.Object.Raw)
	case "oldObject":
		ok = w.raw(&req.OldObject.Raw)
	default:
		return false, !foldsTo(key, reviewFields...)
	}
	return true, ok
}
