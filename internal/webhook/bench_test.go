package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/logflags"
	"github.com/enix/kuik/internal/probe"
	"github.com/enix/kuik/internal/route"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// benchIndex holds n ImageAlternatives of two entries each, plus the one that covers
// reg/acme/app (whose first entry is down, so the second, on reg, wins).
func benchIndex(b *testing.B, n int, reg *testutil.Registry, down string) *routing.Index {
	b.Helper()
	ias := make([]v1alpha1.ImageAlternative, 0, n+1)
	for i := range n {
		ias = append(ias, testutil.Alternative(fmt.Sprintf("ia-%05d", i), v1alpha1.RewritePolicyOnFailure,
			v1alpha1.Alternative{Repository: fmt.Sprintf("quay.io/team-%d/app-%d", i%97, i)},
			v1alpha1.Alternative{Repository: fmt.Sprintf("registry.local/team-%d/app-%d", i%97, i)}))
	}
	ias = append(ias, testutil.Alternative("covered", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: down + "/acme/app"},
		v1alpha1.Alternative{Repository: reg.Host + "/acme/app", Insecure: true}))
	ix, errs := routing.NewIndex(ias, nil)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	return ix
}

// BenchmarkRoute is one container routed with a warm probe cache (the steady state of a
// rollout), against a real registry for the cache's first fill.
func BenchmarkRoute(b *testing.B) {
	reg := testutil.NewRegistry(b, "", "")
	reg.Push(b, "acme/app:v1")
	down := closedAddr(b)
	for _, n := range []int{10, 1_000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ix := benchIndex(b, n, reg, down)
			chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour})}
			src := pod(corev1.Container{Name: "c", Image: down + "/acme/app:v1"})
			b.ReportAllocs()
			for b.Loop() {
				p := src.DeepCopy()
				d, err := route.Route(context.Background(), p, labels.Set{}, ix, chooser.Choose, route.Scope{})
				if err != nil || len(d) != 1 || d[0].Image != reg.Host+"/acme/app:v1" {
					b.Fatalf("route = %+v, %v", d, err)
				}
			}
		})
	}
}

