package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// keepPair is the same routing, once with spec.keep on its ImageMirrors and once without, in
// front of real registries: the source (reached as src.test, over TLS) and the mirror.
type keepPair struct {
	src, mirror *testutil.Front
	// transport sends src.test to a TLS proxy of the source's front.
	transport *http.Transport
}

// keepBench is the covered image the admissions route, present in the mirror.
const keepBenchImage = "src.test/acme/app:v1"

func newKeepPair(tb testing.TB) *keepPair {
	tb.Helper()
	srcReg := testutil.NewRegistry(tb, "", "")
	mirrorReg := testutil.NewRegistry(tb, "", "")
	kp := &keepPair{src: testutil.NewFront(tb, srcReg), mirror: testutil.NewFront(tb, mirrorReg)}
	// The webhook probes an original image over TLS (no entry says src.test is insecure).
	tlsSrc := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: kp.src.Host}))
	tb.Cleanup(tlsSrc.Close)
	roots := x509.NewCertPool()
	roots.AddCert(tlsSrc.Certificate())
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	kp.transport = &http.Transport{
		// httptest's certificate names example.com.
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "example.com", MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, err := net.SplitHostPort(addr); err == nil && host == "src.test" {
				addr = tlsSrc.Listener.Addr().String()
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}
	tb.Cleanup(kp.transport.CloseIdleConnections)
	// acme/app:v1 is in the source and in the mirror; acme/app:v2 in the source only; acme/gone
	// nowhere.
	srcReg.Push(tb, "acme/app:v1")
	srcReg.Push(tb, "acme/app:v2")
	mirrorReg.Push(tb, "kuik/"+keepBenchImage)
	return kp
}

// mutator routes with two ImageMirrors (Always, and OnFailure for pods labelled tier: b), with
// spec.keep on both when keep, through a prober of its own.
func (kp *keepPair) mutator(tb testing.TB, keep bool) *webhook.PodMutator {
	tb.Helper()
	dest := kp.mirror.Host + "/kuik/"
	always := testutil.NewImageMirror("always", dest).Policy(v1alpha1.RewritePolicyAlways).Insecure().Build()
	onFailure := testutil.NewImageMirror("on-failure", dest).Policy(v1alpha1.RewritePolicyOnFailure).Insecure().
		PodSelector(map[string]string{"tier": "b"}).Build()
	always.Spec.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}},
	}}
	if keep {
		retention := metav1.Duration{Duration: v1alpha1.DefaultKeepRetention}
		on := true
		for _, im := range []*v1alpha1.ImageMirror{&always, &onFailure} {
			im.Spec.Keep = &v1alpha1.MirrorKeep{
				Push:      &v1alpha1.KeepPush{Auth: &v1alpha1.KeepPushAuth{SecretRef: v1alpha1.LocalSecretReference{Name: "push"}}},
				Retention: &retention, CountTemplates: &on, Referrers: &on, PrivateSources: v1alpha1.PrivateSourcesDeny,
			}
		}
	}
	ix, errs := routing.NewIndex(nil, []v1alpha1.ImageMirror{always, onFailure})
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	var p atomic.Pointer[routing.Index]
	p.Store(ix)
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour, Transport: kp.transport})}
	return &webhook.PodMutator{
		Index:      &p,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}
}

// keepPods are covered pods of every outcome: rewritten to the mirror, kept on the source
// because the mirror lacks the image (Always), kept because the source serves it (OnFailure),
// and an image neither holds.
func keepPods() []*corev1.Pod {
	var out []*corev1.Pod
	for i, c := range []struct {
		image string
		tier  string
	}{
		{keepBenchImage, "a"},
		{"src.test/acme/app:v2", "a"},
		{keepBenchImage, "b"},
		{"src.test/acme/gone:v1", "a"},
		{"src.test/acme/gone:v1", "b"},
	} {
		p := pod(corev1.Container{Name: "c", Image: c.image})
		p.Name = fmt.Sprintf("p-%d", i)
		p.Labels = map[string]string{"tier": c.tier}
		out = append(out, p)
	}
	return out
}

