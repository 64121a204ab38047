package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/metrics"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

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
		w.reg.Push(w.tb, fmt.Sprintf("acme/app-%03d:v1", i))
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
		return benchutil.Gauge(metrics.RoutingResources) >= want, nil
	})
	if err != nil {
		w.fail.add("the webhook's index holds %.0f routing resources, want %.0f", benchutil.Gauge(metrics.RoutingResources), want)
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

func summary(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	return fmt.Sprintf("p50 %s p99 %s max %s", pct(d, 50), pct(d, 99), d[len(d)-1].Round(time.Millisecond))
}