// BenchmarkAdmissionHTTPS sends AdmissionReviews over HTTPS to the pod mutator (1,000
// resources, warm cache), to a handler that admits at once, to one that returns the mutator's
// patch precomputed, and to one that also decodes the whole pod first (what a webhook that
// decodes the pod pays at least), on the same controller-runtime webhook server and TLS stack,
// interleaved; it reports p50/p99 and the ratios to the no-op handler and to that one.
func BenchmarkAdmissionHTTPS(b *testing.B) {
	installLogger(b)
	reg := testutil.NewRegistry(b, "", "")
	reg.Push(b, "acme/app:v1")
	down := closedAddr(b)
	var ix atomic.Pointer[routing.Index]
	ix.Store(benchIndex(b, 1_000, reg, down))
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour})}

	ca, err := testenv.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	pair, err := ca.ServingPair()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := pair.WriteFiles(dir, "tls.crt", "tls.key"); err != nil {
		b.Fatal(err)
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	// The pod mutator as the server serves it (its reviews read by kuik, not by controller-runtime).
	srv.Register("/mutate-pods", webhook.PodAdmission(time.Second, &webhook.PodMutator{
		Index:      &ix,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}))
	srv.Register("/noop", &ctrlwebhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	// The same answer as the mutator's, precomputed: what returning a patch costs by itself.
	mutator := &webhook.PodMutator{
		Index:      &ix,
		Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil },
		Choose:     chooser.Choose,
	}
	fixed := mutator.Handle(context.Background(), createRequest(b, pod(corev1.Container{Name: "c", Image: down + "/acme/app:v1"})))
	if len(fixed.Patch) == 0 {
		b.Fatal("no patch")
	}
	patched := func() admission.Response {
		resp := admission.Allowed("")
		resp.Patch, resp.PatchType = fixed.Patch, fixed.PatchType
		return resp
	}
	srv.Register("/fixed-patch", &ctrlwebhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return patched()
	})})
	// What a pod-mutating webhook that decodes the whole pod pays at least on this stack:
	// controller-runtime decodes the AdmissionReview but leaves the pod as raw bytes, so the
	// no-op handler never pays for decoding it. This one decodes the pod, and returns the same
	// precomputed patch.
	srv.Register("/decode-patch", &ctrlwebhook.Admission{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		var p corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		return patched()
	})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Start(ctx) }()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 4}}
	body := reviewBody(b, pod(corev1.Container{Name: "c", Image: down + "/acme/app:v1"}))
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	send := func(path string) time.Duration {
		start := time.Now()
		resp, err := client.Post(base+path, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"allowed":true`)) {
			b.Fatalf("%s: %s %s", path, resp.Status, out)
		}
		return took
	}
	// Wait for the server, warm connections and the probe cache.
	for i := 0; ; i++ {
		if _, err := client.Get(base + "/noop"); err == nil {
			break
		}
		if i > 200 {
			b.Fatal("webhook server never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 20 {
		send("/mutate-pods")
		send("/noop")
		send("/fixed-patch")
		send("/decode-patch")
	}

	var mutate, noop, fixedPatch, decodePatch []time.Duration
	for b.Loop() {
		mutate = append(mutate, send("/mutate-pods"))
		noop = append(noop, send("/noop"))
		fixedPatch = append(fixedPatch, send("/fixed-patch"))
		decodePatch = append(decodePatch, send("/decode-patch"))
	}
	// CPU per request, each path in a block of its own (the process's user+system time, client
	// included, which is the same for every path): on a shared machine the wall-clock
	// latencies above are mostly scheduling delays, CPU time much less so.
	b.StopTimer()
	cpu := map[string]float64{}
	for _, path := range []string{"/noop", "/decode-patch", "/mutate-pods", "/noop", "/decode-patch", "/mutate-pods"} {
		const n = 2000
		before := processCPU(b)
		for range n {
			send(path)
		}
		if c := float64((processCPU(b) - before).Nanoseconds()) / 1e3 / n; cpu[path] == 0 || c < cpu[path] {
			cpu[path] = c // the lower of two blocks
		}
	}
	b.ReportMetric(cpu["/mutate-pods"], "mutate-cpu-µs")
	b.ReportMetric(cpu["/noop"], "noop-cpu-µs")
	b.ReportMetric(cpu["/decode-patch"], "decode-patch-cpu-µs")
	b.ReportMetric(cpu["/mutate-pods"]/cpu["/noop"], "cpu-ratio")
	b.ReportMetric(cpu["/mutate-pods"]/cpu["/decode-patch"], "mutate-to-decode-patch-cpu-ratio")

	p := func(d []time.Duration, q float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds())
	}
	b.ReportMetric(p(mutate, .5), "mutate-p50-µs")
	b.ReportMetric(p(mutate, .99), "mutate-p99-µs")
	b.ReportMetric(p(noop, .5), "noop-p50-µs")
	b.ReportMetric(p(noop, .99), "noop-p99-µs")
	b.ReportMetric(p(fixedPatch, .5), "fixed-patch-p50-µs")
	b.ReportMetric(p(mutate, .5)/p(noop, .5), "p50-ratio")
	b.ReportMetric(p(fixedPatch, .5)/p(noop, .5), "fixed-patch-p50-ratio")
	b.ReportMetric(p(mutate, .99)/p(noop, .99), "p99-ratio")
	b.ReportMetric(p(decodePatch, .5), "decode-patch-p50-µs")
	b.ReportMetric(p(decodePatch, .5)/p(noop, .5), "decode-patch-p50-ratio")
	b.ReportMetric(p(mutate, .5)/p(decodePatch, .5), "mutate-to-decode-patch-p50-ratio")
}

// installLogger installs, once, the logger the webhook binary installs by default (logflags,
// info level), writing nowhere. Without one, controller-runtime's delegating logger keeps the
// logger its admission handler makes for every request until it gives up on SetLogger 30 s
// later: the heap, and the collector's work, would grow through the run, which the binary's
// does not, and weigh most on the paths measured last.
func installLogger(b *testing.B) {
	b.Helper()
	loggerOnce.Do(func() {
		logger, err := logflags.Bind(pflag.NewFlagSet("bench", pflag.ContinueOnError)).Logger(io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		logflags.Install(logger)
	})
}

var loggerOnce sync.Once

// processCPU is the process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reviewBody(b *testing.B, p *corev1.Pod) []byte {
	b.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bench", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "ns", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	}
	out, err := json.Marshal(review)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func closedAddr(b *testing.B) string {
	b.Helper()
	a, err := kuikenv.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkHandle is the pod mutator alone (decode, route, patch), 1,000 resources, warm cache.
func BenchmarkHandle(b *testing.B) {
	reg := testutil.NewRegistry(b, "", "")
	reg.Push(b, "acme/app:v1")
	down := closedAddr(b)
	var ix atomic.Pointer[routing.Index]
	ix.Store(benchIndex(b, 1_000, reg, down))
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour})}
	m := &webhook.PodMutator{Index: &ix, Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil }, Choose: chooser.Choose}
	req := createRequest(b, pod(corev1.Container{Name: "c", Image: down + "/acme/app:v1"}))
	b.ReportAllocs()
	for b.Loop() {
		resp := m.Handle(context.Background(), req)
		if len(resp.Patch) == 0 {
			b.Fatal("no patch")
		}
	}
}

// BenchmarkHandleRealisticPod is BenchmarkHandle with a pod of the size the admission campaign
// (hack/bench/admission) creates, about 3 KiB: 20 environment variables and a 1 KiB
// annotation. Its decode sub-benchmark is json.Unmarshal of that pod alone, which any
// pod-mutating webhook pays and the no-op handler does not.
func BenchmarkHandleRealisticPod(b *testing.B) {
	reg := testutil.NewRegistry(b, "", "")
	reg.Push(b, "acme/app:v1")
	down := closedAddr(b)
	var ix atomic.Pointer[routing.Index]
	ix.Store(benchIndex(b, 1_000, reg, down))
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour})}
	m := &webhook.PodMutator{Index: &ix, Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil }, Choose: chooser.Choose}
	c := corev1.Container{Name: "app", Image: down + "/acme/app:v1", Args: []string{"--listen=:8080", "--log-level=info"}}
	for j := range 20 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%02d", j), Value: strings.Repeat("v", 40)})
	}
	p := pod(c)
	p.Labels = map[string]string{"app": "bench", "pod-template-hash": "42"}
	p.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1024)}
	req := createRequest(b, p)
	b.Run("handle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if resp := m.Handle(context.Background(), req); len(resp.Patch) == 0 {
				b.Fatal("no patch")
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out corev1.Pod
			if err := json.Unmarshal(req.Object.Raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandleContainers is the pod mutator alone on pods of 1, 10 and 100 containers, every
// one covered and routed (1,000 resources, warm cache, a distinct tag each), each container
// with the arguments, ports, resources and environment of a typical workload. It reports what
// one admission costs per container (time and allocations), and its ratio to json.Unmarshal of
// the same pod into a corev1.Pod, measured in the same run: what a webhook that decodes the
// whole pod pays before doing anything.
func BenchmarkHandleContainers(b *testing.B) {
	reg := testutil.NewRegistry(b, "", "")
	down := closedAddr(b)
	var ix atomic.Pointer[routing.Index]
	ix.Store(benchIndex(b, 1_000, reg, down))
	chooser := &route.ProbeChooser{Prober: probe.New(probe.Options{TTL: time.Hour})}
	m := &webhook.PodMutator{Index: &ix, Namespaces: func(context.Context, string) (labels.Set, error) { return labels.Set{}, nil }, Choose: chooser.Choose}
	const most = 100
	for i := range most {
		reg.Push(b, fmt.Sprintf("acme/app:v%d", i))
	}
	for _, n := range []int{1, 10, most} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var cs []corev1.Container
			for i := range n {
				cs = append(cs, workloadContainer(fmt.Sprintf("c%03d", i), fmt.Sprintf("%s/acme/app:v%d", down, i)))
			}
			p := pod(cs...)
			p.Labels = map[string]string{"app": "bench", "pod-template-hash": "42"}
			req := createRequest(b, p)
			if resp := m.Handle(context.Background(), req); len(resp.Patch) == 0 { // warms the probe cache
				b.Fatal("no patch")
			}
			b.ReportAllocs()
			for b.Loop() {
				if resp := m.Handle(context.Background(), req); len(resp.Patch) == 0 {
					b.Fatal("no patch")
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.StopTimer()
			decode := func() {
				var out corev1.Pod
				if err := json.Unmarshal(req.Object.Raw, &out); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			for range b.N {
				decode()
			}
			decodePerOp := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOp/float64(n), "ns/container")
			b.ReportMetric(perOp/decodePerOp, "to-full-decode-ratio")
			b.ReportMetric(testing.AllocsPerRun(100, decode), "full-decode-allocs/op")
		})
	}
}

// workloadContainer is a container as a typical Deployment's pod template gives it.
func workloadContainer(name, image string) corev1.Container {
	c := corev1.Container{
		Name: name, Image: image, Args: []string{"--listen=:8080", "--log-level=info"},
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePath: "/dev/termination-log",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
	}
	for j := range 5 {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%02d", j), Value: strings.Repeat("v", 20)})
	}
	return c
}