// The webhook makes no copy call: with spec.keep on, admitting covered pods sends the
// registries exactly the requests it sends with keep off, and none of them writes.
func TestKeepOnAdmissionMakesNoExtraRegistryRequest(t *testing.T) {
	kp := newKeepPair(t)
	requests := func(keep bool) (images []string, src, mirror []string) {
		kp.src.Reset()
		kp.mirror.Reset()
		m := kp.mutator(t, keep)
		for _, p := range keepPods() {
			images = append(images, admit(t, m, p).Spec.Containers[0].Image)
		}
		// Twice: the second round answers from the probe cache, in both.
		for _, p := range keepPods() {
			admit(t, m, p)
		}
		line := func(r testutil.Request) string { return r.Method + " " + r.Path + "?" + r.Query }
		for _, r := range kp.src.Requests() {
			src = append(src, line(r))
		}
		for _, r := range kp.mirror.Requests() {
			mirror = append(mirror, line(r))
		}
		slices.Sort(src)
		slices.Sort(mirror)
		return images, src, mirror
	}
	offImages, offSrc, offMirror := requests(false)
	onImages, onSrc, onMirror := requests(true)

	want := []string{kp.mirror.Host + "/kuik/" + keepBenchImage, "src.test/acme/app:v2", keepBenchImage, "src.test/acme/gone:v1", "src.test/acme/gone:v1"}
	if !slices.Equal(offImages, want) {
		t.Fatalf("images with keep off %q, want %q", offImages, want)
	}
	if !slices.Equal(onImages, offImages) {
		t.Errorf("images with keep on %q, off %q", onImages, offImages)
	}
	if len(offSrc) == 0 || len(offMirror) == 0 {
		t.Fatalf("the admissions probed no registry (source %d, mirror %d requests): the comparison proves nothing", len(offSrc), len(offMirror))
	}
	if !slices.Equal(onSrc, offSrc) {
		t.Errorf("source requests with keep on:\n%s\nwith keep off:\n%s", strings.Join(onSrc, "\n"), strings.Join(offSrc, "\n"))
	}
	if !slices.Equal(onMirror, offMirror) {
		t.Errorf("mirror requests with keep on:\n%s\nwith keep off:\n%s", strings.Join(onMirror, "\n"), strings.Join(offMirror, "\n"))
	}
	for _, r := range slices.Concat(onSrc, onMirror) {
		if method, _, _ := strings.Cut(r, " "); method != http.MethodGet && method != http.MethodHead {
			t.Errorf("the webhook wrote to a registry: %s", r)
		}
	}
}

// BenchmarkHandleKeepOnOff admits the covered pod (rewritten to the mirror, warm probe cache)
// through a mutator whose ImageMirror has spec.keep and one whose does not, interleaved, and
// reports the p50 of each and their ratio (issue 21: within 3 %).
func BenchmarkHandleKeepOnOff(b *testing.B) {
	kp := newKeepPair(b)
	off, on := kp.mutator(b, false), kp.mutator(b, true)
	req := createRequest(b, keepPods()[0])
	handle := func(m *webhook.PodMutator) time.Duration {
		start := time.Now()
		resp := m.Handle(context.Background(), req)
		took := time.Since(start)
		if len(resp.Patch) == 0 {
			b.Fatal("no patch: the pod was not routed to the mirror")
		}
		return took
	}
	for range 100 {
		handle(off)
		handle(on)
	}
	var offTimes, onTimes []time.Duration
	i := 0
	for b.Loop() {
		// Alternate which goes first, so neither always follows the other.
		if i%2 == 0 {
			offTimes = append(offTimes, handle(off))
			onTimes = append(onTimes, handle(on))
		} else {
			onTimes = append(onTimes, handle(on))
			offTimes = append(offTimes, handle(off))
		}
		i++
	}
	p50 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Nanoseconds())
	}
	b.ReportMetric(p50(offTimes), "keep-off-p50-ns")
	b.ReportMetric(p50(onTimes), "keep-on-p50-ns")
	b.ReportMetric(p50(onTimes)/p50(offTimes), "p50-ratio")
}
