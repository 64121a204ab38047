package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/metrics"
)

// FuzzReviewFieldsAreControllerRuntimes checks kuik's reading of a pod review against
// controller-runtime's: whenever kuik reads a body, it is JSON, controller-runtime reads the
// same values of the fields the mutator reads, and the pod webhook answers it as
// controller-runtime's webhook does, byte for byte.
func FuzzReviewFieldsAreControllerRuntimes(f *testing.F) {
	for _, seed := range seedReviews(f) {
		f.Add(seed)
	}
	for _, seed := range reviewSeeds {
		f.Add([]byte(seed))
	}
	fast := podHandler(f, fuzzHandlers(f))
	f.Fuzz(func(t *testing.T, body []byte) {
		var got admissionv1.AdmissionRequest
		if !decodeReviewFields(body, &got) {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("kuik read a review that is not JSON: %q", body)
		}
		want, ok := decodeReview(body)
		if !ok {
			// controller-runtime refuses a review one of whose other fields has another type;
			// the API server sends none.
			return
		}
		if diff := cmp.Diff(mutatorFields(want.AdmissionRequest), mutatorFields(&got)); diff != "" {
			t.Fatalf("what the mutator reads (-controller-runtime +kuik):\n%s\nof %q", diff, body)
		}
		if a, b := serve(fast, body), serve(fast.slow, body); a != b { // status, Content-Type, body
			t.Fatalf("kuik answered\n%s\ncontroller-runtime answered\n%s\nto %q", a, b, body)
		}
	})
}

// mutatorFields is what the pod mutator and its logger read of a request (reviewFields).
func mutatorFields(r *admissionv1.AdmissionRequest) admissionv1.AdmissionRequest {
	return admissionv1.AdmissionRequest{
		UID: r.UID, Kind: r.Kind, Resource: r.Resource, SubResource: r.SubResource, Name: r.Name, Namespace: r.Namespace,
		Operation: r.Operation, UserInfo: authenticationv1.UserInfo{Username: r.UserInfo.Username}, Object: r.Object, OldObject: r.OldObject,
	}
}

func podHandler(tb testing.TB, mux *http.ServeMux) *reviewHandler {
	tb.Helper()
	h, _ := mux.Handler(httptest.NewRequest(http.MethodPost, MutatePodsPath, nil))
	rh, ok := h.(*reviewHandler)
	if !ok {
		tb.Fatalf("the pod webhook is served by %T", h)
	}
	return rh
}

// serve is h's answer to body: its status, Content-Type and body.
func serve(h http.Handler, body []byte) string {
	return serveAs(h, "application/json", body)
}

func serveAs(h http.Handler, contentType string, body []byte) string {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	h.ServeHTTP(rec, r)
	return fmt.Sprintf("%d %s\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
}

// FuzzReviewFieldsReadOnlyJSON checks, faster than the target above (no request served), that
// what the walker reads of a review or a pod is JSON.
func FuzzReviewFieldsReadOnlyJSON(f *testing.F) {
	for _, seed := range reviewSeeds {
		f.Add([]byte(seed))
	}
	for _, seed := range decodeSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req admissionv1.AdmissionRequest
		if decodeReviewFields(body, &req) && !json.Valid(body) {
			t.Fatalf("the review read is not JSON: %q", body)
		}
		var pod podFields
		if decodeFields(body, &pod) && !json.Valid(body) {
			t.Fatalf("the pod read is not JSON: %q", body)
		}
	})
}

// reviewSeeds are the corners of the reviews kuik must leave to controller-runtime, or read as
// it does.
var reviewSeeds = []string{
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"n","object":{"spec":{"containers":[{"name":"a","image":"quay.io/acme/app:v1"}]}}}}`,
	`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}}`,
	`{"apiversion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","UID":"v"}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","uid":"v"}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":null}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","name":null}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","dryRun":true,"userInfo":{"username":"x"},"options":{}}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"Kind":"Pod"}}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\u0075"},"response":{"allowed":false}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}} x`,
	`{"kind":"AdmissionReview","request":{"uid":"u"}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"},"KIND":"x"}`,
	"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"a\x01\"}}",
	"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"a\\q\",\"userInfo\":{\"username\":\"b\\u00e9\"}}}",
	"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"u\",\"object\":{\"metadata\":{\"labels\":{\"a\":\"b\x1f\"}}}}}",
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"version":"v1","resource":"pods"},"userInfo":{"username":"alice","groups":["g"]}}}`,
	`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","userInfo":{"username":"a","Username":"b"}}}`,
}

