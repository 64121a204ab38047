// Package integration_test checks internal/admitscope's matchConditions on a real
// kube-apiserver (internal/testenv): the chart's MutatingWebhookConfiguration, with the
// generated conditions, calls a recording webhook on 127.0.0.1 for the pods the API server
// sends, and every pod the webhook's own decision covers must have been sent.
package integration_test

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/enix/kuik/internal/testenv"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, testenv.Options{}, &cp)) }

// recorder is a webhook that admits everything unchanged and records, per URL path (one
// webhook configuration each), the requests it was sent.
type recorder struct {
	url string
	mu  sync.Mutex
	got map[string]map[string]bool // path -> "<name> <operation> <subresource>"
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	pair, err := cp.CA.ServingPair()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{url: "https://" + ln.Addr().String(), got: map[string]map[string]bool{}}
	srv := &http.Server{Handler: r, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	key := strings.Join([]string{review.Request.Name, string(review.Request.Operation), review.Request.SubResource}, " ")
	r.mu.Lock()
	if r.got[req.URL.Path] == nil {
		r.got[req.URL.Path] = map[string]bool{}
	}
	r.got[req.URL.Path][key] = true
	r.mu.Unlock()
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// sent reports whether the webhook of path was sent the request (a pod CREATE when
// subresource is empty).
func (r *recorder) sent(path, name, operation, subresource string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[path][strings.Join([]string{name, operation, subresource}, " ")]
}
