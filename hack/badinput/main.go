// Command badinput sends bad input to kuik through a real API server (internal/testenv), with
// kuik's webhook (in-process, under the chart's identity, RBAC and webhook configurations,
// kuikenv.StartWebhook) and secret-syncer (in-process, under its ServiceAccount) running:
//
//  1. a flood of routing resources at the schema's limits: R ImageAlternatives of 32 entries
//     (the last one on a private registry, the 31 before it down) and R ImageMirrors of 64
//     excludeImages; then bad routing resources, each of which must be refused at admission
//     with a message naming the field;
//  2. pods: 100 containers each, all covered by the flood; images of 4 KiB references; invalid
//     UTF-8 in kuik's annotations (kuik.enix.io/*), sent as protobuf so the bytes reach the API
//     server as they are, and as JSON; annotations just under the API server's 256 KiB limit on
//     a covered pod; plain uncovered pods (the floor); and pods under all R mirrors at once;
//  3. Secrets referenced by secretRef: one of ~1 MiB (thousands of entries) and ones with
//     undecodable entries (not base64, no colon, numbers for strings, a Secret that is no JSON
//     at all), used by Always resources and by the flood's private entries.
//
// It prints the admission latency per kind of pod (p50/p99/max, created through the API
// server, against the floor and the webhook's timeoutSeconds and admission budget) and the
// webhook's own admission-duration histogram. It exits non-zero when an outcome is wrong: kuik
// not ready or gone, a pod or a valid resource refused, a bad resource admitted or refused
// without naming the field, a kuik-inject-* Secret that does not decode as dockerconfigjson, a
// patched pod whose annotations are not valid UTF-8 or whose kuik annotations are not JSON.
// Creations slower than the webhook's timeoutSeconds are counted and printed, not failed.
//
//	go run ./hack/badinput            # R=200, 20 pods of 100 containers per kind
//	go run ./hack/badinput -smoke     # R=20, 3 pods per kind (< 2 min)
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/internal/testutil/kuikenv"
	"github.com/enix/kuik/internal/webhook"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

const crns = "kuik-system"

var (
	flagSmoke     = flag.Bool("smoke", false, "small sizes for CI: -resources 20 -pods 3")
	flagResources = flag.Int("resources", 200, "ImageAlternatives of 32 entries, and as many ImageMirrors of 64 excludeImages")
	flagPods      = flag.Int("pods", 20, "pods per kind")
	flagWorkers   = flag.Int("workers", 8, "concurrent creations")
	flagProfile   = flag.String("cpuprofile", "", "write a CPU profile of the pods phase (kuik in-process) to this file")
)

func main() {
	flag.Parse()
	if *flagSmoke {
		*flagResources, *flagPods = 20, 3
	}
	ctrllog.SetLogger(logr.Discard())
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "badinput: FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("\nbadinput: every outcome correct")
}

// failures collects wrong outcomes; the run goes on to report them all.
type failures struct {
	mu   sync.Mutex
	list []string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, fmt.Sprintf(format, args...))
}

func (f *failures) err() error {
	if len(f.list) == 0 {
		return nil
	}
	if len(f.list) > 20 {
		f.list = append(f.list[:20], fmt.Sprintf("... and %d more", len(f.list)-20))
	}
	return errors.New(strings.Join(f.list, "\n  "))
}

type world struct {
	cs                          kubernetes.Interface // admin, JSON
	proto                       kubernetes.Interface // admin, protobuf: bytes as they are
	cl                          client.Client
	reg                         *testutil.Registry
	downs                       []string
	webhookHealth, syncerHealth string
	syncerDone                  chan error
	fail                        *failures
}