// fullReview is a review as the API server writes one, of a pod kuik may route.
const fullReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"userInfo":{"username":"alice"},"operation":"CREATE","namespace":"n","object":{"spec":{"containers":[{"name":"a","image":"quay.io/acme/app:v1"}]}}}}`

// The request's logger has the same values whichever decoder read the review.
func TestRequestLoggerHasTheSameValuesWhicheverDecoderReadTheReview(t *testing.T) {
	var kv []any
	h := admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		l, err := logr.FromContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := l.GetSink().(deferredSink)
		if !ok {
			t.Fatalf("the request's logger has a sink %T", l.GetSink())
		}
		kv = s.kv
		return admission.Allowed("")
	})
	rh := &reviewHandler{handler: h, slow: &ctrlwebhook.Admission{Handler: h, LogConstructor: requestLogger}}
	var req admissionv1.AdmissionRequest
	if !decodeReviewFields([]byte(fullReview), &req) {
		t.Fatal("kuik does not read the review")
	}
	serve(rh, []byte(fullReview))
	fast := fmt.Sprint(kv)
	serve(rh.slow, []byte(fullReview))
	if slow := fmt.Sprint(kv); fast != slow || !strings.Contains(fast, "alice") {
		t.Errorf("the request's logger values\nkuik:               %s\ncontroller-runtime: %s", fast, slow)
	}
}

// A body of controller-runtime's limit, or over it, or of another content type, is answered by
// controller-runtime.
func TestABodyKuikDoesNotReadIsControllerRuntimes(t *testing.T) {
	rh := podHandler(t, fuzzHandlers(t))
	body := []byte(fullReview)
	padded := func(n int) []byte { return append(bytes.Clone(body), bytes.Repeat([]byte(" "), n-len(body))...) }
	for name, tc := range map[string]struct {
		contentType string
		body        []byte
	}{
		"at the limit":       {"application/json", padded(maxReviewBytes)},
		"over the limit":     {"application/json", padded(maxReviewBytes + 1)},
		"just under it":      {"application/json", padded(maxReviewBytes - 1)},
		"another media type": {"text/plain", body},
	} {
		t.Run(name, func(t *testing.T) {
			if got, want := serveAs(rh, tc.contentType, tc.body), serveAs(rh.slow, tc.contentType, tc.body); got != want {
				t.Errorf("kuik answered %.300s\ncontroller-runtime %.300s", got, want)
			}
		})
	}
}

// A request without a body is controller-runtime's to refuse.
func TestARequestWithoutABodyIsControllerRuntimes(t *testing.T) {
	rh := podHandler(t, fuzzHandlers(t))
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, MutatePodsPath, nil)
		r.Body = body
		r.Header.Set("Content-Type", "application/json")
		rh.ServeHTTP(rec, r)
		if !strings.Contains(rec.Body.String(), "request body is empty") {
			t.Errorf("body %v: answered %d %s", body, rec.Code, rec.Body.String())
		}
	}
}

// blockedBody is a body that sends nothing until released.
type blockedBody struct{ release chan struct{} }

func (b blockedBody) Read([]byte) (int, error) { <-b.release; return 0, io.EOF }

// Requests that claim a 7 MiB body and send none cost no 7 MiB each.
func TestAClaimedContentLengthIsNotAllocatedBeforeTheBytesCome(t *testing.T) {
	allow := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })
	rh := &reviewHandler{handler: allow, slow: &ctrlwebhook.Admission{Handler: allow}}
	const n = 20
	runtime.GC()
	var before, during runtime.MemStats
	runtime.ReadMemStats(&before)
	release := make(chan struct{})
	done := make(chan struct{}, n)
	for range n {
		r := httptest.NewRequest(http.MethodPost, MutatePodsPath, blockedBody{release})
		r.ContentLength = maxReviewBytes - 1
		r.Header.Set("Content-Type", "application/json")
		go func() { rh.ServeHTTP(httptest.NewRecorder(), r); done <- struct{}{} }()
	}
	time.Sleep(200 * time.Millisecond)
	runtime.ReadMemStats(&during)
	close(release)
	for range n {
		<-done
	}
	if grew := (int64(during.HeapInuse) - int64(before.HeapInuse)) >> 20; grew > 16 {
		t.Errorf("%d requests that sent no byte hold %d MiB (Content-Length trusted)", n, grew)
	}
}

// chunked sends its bytes n at a time.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// A body whose end comes in a read of its own is read into the buffer Content-Length sized.
func TestReadBodyDoesNotGrowPastItsContentLength(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 50_000)
	r := &http.Request{ContentLength: int64(len(body)), Body: io.NopCloser(&chunked{b: body, n: 16384})}
	got, whole := readBody(r)
	if !whole || !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes, whole %t", len(got), whole)
	}
	if cap(got) > len(body)+bytes.MinRead {
		t.Errorf("a buffer of %d bytes for a body of %d", cap(got), len(body))
	}
}

// The reviews the API server writes (seedReviews of admission.k8s.io/v1: creations, ephemeral
// containers, dry runs, other kinds) are read by kuik, and every other request by
// controller-runtime: counted so.
func TestPodReviewsAreReadByKuikAsTheAPIServerWritesThem(t *testing.T) {
	h := podHandler(t, fuzzHandlers(t))
	count := func() (kuik, cr float64) {
		return testutil.ToFloat64(metrics.PodReviews.WithLabelValues("kuik")), testutil.ToFloat64(metrics.PodReviews.WithLabelValues("controller-runtime"))
	}
	for _, body := range seedReviews(t) {
		if !bytes.Contains(body, []byte(`"apiVersion":"admission.k8s.io/v1",`)) || !bytes.Contains(body, []byte(`"request":`)) {
			continue
		}
		var req admissionv1.AdmissionRequest
		if !decodeReviewFields(body, &req) {
			t.Errorf("left to controller-runtime: %s", body)
		}
		k0, c0 := count()
		serve(h, body)
		if k, c := count(); k != k0+1 || c != c0 {
			t.Errorf("counted %v by kuik and %v by controller-runtime, want 1 and 0, for %s", k-k0, c-c0, body)
		}
	}
	for _, body := range []string{reviewSeeds[1], reviewSeeds[3], "", "{", strings.Repeat(" ", maxReviewBytes+1)} {
		k0, c0 := count()
		out := serve(h, []byte(body))
		if k, c := count(); k != k0 || c != c0+1 {
			t.Errorf("counted %v by kuik and %v by controller-runtime, want 0 and 1, for %.80q", k-k0, c-c0, body)
		}
		if !strings.Contains(out, `"response"`) {
			t.Errorf("no AdmissionReview answered to %.80q: %s", body, out)
		}
	}
}
