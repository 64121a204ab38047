package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// sourceHost is how pods name the source registry; the proxy sends it to the source's front.
const sourceHost = "src.test"

// world is the control plane's clients, the registries behind logging fronts, and the proxy.
type world struct {
	create kubernetes.Interface // protobuf, for the pods (not measured)
	cl     client.Client
	names  []string // the pods' namespaces

	srcReg      *testutil.Registry
	src, mirror *testutil.Front
	proxyURL    string
}

func newWorld(ctx context.Context, cp *testenv.ControlPlane, tb *benchutil.TB) (*world, error) {
	admin := benchutil.Unthrottled(cp)
	w := &world{}
	var err error
	if w.create, err = kubernetes.NewForConfig(benchutil.Protobuf(admin, "application/vnd.kubernetes.protobuf,application/json")); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if w.cl, err = client.New(admin, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if err := benchutil.CreateNamespace(ctx, w.create, releaseNamespace, nil); err != nil {
		return nil, err
	}
	for i := range *flagNamespaces {
		name := fmt.Sprintf("bench-%04d", i)
		if err := benchutil.CreateNamespace(ctx, w.create, name, nil); err != nil {
			return nil, err
		}
		w.names = append(w.names, name)
	}

	w.srcReg = testutil.NewRegistry(tb, "", "")
	w.src = testutil.NewFront(tb, w.srcReg)
	w.mirror = testutil.NewFront(tb, testutil.NewRegistry(tb, "", ""))
	// A plain HTTP forward proxy for src.test only: a CONNECT (TLS) is refused at once, so
	// go-containerregistry's ping falls back to HTTP, which the insecure host allows.
	target := &url.URL{Scheme: "http", Host: w.src.Host}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	proxy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		switch {
		case req.Method == http.MethodConnect:
			http.Error(rw, "this proxy speaks plain HTTP only", http.StatusMethodNotAllowed)
		case req.URL.Hostname() != sourceHost:
			http.Error(rw, "unknown host "+req.URL.Host, http.StatusBadGateway)
		default:
			rp.ServeHTTP(rw, req)
		}
	}))
	tb.Cleanup(proxy.Close)
	w.proxyURL = proxy.URL
	return w, nil
}

// image is the i-th image pods run, in the source.
func image(i int) string { return fmt.Sprintf("%s/bench/app-%05d:v1", sourceHost, i) }