func run(ctx context.Context) error {
	start := time.Now()
	cp, err := testenv.Start(ctx, testenv.Options{CRDs: true})
	if err != nil {
		return err
	}
	defer cp.Stop()
	fmt.Printf("control plane ready in %s\n", time.Since(start).Round(time.Millisecond))
	admin := cp.Config()
	admin.QPS, admin.Burst = -1, 0
	w := &world{fail: &failures{}}
	if w.cs, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}
	protoCfg := rest.CopyConfig(admin)
	protoCfg.ContentType = "application/vnd.kubernetes.protobuf"
	protoCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	if w.proto, err = kubernetes.NewForConfig(protoCfg); err != nil {
		return err
	}
	if w.cl, err = client.New(admin, client.Options{Scheme: webhook.Scheme()}); err != nil {
		return err
	}
	if _, err := w.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	w.reg = testutil.NewRegistry(tb{}, "puller", "s3cret")
	defer w.reg.Close()
	for range 4 {
		a, err := kuikenv.FreeAddr()
		if err != nil {
			return err
		}
		w.downs = append(w.downs, a)
	}
	if err := w.secrets(ctx); err != nil {
		return err
	}

	// kuik as the chart installs it.
	chart, err := kuikenv.Render(crns)
	if err != nil {
		return err
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		return err
	}
	hooks, err := chart.WebhookConfigurations(port, cp.CA.PEM)
	if err != nil {
		return err
	}
	timeout, err := mutatingTimeout(hooks)
	if err != nil {
		return err
	}
	objs := append(chart.Identity(kuikenv.ComponentWebhook), chart.Identity(kuikenv.ComponentSyncer)...)
	objs = append(objs, chart.AdmissionPolicy()...)
	if err := testenv.Apply(ctx, cp.Config(), append(objs, hooks...)); err != nil {
		return err
	}
	wh, err := kuikenv.StartWebhook(ctx, cp, chart, port, webhook.Config{})
	if err != nil {
		return err
	}
	defer func() { _ = wh.Stop(10 * time.Second) }()
	w.webhookHealth = wh.HealthAddr
	args, err := chart.Args(kuikenv.ComponentWebhook)
	if err != nil {
		return err
	}
	probeTimeout, err := time.ParseDuration(args["probe-timeout"])
	if err != nil {
		return err
	}
	budget := webhook.AdmissionBudget(probeTimeout)
	fmt.Printf("webhook ready: probe timeout %s, admission budget %s, the API server's timeoutSeconds %s\n", probeTimeout, budget, timeout)

	sa, err := chart.ServiceAccount(kuikenv.ComponentSyncer)
	if err != nil {
		return err
	}
	if w.syncerHealth, err = kuikenv.FreeAddr(); err != nil {
		return err
	}
	sctx, stopSyncer := context.WithCancel(ctx)
	defer stopSyncer()
	w.syncerDone = make(chan error, 1)
	go func() {
		w.syncerDone <- syncer.Run(sctx, cp.ConfigAsServiceAccount(crns, sa), syncer.Options{
			Config:                 syncer.Config{ClusterResourceNamespace: crns},
			MetricsBindAddress:     "0",
			HealthProbeBindAddress: w.syncerHealth,
		})
	}()
	if err := w.waitReady(ctx); err != nil {
		return err
	}

	if err := w.routingFlood(ctx); err != nil {
		return err
	}
	w.badRouting(ctx)
	if *flagProfile != "" {
		f, err := os.Create(*flagProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	if err := w.pods(ctx, timeout, budget); err != nil {
		return err
	}
	pprof.StopCPUProfile()
	if err := w.checkSecrets(ctx); err != nil {
		return err
	}
	if err := w.checkPods(ctx); err != nil {
		return err
	}
	w.checkAlive(ctx, "at the end")
	histogram()
	fmt.Printf("\ntotal %s\n", time.Since(start).Round(time.Second))
	return w.fail.err()
}

// mutatingTimeout is the mutating webhook's timeoutSeconds, as the chart renders it.
func mutatingTimeout(hooks []*unstructured.Unstructured) (time.Duration, error) {
	for _, o := range hooks {
		if o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		list, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range list {
			switch s := h.(map[string]any)["timeoutSeconds"].(type) {
			case int64:
				return time.Duration(s) * time.Second, nil
			case int:
				return time.Duration(s) * time.Second, nil
			case float64:
				return time.Duration(s * float64(time.Second)), nil
			}
		}
	}
	return 0, errors.New("the chart's mutating webhook has no timeoutSeconds")
}

// waitReady waits until the webhook and the syncer answer /readyz.
func (w *world) waitReady(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return w.ready(ctx) == nil, nil
	})
}

func (w *world) ready(ctx context.Context) error {
	select {
	case err := <-w.syncerDone:
		w.syncerDone <- err
		return fmt.Errorf("the secret-syncer exited: %w", err)
	default:
	}
	for what, addr := range map[string]string{"webhook": w.webhookHealth, "secret-syncer": w.syncerHealth} {
		for _, path := range []string{"/healthz", "/readyz"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("%s %s: %w", what, path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s %s: %s", what, path, resp.Status)
			}
		}
	}
	return nil
}

