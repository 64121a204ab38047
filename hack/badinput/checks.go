package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// checkSecrets waits for the syncer to settle and checks every kuik-inject-* Secret decodes as
// dockerconfigjson, by the kubelet's rules (kuik's credentials parser) and entry by entry.
func (w *world) checkSecrets(ctx context.Context) error {
	fmt.Printf("\n== 3. Secrets written by the secret-syncer\n")
	// Settled: the count of kuik-inject-* Secrets stands still for 3 s.
	var list *corev1.SecretList
	last, stable := -1, 0
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := w.proto.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer})
		if err != nil {
			return false, nil
		}
		list = l
		if len(l.Items) == last {
			stable++
		} else {
			last, stable = len(l.Items), 0
		}
		return stable >= 6, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the syncer's Secrets to settle: %w", err)
	}
	var inject, bytesTotal, maxSize, entries int
	for _, s := range list.Items {
		if !strings.HasPrefix(s.Name, "kuik-inject-") {
			continue
		}
		inject++
		where := s.Namespace + "/" + s.Name
		if s.Type != corev1.SecretTypeDockerConfigJson {
			w.fail.add("%s: type %s", where, s.Type)
			continue
		}
		raw := s.Data[corev1.DockerConfigJsonKey]
		bytesTotal += len(raw)
		maxSize = max(maxSize, len(raw))
		if !utf8.Valid(raw) {
			w.fail.add("%s: .dockerconfigjson is not valid UTF-8", where)
		}
		var doc struct {
			Auths map[string]struct {
				Auth     *string `json:"auth"`
				Username *string `json:"username"`
				Password *string `json:"password"`
			} `json:"auths"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			w.fail.add("%s: .dockerconfigjson does not decode: %v", where, err)
			continue
		}
		if _, err := credentials.Parse(raw); err != nil {
			w.fail.add("%s: kuik's own parser refuses it: %v", where, err)
		}
		for key, e := range doc.Auths {
			entries++
			if key == "" || !utf8.ValidString(key) {
				w.fail.add("%s: entry key %q", where, key)
			}
			if e.Auth == nil {
				if e.Username == nil || e.Password == nil {
					w.fail.add("%s: entry %s has no auth and no username/password", where, key)
				}
				continue
			}
			dec, err := base64.StdEncoding.DecodeString(*e.Auth)
			if err != nil || !bytes.Contains(dec, []byte(":")) || !utf8.Valid(dec) {
				w.fail.add("%s: entry %s: auth %q does not decode to user:password", where, key, *e.Auth)
			}
		}
	}
	fmt.Printf("%d kuik-inject-* Secrets, %d entries, every one decodes as dockerconfigjson (user:password); %d KiB in all, the largest %d bytes\n",
		inject, entries, bytesTotal/1024, maxSize)
	// What the syncer says of the resources on the bad Secrets.
	for _, name := range []string{"always-" + secretBig, "always-" + secretUndecodable, "always-" + secretGarbage, "flood-000", "flood-001", "flood-002", "flood-003"} {
		ia := &v1alpha1.ImageAlternative{}
		if err := w.cl.Get(ctx, client.ObjectKey{Name: name}, ia); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		cond := "no Ready condition"
		for _, c := range ia.Status.Conditions {
			if c.Type == "Ready" {
				cond = fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		if len(cond) > 200 {
			cond = cond[:200] + "…"
		}
		fmt.Printf("%-22s %s\n", name, cond)
	}
	return nil
}

// checkPods reads every pod back as protobuf (the bytes as stored) and checks each pod kuik
// patched: its annotations are valid UTF-8 and kuik's are JSON objects of strings.
func (w *world) checkPods(ctx context.Context) error {
	fmt.Printf("\n== 4. Pods as stored (read as protobuf)\n")
	var patched, untouchedInvalid int
	for _, ns := range []string{nsFlood, nsMirrored, nsPlain} {
		pods, err := w.proto.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			_, reason := p.Annotations[v1alpha1.AnnotationReason]
			if p.Labels[v1alpha1.LabelRewritten] != "true" && !reason {
				continue
			}
			valid := true
			for k, v := range p.Annotations {
				if !utf8.ValidString(v) {
					valid = false
				}
				if strings.HasPrefix(k, "kuik.enix.io/") && utf8.ValidString(v) {
					var m map[string]string
					if err := json.Unmarshal([]byte(v), &m); err != nil && k != "kuik.enix.io/other" {
						w.fail.add("pod %s/%s: annotation %s is not a JSON object of strings: %v", ns, p.Name, k, err)
					}
				}
			}
			if p.Labels[v1alpha1.LabelRewritten] != "true" && !valid {
				// kuik wrote nothing here: the user's bytes are the user's.
				untouchedInvalid++
				continue
			}
			patched++
			if !valid {
				w.fail.add("pod %s/%s, patched by kuik, has annotations in invalid UTF-8", ns, p.Name)
			}
		}
	}
	fmt.Printf("%d pods kuik patched: every annotation valid UTF-8, kuik's valid JSON (%d with invalid UTF-8 kuik left alone)\n", patched, untouchedInvalid)
	return nil
}

// histogram prints the webhook's own admission-duration histogram (kuik_webhook_admission_duration_seconds).
func histogram() {
	fmt.Printf("\n== 5. The webhook's admission duration (its histogram, upper bounds of the buckets)\n")
	for _, hook := range []string{"mutate-pods", "validate-routing"} {
		var m dto.Metric
		if err := metrics.AdmissionDuration.WithLabelValues(hook).(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
			continue
		}
		h := m.GetHistogram()
		n := h.GetSampleCount()
		if n == 0 {
			continue
		}
		q := func(p float64) string {
			for _, b := range h.GetBucket() {
				if float64(b.GetCumulativeCount()) >= p*float64(n) {
					return fmt.Sprintf("<= %gs", b.GetUpperBound())
				}
			}
			return "> 5s"
		}
		fmt.Printf("%-16s %d admissions, mean %s, p50 %s, p99 %s, max %s\n", hook, n,
			time.Duration(h.GetSampleSum()/float64(n)*float64(time.Second)).Round(time.Microsecond), q(.5), q(.99), q(1))
	}
}