// pushImages writes the -images images into the source, each a random 64-byte layer.
func (w *world) pushImages(ctx context.Context) error {
	t0 := time.Now()
	err := benchutil.Parallel(ctx, *flagImages, *flagCreateWorkers, func(_ context.Context, i int) (err error) {
		tb := &benchutil.TB{}
		defer tb.Close()
		defer benchutil.Recover(&err)
		img, err := random.Image(64, 1)
		if err != nil {
			return err
		}
		w.srcReg.PushImage(tb, fmt.Sprintf("bench/app-%05d:v1", i), img)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pushing the source's images: %w", err)
	}
	fmt.Printf("%d images pushed to the source in %s\n", *flagImages, time.Since(t0).Round(time.Second))
	return nil
}

// createPods creates the -pods pods, round-robin over the namespaces and the images.
func (w *world) createPods(ctx context.Context) error {
	err := benchutil.Parallel(ctx, *flagPods, *flagCreateWorkers, func(ctx context.Context, i int) error {
		ns := w.names[i%len(w.names)]
		p := benchutil.PlainPod(ns, fmt.Sprintf("p-%05d", i), image(i%*flagImages), i)
		_, err := w.create.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	return nil
}

// createMirror creates the keep-enabled ImageMirror (keep: {}, the API's defaults) and the
// ImageAlternative that declares src.test insecure, for a repository no pod runs.
func (w *world) createMirror(ctx context.Context) error {
	alt := testutil.Alternative("declare-src-insecure", v1alpha1.RewritePolicyOnFailure,
		v1alpha1.Alternative{Repository: sourceHost + "/unused/marker", Insecure: true},
		v1alpha1.Alternative{Repository: sourceHost + "/unused/other", Insecure: true})
	if err := w.cl.Create(ctx, &alt); err != nil {
		return fmt.Errorf("creating the ImageAlternative: %w", err)
	}
	im := testutil.NewImageMirror("keep", w.mirror.Host+"/kuik/").Policy(v1alpha1.RewritePolicyAlways).Insecure().Build()
	im.Spec.Keep = &v1alpha1.MirrorKeep{}
	if err := w.cl.Create(ctx, &im); err != nil {
		return fmt.Errorf("creating the ImageMirror: %w", err)
	}
	return nil
}

// keepStatus is the mirror's status.keep (zero when absent).
func (w *world) keepStatus(ctx context.Context) (v1alpha1.KeepStatus, error) {
	var im v1alpha1.ImageMirror
	if err := w.cl.Get(ctx, types.NamespacedName{Name: "keep"}, &im); err != nil {
		return v1alpha1.KeepStatus{}, err
	}
	if im.Status.Keep == nil {
		return v1alpha1.KeepStatus{}, nil
	}
	return *im.Status.Keep, nil
}

// waitPresent waits until status.keep.present reaches -images.
func (w *world) waitPresent(ctx context.Context, k *keeperProc, limit time.Duration) error {
	var last v1alpha1.KeepStatus
	next := time.Now().Add(30 * time.Second)
	err := wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		st, err := w.keepStatus(ctx)
		if err != nil {
			return false, nil
		}
		last = st
		if time.Now().After(next) {
			fmt.Printf("  … desired %d, present %d, failed %d\n", st.Desired, st.Present, st.Failed)
			next = time.Now().Add(30 * time.Second)
		}
		return int(st.Present) >= *flagImages, nil
	})
	if err != nil {
		return fmt.Errorf("status.keep.present never reached %d (last status: desired %d, present %d, missingSource %d, failed %d %v): %w\n%s",
			*flagImages, last.Desired, last.Present, last.MissingSource, last.Failed, last.Failures, err, k.tail())
	}
	if int(last.Desired) != *flagImages {
		return fmt.Errorf("status.keep.desired is %d, want %d", last.Desired, *flagImages)
	}
	return nil
}

// resync measures the registry requests of an unchanged resync: from the end of one
// self-heal pass to the end of the next at least three plan intervals later, with a pod update
// (no image changed) asking for a plan pass at the start.
func (w *world) resync(ctx context.Context, k *keeperProc) error {
	kept := float64(*flagImages)
	limit := 3**flagSelfHeal + timeout()
	// The end of a self-heal pass over every kept tag: the counter grew and stands still. The
	// pass that ended first may have missed the tags kept last, whose repositories the next
	// pass HEADs for the first time (a ping each): the window starts after a whole pass.
	c, err := k.selfHealEnd(ctx, 1, limit)
	if err != nil {
		return err
	}
	c0, err := k.selfHealEnd(ctx, c+kept, limit)
	if err != nil {
		return err
	}
	w.src.Reset()
	w.mirror.Reset()
	t0 := time.Now()
	ns := w.names[0]
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"bench.kuik.enix.io/touched": t0.Format(time.RFC3339Nano)}}})
	if err != nil {
		return err
	}
	if _, err := w.create.CoreV1().Pods(ns).Patch(ctx, "p-00000", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("touching a pod: %w", err)
	}
	// Several plan passes, then the end of the next self-heal pass.
	time.Sleep(3 * *flagPlanInterval)
	c1, err := k.selfHealEnd(ctx, c0+kept, limit)
	if err != nil {
		return err
	}
	window := time.Since(t0)
	srcN := len(w.src.Requests())
	var writes, heads, other int
	otherKinds := map[string]int{}
	for _, r := range w.mirror.Requests() {
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			writes++
		case r.Method == http.MethodHead && r.Kind == testutil.KindManifest:
			heads++
		default:
			other++
			otherKinds[r.Method+" "+string(r.Kind)]++
		}
	}
	passes := (c1 - c0) / kept
	fmt.Printf("\n== 3. Unchanged resync: %s window, %.0f plan intervals (one pass asked by a pod update), %.2f self-heal passes (%.0f checks)\n",
		window.Round(time.Millisecond), window.Seconds()/flagPlanInterval.Seconds(), passes, c1-c0)
	fmt.Printf("source requests %d (goal 0); mirror writes %d (goal 0); mirror manifest HEADs %d = %.3f per kept tag per self-heal pass (goal 1); other mirror requests %d %v\n",
		srcN, writes, heads, benchutil.Ratio(float64(heads), kept*passes), other, otherKinds)
	if srcN > 0 || writes > 0 || float64(heads) != c1-c0 || other > 0 {
		fmt.Println("FINDING: requests beyond one HEAD per kept tag per self-heal pass")
	}
	return nil
}
