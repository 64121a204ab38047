package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/syncer"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil"
)

// bench holds what the phases share.
type bench struct {
	cp     *testenv.ControlPlane
	admin  *rest.Config
	cs     kubernetes.Interface // JSON, as the syncer's own client: the floor
	create kubernetes.Interface // protobuf, for the objects the phases need (not measured)
	cl     client.Client
	names  []string // the Always namespaces
	data   []byte   // the .dockerconfigjson every Always Secret holds
}

// newBench starts the control plane with the CRDs, its clients, and the secretRef Secret creds.
func newBench(ctx context.Context) (_ *bench, err error) {
	cp, err := benchutil.StartControlPlane(ctx, os.Stdout, testenv.Options{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	b := &bench{cp: cp, admin: benchutil.Unthrottled(cp)}
	if b.cs, err = kubernetes.NewForConfig(b.admin); err != nil {
		return nil, err
	}
	if b.create, err = kubernetes.NewForConfig(benchutil.Protobuf(b.admin, "application/vnd.kubernetes.protobuf,application/json")); err != nil {
		return nil, err
	}
	scheme, err := syncer.Scheme()
	if err != nil {
		return nil, err
	}
	if b.cl, err = client.New(b.admin, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, b.admin); err != nil {
		return nil, err
	}
	if err := benchutil.CreateNamespace(ctx, b.cs, crns, nil); err != nil {
		return nil, err
	}
	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: crns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{"quay.io": "user:password", "registry.tld": "mirror:password"})},
	}
	if _, err := b.cs.CoreV1().Secrets(crns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return b, nil
}

// createNamespaces creates the -namespaces Always namespaces, labelled bench=always.
func (b *bench) createNamespaces(ctx context.Context) error {
	n := *flagNamespaces
	b.names = make([]string, n)
	for i := range b.names {
		b.names[i] = fmt.Sprintf("bench-%05d", i)
	}
	t0 := time.Now()
	err := benchutil.Parallel(ctx, n, *flagCreateWorkers, func(ctx context.Context, i int) error {
		return benchutil.CreateNamespace(ctx, b.create, b.names[i], map[string]string{"bench": "always"})
	})
	if err != nil {
		return fmt.Errorf("creating namespaces: %w", err)
	}
	fmt.Printf("created %d namespaces in %s\n", n, time.Since(t0).Round(time.Millisecond))
	return nil
}
func installCRDs(ctx context.Context, cfg *rest.Config) error {
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD in config/crd: %w", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
