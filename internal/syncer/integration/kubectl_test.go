package integration_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// kubectl runs the real kubectl of the control-plane assets against the test API server.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// What the incident walk-through (docs/operations/troubleshooting.md) relies on: with only
// `kubectl get ia,im -o wide` and `kubectl describe`, an operator sees which resource routes
// pods away now and where to, which one is a dry run, and why an entry's credential is left
// out, with its event.
func TestKubectlTellsWhatEachResourceDoesNow(t *testing.T) {
	e := harness(t)
	n := name(t)
	ns := createNamespace(t, e, map[string]string{"scope": n})
	ia := testutil.NewImageAlternative(n).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").Repository("registry.local/acme/foo").SecretRef(n + "-missing").Build()
	create(t, e, &ia)
	trial := testutil.NewImageMirror(n+"-trial", "registry.local/mirror/").Policy(v1alpha1.RewritePolicyAlways).DryRun().PinDigest().
		NamespaceSelector(map[string]string{"scope": n}).Build()
	create(t, e, &trial)
	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, createdPod(t, e, rewrittenPod(ns, fmt.Sprintf("p%d", i), map[string]string{"app": "registry.local/acme/foo:v1"},
			map[string]rewrite{"app": {original: "quay.io/acme/foo:v1", by: "ImageAlternative/" + n}})))
	}
	startSyncer(t, fallbackOptions(100*time.Millisecond))
	fallbacksAre(t, e, &ia, liveFallbacks{
		Active: []v1alpha1.ActiveFallback{{Original: "quay.io/acme/foo", RoutedTo: "registry.local/acme/foo", Pods: 3, Since: oldest(pods...)}},
		Total:  1, Pods: 3,
	})
	readyReason(t, e, &ia, v1alpha1.ReasonSecretNotFound)

	var wide string
	eventually(t, "kubectl get -o wide shows both resources as they are", func(context.Context) error {
		wide = kubectl(t, "get", "ia,im", "-o", "wide")
		var problems []string
		for _, h := range []string{"POLICY", "READY", "REASON", "FALLBACKS", "DRYRUN", "PINDIGEST", "RECREATE", "PODS", "TOP-FALLBACK"} {
			if !strings.Contains(wide, h) {
				problems = append(problems, "no column "+h)
			}
		}
		iaRow, imRow := row(wide, "imagealternative.kuik.enix.io/"+n), row(wide, "imagemirror.kuik.enix.io/"+n+"-trial")
		for _, want := range []string{"OnFailure", "False", "SecretNotFound", " 1 ", " 3 ", "registry.local/acme/foo"} {
			if !strings.Contains(iaRow, want) {
				problems = append(problems, fmt.Sprintf("ImageAlternative row %q lacks %q", iaRow, want))
			}
		}
		for _, want := range []string{"Always", "True", "DryRun", "true"} {
			if !strings.Contains(imRow, want) {
				problems = append(problems, fmt.Sprintf("ImageMirror row %q lacks %q", imRow, want))
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s\n%s", strings.Join(problems, "\n"), wide)
		}
		return nil
	})
	t.Logf("kubectl get ia,im -o wide:\n%s", wide)

	var described string
	eventually(t, "kubectl describe shows the fallbacks, the condition and the event", func(context.Context) error {
		described = kubectl(t, "describe", "ia", n)
		for _, want := range []string{"Active Fallbacks:", "Routed To:", "registry.local/acme/foo", "SecretNotFound", "Warning", v1alpha1.EventPullSecretInjectionFailed} {
			if !strings.Contains(described, want) {
				return fmt.Errorf("no %q in:\n%s", want, described)
			}
		}
		return nil
	})
	t.Logf("kubectl describe ia %s:\n%s", n, described)
}

// row is the line of kubectl's table that starts with name.
func row(table, name string) string {
	for line := range strings.SplitSeq(table, "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}
