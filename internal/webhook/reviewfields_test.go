package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"

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
		if a, b := serve(fast, body), serve(fast.slow, body); a != b {
			t.Fatalf("kuik answered\n%s\ncontroller-runtime answered\n%s\nto %q", a, b, body)
		}
	})
}

// mutatorFields is what the pod mutator reads of a request (reviewFields).
func mutatorFields(r *admissionv1.AdmissionRequest) admissionv1.AdmissionRequest {
	return admissionv1.AdmissionRequest{
		UID: r.UID, Kind: r.Kind, SubResource: r.SubResource, Name: r.Name, Namespace: r.Namespace,
		Operation: r.Operation, Object: r.Object, OldObject: r.OldObject,
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

func serve(h http.Handler, body []byte) string {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, r)
	return rec.Body.String()
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
