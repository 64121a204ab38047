package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/testenv"
	"github.com/enix/kuik/internal/testutil/kuikenv"
)

// mode is which mutating webhook the API server calls for pods.
type mode int

const (
	modeNone mode = iota
	modeNoop
	// modeSame is the no-op webhook's program returning, for each scenario's pods, the JSON
	// patch kuik returns for them: what the API server's applying kuik's patch costs.
	modeSame
	modeKuik
)

var modes = []mode{modeNone, modeNoop, modeSame, modeKuik}

func (m mode) String() string {
	return [...]string{"none (the floor)", "no-op (same stack)", "same patch", "kuik"}[m]
}

// setMode points kuik's MutatingWebhookConfiguration at kuik, the no-op or the same-patch
// webhook, or deletes it.
func setMode(ctx context.Context, cs kubernetes.Interface, admin *rest.Config, configs map[mode]*unstructured.Unstructured, m mode) error {
	if m != modeNone {
		return testenv.Apply(ctx, admin, []*unstructured.Unstructured{configs[m].DeepCopy()})
	}
	err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, configs[modeKuik].GetName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the mutating webhook configuration: %w", err)
	}
	return nil
}

// sentinelClient is a client whose last warning from the API server warned holds.
func sentinelClient(cp *testenv.ControlPlane) (kubernetes.Interface, *atomic.Value, error) {
	warned := &atomic.Value{}
	warned.Store("")
	cfg := cp.Config()
	cfg.WarningHandler = warningFunc(func(text string) { warned.Store(text) })
	cs, err := kubernetes.NewForConfig(cfg)
	return cs, warned, err
}

type warningFunc func(string)

func (f warningFunc) HandleWarningHeader(_ int, _ string, text string) { f(text) }

// waitMode waits until the API server calls the webhook of mode m for pods: a dry-run pod of a
// down original in the sentinel namespace is rewritten exactly when it calls kuik, and warned
// about with the warning of the no-op or the same-patch webhook exactly when it calls that one.
func waitMode(ctx context.Context, cs kubernetes.Interface, warned *atomic.Value, down, up string, m mode) error {
	image := down + "/acme/app:v1"
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		warned.Store("")
		got, err := cs.CoreV1().Pods("sentinel").Create(ctx, benchutil.PlainPod("sentinel", "sentinel", image, 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		rewritten := got.Spec.Containers[0].Image == up+"/acme/app:v1"
		w := warned.Load().(string)
		last = fmt.Sprintf("image %s, warning %q", got.Spec.Containers[0].Image, w)
		return rewritten == (m == modeKuik) && (w == noopWarning) == (m == modeNoop) && (w == samePatchWarning) == (m == modeSame), nil
	})
	if err != nil {
		return fmt.Errorf("the API server never turned to calling %s (sentinel: %s): %w", m, last, err)
	}
	return nil
}

// noopWarning and samePatchWarning are what the no-op and the same-patch webhooks warn about
// pods of the sentinel namespace, so that waitMode can tell which is called.
const (
	noopWarning      = "no-op webhook"
	samePatchWarning = "same-patch webhook"
)

// serveNoop is the no-op webhook: controller-runtime's webhook server, as kuik's uses it,
// admitting every pod unchanged. Given a patches file (written by writePatches), it is the
// same-patch webhook: a pod the file has a patch for (by namespace and image) is admitted with
// that patch, every other one unchanged.
func serveNoop(port int, certDir, patchesFile, metricsAddr string) error {
	warning := noopWarning
	var patches patchSet
	if patchesFile != "" {
		var err error
		if patches, err = readPatches(patchesFile); err != nil {
			return err
		}
		warning = samePatchWarning
	}
	// controller-runtime's webhook metrics, as kuik's webhook serves them.
	metrics := &http.Server{Addr: metricsAddr, Handler: promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = metrics.ListenAndServe() }()
	srv := ctrlwebhook.NewServer(ctrlwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})
	srv.Register("/mutate-pods", &ctrlwebhook.Admission{Handler: admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		if req.Namespace == "sentinel" {
			return admission.Allowed("").WithWarnings(warning)
		}
		if patches != nil {
			return patches.admit(req)
		}
		return admission.Allowed("")
	})})
	return srv.Start(context.Background())
}

// startNoop runs this program as the no-op webhook, serving with the certificate in certDir
// (of the CA caPEM); as the same-patch webhook when patchesFile is not empty.
func startNoop(ctx context.Context, certDir string, caPEM []byte, patchesFile string) (*webhookProcess, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := kuikenv.FreePort()
	if err != nil {
		return nil, err
	}
	metricsAddr, err := kuikenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	w := &webhookProcess{port: port, metricsAddr: metricsAddr, exited: make(chan struct{})}
	if *flagProfile != "" {
		if w.pprofAddr, err = kuikenv.FreeAddr(); err != nil {
			return nil, err
		}
	}
	w.cmd = exec.Command(self, "-serve-noop", "-noop-port="+strconv.Itoa(port), "-noop-cert-dir="+certDir, "-noop-patches="+patchesFile, "-noop-metrics-addr="+metricsAddr, "-noop-pprof-addr="+w.pprofAddr)
	w.cmd.Stdout, w.cmd.Stderr = io.Discard, os.Stderr
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-w.exited:
			return false, errors.New("the no-op or same-patch webhook exited")
		default:
		}
		// A full handshake, so the server logs no handshake error.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("the no-op or same-patch webhook never listened: %w", err)
	}
	return w, nil
}
