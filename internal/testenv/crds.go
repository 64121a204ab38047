package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"
)

// CRDDir is the directory of kuik's generated CRDs.
func CRDDir() string { return filepath.Join(RepoRoot(), "config", "crd") }

// InstallCRDs applies every CRD found in dir, waits until each is established, then until
// the API serves kuik's group.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return fmt.Errorf("listing CRDs: %w", err)
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRD in %s", dir)
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading CRD: %w", err)
		}
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &crd.Object); err != nil {
			return fmt.Errorf("decoding %s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	if err := Apply(ctx, cp.admin, crds); err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.admin)
	if err != nil {
		return fmt.Errorf("building discovery client: %w", err)
	}
	// Discovery lags a little behind Established; wait until the API serves the resources.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := dc.ServerResourcesForGroupVersion("kuik.enix.io/v1alpha1")
		return err == nil, nil
	})
}
