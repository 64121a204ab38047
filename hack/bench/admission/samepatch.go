package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/benchutil"
)

// patchSet is what the same-patch webhook returns: by namespace (a scenario's), then by round
// (roundPrefix; "" for every round), the JSON patch kuik returns for the pods of that scenario
// and round. A pod it has no patch for is admitted unchanged, as kuik admits it.
type patchSet map[string]map[string][]byte

func readPatches(path string) (patchSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p patchSet
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("reading the patches %s: %w", path, err)
	}
	return p, nil
}

// admit answers req with its patch. It reads nothing of the pod but what the AdmissionRequest
// names (its namespace and name), so it does the no-op webhook's work and returns a patch.
func (p patchSet) admit(req admission.Request) admission.Response {
	byRound := p[req.Namespace]
	patch, ok := byRound[""]
	if !ok {
		round, _, _ := strings.Cut(req.Name, "-")
		patch, ok = byRound[round]
	}
	if !ok {
		return admission.Allowed("")
	}
	resp := admission.Allowed("")
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType, resp.Patch = &pt, patch
	return resp
}

// samePatch asks kuik's webhook, once per scenario, for the patch of one of its pods, and
// starts the same-patch webhook with those patches.
//
// The pod asked about has the warm-up's image, which no round uses: for the hanging upstream,
// asking leaves each round's probe to the round. A scenario whose image changes with the round
// (the hanging upstream's tag) gets, for each round, kuik's patch with that round's original
// and rewritten images in place of the asked ones. The rounds' check (samePods) proves that
// every patch gives the pods kuik gives.
func (s *stack) samePatch(ctx context.Context, scenarios []scenario) error {
	patches := patchSet{}
	for i, sc := range scenarios {
		asked, askedWant := sc.image(*flagRounds), sc.want(*flagRounds)
		patch, err := askKuik(ctx, s.wh.port, s.cp.CA.PEM, benchutil.PlainPod(nsName(i), "same-patch", asked, 0))
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		s.askedPatches[i] = patch
		if len(patch) == 0 {
			continue
		}
		if sc.image(0) == asked {
			patches[nsName(i)] = map[string][]byte{"": patch}
			continue
		}
		byRound := map[string][]byte{}
		for r := range *flagRounds {
			p := bytes.ReplaceAll(patch, []byte(asked), []byte(sc.image(r)))
			byRound[roundPrefix(r)] = bytes.ReplaceAll(p, []byte(askedWant), []byte(sc.want(r)))
		}
		patches[nsName(i)] = byRound
	}
	b, err := json.Marshal(patches)
	if err != nil {
		return err
	}
	file := filepath.Join(s.wh.dir, "same-patches.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	if s.same, err = startNoop(ctx, s.wh.certDir, s.cp.CA.PEM, file); err != nil {
		return err
	}
	chart, err := s.chart.WebhookConfigurations(s.same.port, s.cp.CA.PEM)
	if err != nil {
		return err
	}
	s.configs[modeSame] = mutatingOf(chart)
	s.procs[modeSame] = s.same
	return nil
}

// askKuik sends kuik's webhook the AdmissionReview the API server would send for creating pod,
// and returns the JSON patch of its answer (nil for none).
func askKuik(ctx context.Context, port int, caPEM []byte, pod *corev1.Pod) ([]byte, error) {
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             types.UID("same-patch-" + pod.Namespace),
			Kind:            metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:        metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			RequestKind:     &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			RequestResource: &metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Operation:       admissionv1.Create,
			UserInfo:        authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
			Object:          runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://127.0.0.1:"+strconv.Itoa(port)+"/mutate-pods", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking kuik's webhook: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking kuik's webhook: %s", resp.Status)
	}
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return nil, fmt.Errorf("decoding kuik's answer: %w", err)
	}
	r := answer.Response
	switch {
	case r == nil || !r.Allowed:
		return nil, fmt.Errorf("kuik's webhook did not allow the pod: %+v", r)
	case len(r.Warnings) > 0 || len(r.AuditAnnotations) > 0:
		return nil, fmt.Errorf("kuik's webhook warned %v or annotated %v: the same-patch webhook would not answer the same", r.Warnings, r.AuditAnnotations)
	case len(r.Patch) > 0 && (r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch):
		return nil, fmt.Errorf("kuik's webhook answered a patch of type %v", r.PatchType)
	}
	return r.Patch, nil
}
