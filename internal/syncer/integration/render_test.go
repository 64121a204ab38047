package integration_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/cmd/secret-syncer/app"
	"github.com/enix/kuik/internal/testutil"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// secret-syncer render, given the objects of the cluster, prints exactly the Secrets the
// running syncer applied.
func TestRenderMatchesWhatTheSyncerApplied(t *testing.T) {
	e := harness(t)
	n := name(t)
	putSecret(t, e, pullSecret(n+"-creds", map[string]string{"quay.io": "q:pw", "quay.io/acme": "a:pw", "registry.tld": "m:pw"}))
	ia := testutil.NewImageAlternative(n).Policy(v1alpha1.RewritePolicyAlways).NamespaceSelector(map[string]string{"scope": n}).
		Repository("quay.io/acme/foo").SecretRef(n + "-creds").
		Repository("quay.io/other/foo").SecretRef(n + "-creds").
		Repository("quay.io/acme/gone").SecretRef(n + "-missing").Build()
	create(t, e, &ia)
	im := testutil.NewImageMirror(n, "registry.tld/mirror/").SecretRef(n + "-creds").Build()
	create(t, e, &im)
	namespaces := []string{
		createNamespace(t, e, map[string]string{"scope": n}),
		createNamespace(t, e, map[string]string{"scope": n}),
		createNamespace(t, e, nil),
	}
	createPod(t, e, rewrittenPod(namespaces[2], "web", map[string]string{"web": "registry.tld/mirror/docker.io/library/nginx:1"}, map[string]rewrite{"web": {"nginx:1", "ImageMirror/" + n}}))
	startSyncer(t, syncerConfig())

	live := map[string]*corev1.Secret{}
	for _, ns := range namespaces[:2] {
		live[ns+"/kuik-inject-imagealternative-"+n] = secretHolds(t, e, ns, "kuik-inject-imagealternative-"+n, map[string]string{"quay.io/acme/foo": "a:pw", "quay.io/other/foo": "q:pw"})
	}
	live[namespaces[2]+"/kuik-inject-imagemirror-"+n] = secretHolds(t, e, namespaces[2], "kuik-inject-imagemirror-"+n, map[string]string{"registry.tld/mirror": "m:pw"})

	// Dump the world as kubectl get -o yaml would.
	dir := t.TempDir()
	ctx := t.Context()
	var gotIA v1alpha1.ImageAlternative
	var gotIM v1alpha1.ImageMirror
	if err := e.cl.Get(ctx, clientKey(n), &gotIA); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Get(ctx, clientKey(n), &gotIM); err != nil {
		t.Fatal(err)
	}
	gotIA.APIVersion, gotIA.Kind = "kuik.enix.io/v1alpha1", "ImageAlternative"
	gotIM.APIVersion, gotIM.Kind = "kuik.enix.io/v1alpha1", "ImageMirror"
	secrets, err := e.cs.CoreV1().Secrets(crns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nsObjs, podObjs []runtime.Object
	for _, ns := range namespaces {
		o, err := e.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o.APIVersion, o.Kind = "v1", "Namespace"
		nsObjs = append(nsObjs, o)
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			pods.Items[i].APIVersion, pods.Items[i].Kind = "v1", "Pod"
			podObjs = append(podObjs, &pods.Items[i])
		}
	}
	var secretObjs []runtime.Object
	for i := range secrets.Items {
		secrets.Items[i].APIVersion, secrets.Items[i].Kind = "v1", "Secret"
		secretObjs = append(secretObjs, &secrets.Items[i])
	}
	files := map[string][]runtime.Object{
		"resources.yaml":  {&gotIA, &gotIM},
		"secrets.yaml":    secretObjs,
		"namespaces.yaml": nsObjs,
		"pods.yaml":       podObjs,
	}
	for f, objs := range files {
		var b bytes.Buffer
		for _, o := range objs {
			y, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var stdout, stderr bytes.Buffer
	cmd := app.NewCommand(nil)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"render", "--cluster-resource-namespace", crns,
		"--resources", filepath.Join(dir, "resources.yaml"), "--secrets", filepath.Join(dir, "secrets.yaml"),
		"--namespaces", filepath.Join(dir, "namespaces.yaml"), "--pods", filepath.Join(dir, "pods.yaml")})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "spec.alternatives[2] (quay.io/acme/gone) left out: SecretNotFound") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("stderr = %q, want one line for spec.alternatives[2]", stderr.String())
	}

	dec := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	rendered := 0
	for {
		var s corev1.Secret
		if err := dec.Decode(&s); err != nil {
			break
		}
		if s.Name == "" {
			continue
		}
		rendered++
		l, ok := live[s.Namespace+"/"+s.Name]
		if !ok {
			t.Errorf("rendered %s/%s, which the syncer did not write", s.Namespace, s.Name)
			continue
		}
		if diff := cmp.Diff(l.Data, s.Data); diff != "" {
			t.Errorf("%s/%s data (-live +rendered):\n%s", s.Namespace, s.Name, diff)
		}
		if diff := cmp.Diff(l.Labels, s.Labels); diff != "" {
			t.Errorf("%s/%s labels (-live +rendered):\n%s", s.Namespace, s.Name, diff)
		}
		if diff := cmp.Diff(l.OwnerReferences, s.OwnerReferences); diff != "" {
			t.Errorf("%s/%s ownerReferences (-live +rendered):\n%s", s.Namespace, s.Name, diff)
		}
		if l.Type != s.Type {
			t.Errorf("%s/%s type %s, rendered %s", s.Namespace, s.Name, l.Type, s.Type)
		}
	}
	if rendered != len(live) {
		t.Errorf("rendered %d secrets, the syncer wrote %d", rendered, len(live))
	}
}