func (w *world) checkAlive(ctx context.Context, when string) {
	if err := w.ready(ctx); err != nil {
		w.fail.add("kuik not alive and ready %s: %v", when, err)
		return
	}
	fmt.Printf("kuik alive and ready %s (webhook and secret-syncer /healthz and /readyz 200)\n", when)
}

// Secret names.
const (
	secretCreds       = "creds"
	secretBig         = "big"
	secretUndecodable = "undecodable"
	secretGarbage     = "garbage"
)

var privateSecrets = []string{secretCreds, secretBig, secretUndecodable, secretGarbage}

// secrets creates the credentials the routing resources reference.
func (w *world) secrets(ctx context.Context) error {
	good := base64.StdEncoding.EncodeToString([]byte("puller:s3cret"))
	// ~1 MiB: thousands of entries, the registry's among them.
	auths := map[string]any{w.reg.Host: map[string]string{"auth": good}}
	pad := strings.Repeat("p", 120)
	for i := 0; ; i++ {
		auths[fmt.Sprintf("registry-%05d.example/team-%d/app", i, i%97)] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("user-" + fmt.Sprint(i) + ":" + pad))}
		if i%500 == 0 {
			if b, _ := json.Marshal(map[string]any{"auths": auths}); len(b) > 1_000_000 {
				break
			}
		}
	}
	big, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return err
	}
	undecodable, err := json.Marshal(map[string]any{"auths": map[string]any{
		w.reg.Host + "/acme":   map[string]any{"auth": "!!! not base64 !!!"},
		w.reg.Host:             map[string]any{"auth": base64.StdEncoding.EncodeToString([]byte("no colon"))},
		w.reg.Host + "/other":  map[string]any{"auth": 42, "username": 7},
		"bad\xffutf8.example":  map[string]any{"auth": base64.StdEncoding.EncodeToString([]byte("\xff\xfe:\xc3\x28"))},
		"only-user.example":    map[string]any{"username": "u"},
		"ok.example/team/app":  map[string]any{"auth": good},
		"":                     map[string]any{"auth": good},
		"https://x/y?z=1#frag": map[string]any{"auth": good},
	}})
	if err != nil {
		return err
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: secretCreds}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{w.reg.Host: "puller:s3cret"})}},
		{ObjectMeta: metav1.ObjectMeta{Name: secretBig}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: big}},
		{ObjectMeta: metav1.ObjectMeta{Name: secretUndecodable}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: undecodable}},
		// Not dockerconfigjson at all: an Opaque Secret whose key holds bytes that are no JSON.
		{ObjectMeta: metav1.ObjectMeta{Name: secretGarbage}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("\xff\xfe{\"auths\":\x00")}},
	} {
		if _, err := w.cs.CoreV1().Secrets(crns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	fmt.Printf("secrets: %s (%d KiB, %d entries), %s, %s\n", secretBig, len(big)/1024, len(auths), secretUndecodable, secretGarbage)
	return nil
}

// Namespaces the pods go to.
const (
	nsFlood    = "flood"    // the ImageAlternatives select it
	nsMirrored = "mirrored" // the ImageMirrors select it, and the ImageAlternatives
	nsPlain    = "plain"    // nothing selects it: the floor
)

// routingFlood creates R ImageAlternatives of 32 entries and R ImageMirrors of 64
// excludeImages, timing each admission, and the Always resources on the bad Secrets.
func (w *world) routingFlood(ctx context.Context) error {
	for name, l := range map[string]map[string]string{nsFlood: {"badinput": "flood"}, nsMirrored: {"badinput": "flood", "mirrors": "all"}, nsPlain: nil} {
		if _, err := w.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	r := *flagResources
	for i := range r {
		w.reg.Push(tb{}, fmt.Sprintf("acme/app-%03d:v1", i))
	}
	floodSel := map[string]string{"badinput": "flood"}
	var iaLat, imLat []time.Duration
	var mu sync.Mutex
	t0 := time.Now()
	err := benchutil.Parallel(ctx, r, *flagWorkers, func(ctx context.Context, i int) error {
		b := testutil.NewImageAlternative(fmt.Sprintf("flood-%03d", i)).NamespaceSelector(floodSel).
			Repository(w.original(i))
		for j := 1; j < 31; j++ {
			b.Repository(fmt.Sprintf("%s/m%02d/app-%03d", w.downs[j%len(w.downs)], j, i)).Insecure()
		}
		b.Repository(fmt.Sprintf("%s/acme/app-%03d", w.reg.Host, i)).Insecure().SecretRef(privateSecrets[i%len(privateSecrets)])
		ia := b.Build()
		if len(ia.Spec.Alternatives) != 32 {
			return fmt.Errorf("flood resource with %d entries", len(ia.Spec.Alternatives))
		}
		t := time.Now()
		if err := w.cl.Create(ctx, &ia); err != nil {
			return fmt.Errorf("ImageAlternative %s of 32 entries refused: %w", ia.Name, err)
		}
		took := time.Since(t)
		excl := make([]string, 64)
		for j := range excl {
			excl[j] = fmt.Sprintf("registry-%02d.example/team-%d/**:v*", j, i)
		}
		im := testutil.NewImageMirror(fmt.Sprintf("flood-%03d", i), fmt.Sprintf("%s/mirror-%03d/", w.downs[i%len(w.downs)], i)).
			NamespaceSelector(map[string]string{"mirrors": "all"}).Exclude(excl...).Insecure().SecretRef(privateSecrets[i%len(privateSecrets)]).Build()
		t = time.Now()
		if err := w.cl.Create(ctx, &im); err != nil {
			return fmt.Errorf("ImageMirror %s of 64 excludeImages refused: %w", im.Name, err)
		}
		mu.Lock()
		iaLat, imLat = append(iaLat, took), append(imLat, time.Since(t))
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("\n== 1. Routing flood: %d ImageAlternatives of 32 entries, %d ImageMirrors of 64 excludeImages, created in %s (%d workers)\n",
		r, r, time.Since(t0).Round(time.Millisecond), *flagWorkers)
	fmt.Printf("create latency through the validating webhook: ImageAlternative %s; ImageMirror %s\n", summary(iaLat), summary(imLat))
	// The Always resources whose Secrets are huge or undecodable, on the flood namespace.
	for _, s := range []string{secretBig, secretUndecodable, secretGarbage} {
		ia := testutil.NewImageAlternative("always-" + s).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(floodSel).
			Repository("quay.io/always/" + s).Repository(w.reg.Host + "/always/" + s).Insecure().SecretRef(s).Build()
		if err := w.cl.Create(ctx, &ia); err != nil {
			return fmt.Errorf("ImageAlternative %s refused: %w", ia.Name, err)
		}
	}
	// The webhook's index holds them all.
	want := float64(2*r + 3)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return gauge(metrics.RoutingResources) >= want, nil
	})
	if err != nil {
		w.fail.add("the webhook's index holds %.0f routing resources, want %.0f", gauge(metrics.RoutingResources), want)
	} else {
		fmt.Printf("the webhook's routing index holds all %.0f resources\n", want)
	}
	w.checkAlive(ctx, "after the routing flood")
	return nil
}

// original is the image the i-th flood resource covers: on a registry that is down.
func (w *world) original(i int) string { return fmt.Sprintf("%s/acme/app-%03d", w.downs[0], i) }

// badRouting creates routing resources that must be refused, each naming its field.
func (w *world) badRouting(ctx context.Context) {
	fmt.Printf("\n== 1b. Bad routing resources (each must be refused, naming the field)\n")
	over := testutil.NewImageAlternative("bad-33-entries")
	for j := range 33 {
		over.Repository(fmt.Sprintf("quay.io/acme/over-%02d", j))
	}
	tooManyExcludes := make([]string, 65)
	for j := range tooManyExcludes {
		tooManyExcludes[j] = fmt.Sprintf("x-%02d/**", j)
	}
	long := "quay.io/acme/" + strings.Repeat("a", 4096)
	cases := []struct {
		obj   client.Object
		field string
	}{
		{ptr(over.Build()), "spec.alternatives"},
		{ptr(testutil.NewImageMirror("bad-65-excludes", "mirror.local/m/").Exclude(tooManyExcludes...).Build()), "spec.excludeImages"},
		{ptr(testutil.NewImageAlternative("bad-long-repository").Repository("quay.io/acme/app").Repository(long).Build()), "spec.alternatives[1].repository"},
		{ptr(testutil.NewImageAlternative("bad-tag").Repository("quay.io/acme/app").Repository("mirror.local/acme/app:v1").Build()), "spec.alternatives[1].repository"},
		{ptr(testutil.NewImageAlternative("bad-mixed-forms").Repository("quay.io/acme/app").Group("mirror.local/acme/").Build()), "spec.alternatives"},
		{ptr(testutil.NewImageAlternative("bad-utf8").Repository("quay.io/acme/app").Repository("mirror.local/acme/\xff\xfe").Build()), "spec.alternatives[1].repository"},
		{ptr(testutil.NewImageMirror("bad-glob", "mirror.local/m/").Exclude("ghcr.io/[abc").Build()), "spec.excludeImages"},
		{ptr(testutil.NewImageMirror("bad-path", "mirror.local:5000").Build()), "spec.destination.path"},
		{ptr(testutil.NewImageAlternative("bad-selector").Repository("quay.io/acme/app").Repository("mirror.local/acme/app").
			PodSelector(map[string]string{"not a label key!": "x"}).Build()), "spec.podSelector"},
		{ptr(testutil.NewImageAlternative("bad-secret-name").Repository("quay.io/acme/app").Repository("mirror.local/acme/app").SecretRef("Not_A_Name").Build()), "spec.alternatives[1].auth.secretRef.name"},
	}
	for _, c := range cases {
		err := w.cl.Create(ctx, c.obj)
		switch {
		case err == nil:
			w.fail.add("%s was admitted", c.obj.GetName())
			_ = w.cl.Delete(ctx, c.obj)
		case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err):
			w.fail.add("%s: refused with an unexpected error: %v", c.obj.GetName(), err)
		case !strings.Contains(err.Error(), c.field):
			w.fail.add("%s: refused without naming %s: %v", c.obj.GetName(), c.field, err)
		default:
			msg := err.Error()
			if len(msg) > 220 {
				msg = msg[:220] + "…"
			}
			fmt.Printf("%-20s refused, names %s: %s\n", c.obj.GetName(), c.field, msg)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// podKind is one kind of bad (or floor) pod.
type podKind struct {
	name      string
	namespace string
	protobuf  bool
	build     func(i int) *corev1.Pod
}

func (w *world) pods(ctx context.Context, timeout, budget time.Duration) error {
	n := *flagPods
	r := *flagResources
	hundred := func(i int) *corev1.Pod {
		p := basePod("hundred")
		for k := range 100 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%03d", k), Image: w.original((i*100+k)%r) + ":v1"})
		}
		return p
	}
	covered := func(i int) *corev1.Pod {
		p := basePod("covered")
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: w.original(i%r) + ":v1"}}
		return p
	}
	utf8Annotations := func(p *corev1.Pod) *corev1.Pod {
		p.Labels[v1alpha1.LabelRewritten] = "true"
		p.Annotations = map[string]string{
			v1alpha1.AnnotationOriginalImages: "{\"app\":\"" + w.original(1) + ":v1\xff\xfe\"}",
			v1alpha1.AnnotationRewrittenBy:    "{\"app\":\"ImageAlternative/flood-\xc3\x28\"}",
			v1alpha1.AnnotationReason:         "\xed\xa0\x80\xff",
			"kuik.enix.io/other":              "\xf0\x28\x8c\x28",
			"example.com/user":                "caf\xe9",
		}
		return p
	}
	kinds := []podKind{
		{name: "floor: plain, uncovered", namespace: nsPlain, build: func(int) *corev1.Pod { return basePod("plain") }},
		{name: "covered, 1 container", namespace: nsFlood, build: covered},
		{name: "100 containers, covered", namespace: nsFlood, build: hundred},
		{name: "4 KiB images", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := basePod("long-image")
			p.Spec.Containers = []corev1.Container{
				{Name: "tag", Image: w.original(i%r) + ":" + strings.Repeat("t", 4096)},
				{Name: "path", Image: w.downs[0] + "/acme/" + strings.Repeat("p/", 2048) + "app:v1"},
				{Name: "digest", Image: w.original(i%r) + "@sha256:" + strings.Repeat("0", 4096)},
			}
			return p
		}},
		{name: "invalid UTF-8 in kuik annotations, protobuf, covered", namespace: nsFlood, protobuf: true, build: func(i int) *corev1.Pod { return utf8Annotations(covered(i)) }},
		{name: "invalid UTF-8 in kuik annotations, protobuf, uncovered", namespace: nsPlain, protobuf: true, build: func(int) *corev1.Pod { return utf8Annotations(basePod("plain-utf8")) }},
		{name: "invalid UTF-8 in kuik annotations, JSON, covered", namespace: nsFlood, build: func(i int) *corev1.Pod { return utf8Annotations(covered(i)) }},
		{name: "annotations at 256 KiB - 1 KiB, covered", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := covered(i)
			p.Annotations = map[string]string{"example.com/blob": strings.Repeat("b", 256*1024-1024-len("example.com/blob"))}
			return p
		}},
		{name: "annotations at 256 KiB - 64 B, covered", namespace: nsFlood, build: func(i int) *corev1.Pod {
			p := covered(i)
			p.Annotations = map[string]string{"example.com/blob": strings.Repeat("b", 256*1024-64-len("example.com/blob"))}
			return p
		}},
		{name: "100 containers under every ImageMirror", namespace: nsMirrored, build: hundred},
	}
	fmt.Printf("\n== 2. Pods through the API server (%d per kind, %d workers); admission budget %s, timeoutSeconds %s\n", n, *flagWorkers, budget, timeout)
	fmt.Printf("%-56s %-40s %s\n", "kind", "create latency p50 / p99 / max", "outcome")
	var floor time.Duration
	for _, k := range kinds {
		var mu sync.Mutex
		var lat []time.Duration
		var refused, rewritten, containers atomic.Int64
		var firstErr atomic.Value
		reasons := map[string]int{}
		cs := w.cs
		if k.protobuf {
			cs = w.proto
		}
		_ = benchutil.Parallel(ctx, n, *flagWorkers, func(ctx context.Context, i int) error {
			p := k.build(i)
			t := time.Now()
			got, err := cs.CoreV1().Pods(k.namespace).Create(ctx, p, metav1.CreateOptions{})
			took := time.Since(t)
			mu.Lock()
			lat = append(lat, took)
			mu.Unlock()
			if err != nil {
				refused.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return nil
			}
			for j, c := range got.Spec.Containers {
				containers.Add(1)
				if c.Image != p.Spec.Containers[j].Image {
					rewritten.Add(1)
				}
			}
			var rs map[string]string
			_ = json.Unmarshal([]byte(got.Annotations[v1alpha1.AnnotationReason]), &rs)
			mu.Lock()
			for _, r := range rs {
				reasons[r]++
			}
			mu.Unlock()
			return nil
		})
		slices.Sort(lat)
		p50 := pct(lat, 50)
		if floor == 0 {
			floor = p50
		}
		outcome := fmt.Sprintf("%d/%d containers rewritten", rewritten.Load(), containers.Load())
		if len(reasons) > 0 {
			var rs []string
			for r, c := range reasons {
				rs = append(rs, fmt.Sprintf("%s %d", r, c))
			}
			slices.Sort(rs)
			outcome += " (reasons: " + strings.Join(rs, ", ") + ")"
		}
		if refused.Load() > 0 {
			outcome = fmt.Sprintf("%d/%d pods REFUSED: %v", refused.Load(), n, firstErr.Load())
			w.fail.add("%s: %d pods refused: %v", k.name, refused.Load(), firstErr.Load())
		}
		// A timing, not an outcome: printed, never a failure. Past timeoutSeconds the API server
		// gives up on the webhook and (failurePolicy Ignore) admits the pod unrouted.
		over := ""
		if n := overBudget(lat, timeout); n > 0 {
			over = fmt.Sprintf(" %d OVER timeoutSeconds", n)
		}
		fmt.Printf("%-56s %-40s %s\n", k.name, fmt.Sprintf("%s / %s / %s (%.2fx floor p50)%s", p50, pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond), float64(p50)/float64(floor), over), outcome)
		w.checkAlive(ctx, "after "+k.name)
	}
	return nil
}

func overBudget(lat []time.Duration, limit time.Duration) int {
	n := 0
	for _, d := range lat {
		if d > limit {
			n++
		}
	}
	return n
}

func basePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/team/app:v1"}}},
	}
}

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

func gauge(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

func summary(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	return fmt.Sprintf("p50 %s p99 %s max %s", pct(d, 50), pct(d, 99), d[len(d)-1].Round(time.Millisecond))
}

// tb lets testutil's registry run outside a test: a failure panics, cleanups are the caller's.
type tb struct{ testing.TB }

func (tb) Helper()                   {}
func (tb) Cleanup(func())            {}
func (tb) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (tb) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// pct is the p-th percentile of sorted, rounded for printing.
func pct(sorted []time.Duration, p int) time.Duration {
	return benchutil.Percentile(sorted, p).Round(time.Millisecond)
}
