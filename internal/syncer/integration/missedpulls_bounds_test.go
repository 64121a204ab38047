package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/missedpulls"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// holdAfter passes a response body through until marker, and margin bytes after it, have been
// read, then holds the rest until release is closed (held tells that it did).
type holdAfter struct {
	io.ReadCloser
	marker  []byte
	margin  int
	tail    []byte
	left    int // bytes still passed before the hold; -1 until the marker is seen, -2 once released
	release <-chan struct{}
	held    *atomic.Bool
}

func (h *holdAfter) Read(p []byte) (int, error) {
	if h.left == 0 {
		h.held.Store(true)
		<-h.release
		h.left = -2
	}
	if h.left > 0 && len(p) > h.left {
		p = p[:h.left]
	}
	n, err := h.ReadCloser.Read(p)
	switch {
	case h.left == -1:
		buf := append(h.tail, p[:n]...)
		if i := bytes.Index(buf, h.marker); i >= 0 {
			h.left = max(h.margin-(len(buf)-i-len(h.marker)), 0)
		} else {
			h.tail = bytes.Clone(buf[max(len(buf)-len(h.marker), 0):])
		}
	case h.left > 0:
		h.left -= n
	}
	return n, err
}

// An events list page is acted on as it is read, never held whole: a page holds up to 50
// events of up to the largest object the API server stores (1.5 MiB by default), so reading it
// whole (client-go's List reads the body, then decodes every item) let an author of large
// forged events choose the syncer's memory at each relist, two reflectors at once. Here the
// list response is held by the test right after the kubelet's event of a stuck pod, before ten
// 256 KiB events that follow it in the same page: the pod is reported while the rest of the
// page is still unread.
func TestMissedPullIsReportedBeforeTheRestOfItsEventPageIsRead(t *testing.T) {
	e := harness(t)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, candidate := routedApp(t, e, n, live, nil)
	ns := createNamespace(t, e, nil)
	pod := stuckPod(t, e, ns, "web", image, nil, true)
	pullFailed(t, e, pod, image) // web.<suffix>: listed before the zz-* events of its namespace
	big := strings.Repeat("x", 256<<10)
	for i := range 10 {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("zz-%d", i), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: fmt.Sprintf("gone-%d", i)},
			Reason:         missedpulls.ReasonFailed,
			Message:        fmt.Sprintf("Failed to pull image %q: %s", image, big),
			Type:           corev1.EventTypeWarning,
		}
		if _, err := e.cs.CoreV1().Events(ns).Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	release := make(chan struct{})
	var releaseOnce sync.Once
	var held atomic.Bool
	cfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			q := req.URL.Query()
			if err == nil && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/api/v1/events") &&
				q.Get("watch") != "true" && strings.Contains(q.Get("fieldSelector"), "reason="+missedpulls.ReasonFailed) {
				resp.Body = &holdAfter{ReadCloser: resp.Body, marker: []byte(pod.UID), margin: 4 << 10, left: -1, release: release, held: &held}
			}
			return resp, err
		})
	}
	opts := syncerConfig()
	opts.MissedPulls = missedPullOptions(false, time.Second)
	startSyncerWith(t, opts, cfg, nil)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the syncer stops

	waitEvent(t, e, "Pod", ns, "web", v1alpha1.EventImagePullMissedRouting, candidate)
	if !held.Load() {
		t.Fatal("the list response was never held after the stuck pod's event: the test proves nothing")
	}
	releaseOnce.Do(func() { close(release) })
}

// A leader that lost its lease waits for its missed-pull watcher (the one runnable that evicts
// pods) to stop before it campaigns again, as it waits for its controller: a new leader's
// watcher never works beside the old one. The watcher is held inside a request (a pod read the
// test holds, whatever its context says) while the lease cannot be renewed: the syncer does not
// campaign again until the request returns, then does, and its new watcher reports.
func TestLostLeaseWaitsForTheMissedPullWatcher(t *testing.T) {
	e := harness(t)
	live := testutil.NewRegistry(t, "", "")
	n := name(t)
	image, candidate := routedApp(t, e, n, live, nil)
	ns := createNamespace(t, e, nil)
	pod := stuckPod(t, e, ns, "web", image, nil, true)

	var leaseDown, recampaigned atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	cfg := cp.ConfigAsServiceAccount(crns, serviceAccount)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if leaseDown.Load() && strings.HasSuffix(req.URL.Path, "/leases/"+n) {
				return nil, errors.New("the lease is out of reach (test)")
			}
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+ns+"/pods/web" {
				first := false
				holdOnce.Do(func() { first = true })
				if first {
					close(held)
					<-release
				}
			}
			return rt.RoundTrip(req)
		})
	}
	opts := syncerConfig()
	opts.LeaderElection = true
	opts.LeaderElectionID = n
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond
	opts.MissedPulls = missedPullOptions(false, time.Second)
	startSyncerWith(t, opts, cfg, func(line string) {
		if strings.Contains(line, "campaigning again") {
			recampaigned.Store(true)
		}
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the syncer stops

	pullFailed(t, e, pod, image)
	select {
	case <-held:
	case <-time.After(pollTimeout):
		t.Fatal("the missed-pull watcher never read the pod")
	}
	leaseDown.Store(true)
	// Past the renew deadline and the lease: the leader has given up, its controller stopped.
	time.Sleep(opts.RenewDeadline + opts.LeaseDuration)
	if recampaigned.Load() {
		t.Error("the syncer campaigned again while its missed-pull watcher was still at work")
	}
	releaseOnce.Do(func() { close(release) })
	leaseDown.Store(false)
	eventually(t, "the syncer campaigns again once its watcher stopped", func(context.Context) error {
		if !recampaigned.Load() {
			return errors.New("not yet")
		}
		return nil
	})
	pullFailed(t, e, pod, image)
	waitEvent(t, e, "Pod", ns, "web", v1alpha1.EventImagePullMissedRouting, candidate)
}
