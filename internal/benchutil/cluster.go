package benchutil

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/enix/kuik/internal/testenv"
)

// StartControlPlane starts a local control plane and writes to w how long it took.
func StartControlPlane(ctx context.Context, w io.Writer, opts testenv.Options) (*testenv.ControlPlane, error) {
	t0 := time.Now()
	cp, err := testenv.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(w, "control plane ready in %s\n", time.Since(t0).Round(time.Millisecond))
	return cp, nil
}

// Unthrottled is the control plane's admin config without client-side rate limits, so that
// the client is never the bottleneck of a measure.
func Unthrottled(cp *testenv.ControlPlane) *rest.Config {
	cfg := cp.Config()
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// Protobuf is a copy of cfg that sends protobuf and accepts accept (protobuf, JSON or both).
func Protobuf(cfg *rest.Config, accept string) *rest.Config {
	p := rest.CopyConfig(cfg)
	p.ContentType = "application/vnd.kubernetes.protobuf"
	p.AcceptContentTypes = accept
	return p
}

// CreateNamespace creates the namespace name with labels.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// GetOK fails unless a GET of url answers 200.
func GetOK(ctx context.Context, url string) error {
	_, err := Get(ctx, url)
	return err
}

// Get is the body of a GET of url, which must answer 200.
func Get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
