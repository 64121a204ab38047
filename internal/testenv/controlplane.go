package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options choose what runs besides etcd and kube-apiserver.
type Options struct {
	// GarbageCollection starts kube-controller-manager with the garbage collector and the
	// namespace controller, so ownerReference dependents are deleted and namespaces finish
	// terminating.
	GarbageCollection bool
	// APIServerArgs are extra kube-apiserver flags ("--name=value").
	APIServerArgs []string
	// CRDs installs kuik's generated CRDs (config/crd) once the API server is ready.
	CRDs bool
	// Dir, when set, holds the control plane's files instead of a temporary directory.
	Dir string
	// Detached leaves the processes running after this process exits (the demo); their pids
	// go to Dir/pids and StopDetached ends them. Stop still ends them too.
	Detached bool
	// CA, when set, signs the control plane's certificates instead of a new CA (a node signs
	// its kubelet's with the same one).
	CA *CA
	// AdvertiseAddress, when set, is the address the API server listens on and publishes as
	// the endpoint of the kubernetes Service (a node's address in a network namespace of its
	// own). Unset, the API server listens on 127.0.0.1 and the Service has no endpoint, since
	// an endpoint may not be a loopback address.
	AdvertiseAddress string
	// Cluster runs the control plane a kubelet joins: Node and RBAC authorization with the
	// NodeRestriction and ServiceAccount admission plugins, kube-controller-manager with every
	// controller (each under its own service account), and kube-scheduler. It implies
	// GarbageCollection.
	Cluster bool
}

// ServiceCIDR is the control plane's Service network; its first address is the kubernetes
// Service's ClusterIP.
const ServiceCIDR = "10.96.0.0/24"

// KubernetesServiceIP is the ClusterIP of the kubernetes Service, in ServiceCIDR.
const KubernetesServiceIP = "10.96.0.1"

// ControlPlane is a running etcd + kube-apiserver (+ kube-controller-manager).
type ControlPlane struct {
	// Dir holds certificates, kubeconfig, data and logs; removed by Stop.
	Dir string
	// CA signed the API server's certificate and the admin client's; test servers that the API
	// server calls (webhooks) use certificates from it too.
	CA *CA
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string

	keepDir   bool
	detached  bool
	admin     *rest.Config
	etcd      *process
	apiserver *process
	// apiBin and apiArgs start kube-apiserver again on the same etcd, ports and files
	// (RestartAPIServer); restarts counts those restarts, naming their logs.
	apiBin    string
	apiArgs   []string
	apiURL    string
	restarts  int
	kcm       *process
	scheduler *process
}

// Start runs a control plane; it retries when another process took one of its ports.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	if opts.Cluster {
		if _, err := os.Stat(filepath.Join(assets, "kube-scheduler")); err != nil {
			return nil, fmt.Errorf("kube-scheduler not found in %s: run hack/controlplane.sh (make controlplane): %w", assets, err)
		}
	}
	var lastErr error
	for range 3 {
		cp, err := start(ctx, assets, opts)
		if err == nil {
			return cp, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, assets string, opts Options) (cp *ControlPlane, err error) {
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "kuik-testenv-"); err != nil {
			return nil, fmt.Errorf("creating control-plane dir: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating control-plane dir: %w", err)
	}
	cp = &ControlPlane{Dir: dir, keepDir: opts.Dir != "", detached: opts.Detached}
	// Every failure returns a nil cp: stop what was started through this copy.
	started := cp
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]

	if cp.CA = opts.CA; cp.CA == nil {
		if cp.CA, err = NewCA(); err != nil {
			return nil, err
		}
	}
	apiHost := "127.0.0.1"
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(KubernetesServiceIP)}
	if opts.AdvertiseAddress != "" {
		apiHost = opts.AdvertiseAddress
		ips = append(ips, net.ParseIP(apiHost))
	}
	serving, err := cp.CA.ServingPairFor(ips, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return nil, err
	}
	if err := serving.WriteFiles(dir, "apiserver.crt", "apiserver.key"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), cp.CA.PEM, 0o600); err != nil {
		return nil, fmt.Errorf("writing CA: %w", err)
	}
	admin, err := cp.CA.ClientPair("kuik-testenv-admin", "system:masters")
	if err != nil {
		return nil, err
	}
	saPub, saKey, err := writeServiceAccountKeys(dir)
	if err != nil {
		return nil, err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)
	cp.etcd, err = startProcess("etcd", filepath.Join(assets, "etcd"), filepath.Join(dir, "etcd.log"), opts.Detached,
		"--name=default",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	if err := cp.etcd.waitFor(ctx, 30*time.Second, httpOK(http.DefaultClient, etcdURL+"/health")); err != nil {
		return nil, err
	}

	apiURL := "https://" + net.JoinHostPort(apiHost, strconv.Itoa(apiPort))
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + apiHost,
		"--advertise-address=" + apiHost,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + filepath.Join(dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(dir, "ca.crt"),
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--service-account-issuer=" + apiURL,
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--allow-privileged=true",
		"--profiling=false",
	}
	if opts.AdvertiseAddress == "" {
		// The default reconciler would publish 127.0.0.1, which an endpoint may not be.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if opts.Cluster {
		kubeletClient, err := cp.CA.ClientPair("kube-apiserver-kubelet-client", "system:masters")
		if err != nil {
			return nil, err
		}
		if err := kubeletClient.WriteFiles(dir, "kubelet-client.crt", "kubelet-client.key"); err != nil {
			return nil, err
		}
		args = append(args,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--kubelet-client-certificate="+filepath.Join(dir, "kubelet-client.crt"),
			"--kubelet-client-key="+filepath.Join(dir, "kubelet-client.key"),
			"--kubelet-certificate-authority="+filepath.Join(dir, "ca.crt"),
			"--kubelet-preferred-address-types=InternalIP",
		)
	} else {
		args = append(args,
			"--authorization-mode=RBAC",
			// No kubelet creates service accounts' tokens here, and pods never run.
			"--disable-admission-plugins=ServiceAccount",
		)
	}
	args = append(args, opts.APIServerArgs...)
	cp.apiBin, cp.apiArgs, cp.apiURL = filepath.Join(assets, "kube-apiserver"), args, apiURL
	cp.apiserver, err = startProcess("kube-apiserver", cp.apiBin, filepath.Join(dir, "kube-apiserver.log"), opts.Detached, args...)
	if err != nil {
		return nil, err
	}

	cp.admin = &rest.Config{
		Host:            apiURL,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CA.PEM, CertData: admin.CertPEM, KeyData: admin.KeyPEM},
		// Tests must not be throttled by the client; the API server's own fairness applies.
		QPS:   -1,
		Burst: -1,
	}
	if err := cp.waitAPIServer(ctx); err != nil {
		return nil, err
	}

	cp.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.Kubeconfig, apiURL, cp.CA.PEM, admin); err != nil {
		return nil, err
	}

	if opts.CRDs {
		if err := cp.InstallCRDs(ctx, CRDDir()); err != nil {
			return nil, err
		}
	}

	if opts.GarbageCollection || opts.Cluster {
		controllers := "garbagecollector,namespace"
		if opts.Cluster {
			controllers = "*"
		}
		kcmArgs := []string{
			"--kubeconfig=" + cp.Kubeconfig,
			"--controllers=" + controllers,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=0",
			"--concurrent-gc-syncs=10",
		}
		if opts.Cluster {
			kcmArgs = append(kcmArgs,
				"--use-service-account-credentials=true",
				"--service-account-private-key-file="+saKey,
				"--root-ca-file="+filepath.Join(dir, "ca.crt"),
				"--service-cluster-ip-range="+ServiceCIDR,
				// Its default, /usr/libexec/kubernetes/..., would be created on the host.
				"--flex-volume-plugin-dir="+filepath.Join(dir, "kcm-volume-plugins"),
			)
		}
		cp.kcm, err = startProcess("kube-controller-manager", filepath.Join(assets, "kube-controller-manager"), filepath.Join(dir, "kube-controller-manager.log"), opts.Detached, kcmArgs...)
		if err != nil {
			return nil, err
		}
		// The controller manager has no health port here (secure-port=0): wait until it has
		// made its first API call, so a test that deletes an owner right away is still served.
		cs, err := kubernetes.NewForConfig(cp.admin)
		if err != nil {
			return nil, fmt.Errorf("building admin client: %w", err)
		}
		if err := cp.kcm.waitFor(ctx, 60*time.Second, func(ctx context.Context) error {
			_, err := cs.CoordinationV1().Leases("kube-system").List(ctx, listOne)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if opts.Cluster {
		cp.scheduler, err = startProcess("kube-scheduler", filepath.Join(assets, "kube-scheduler"), filepath.Join(dir, "kube-scheduler.log"), opts.Detached,
			"--kubeconfig="+cp.Kubeconfig,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=0",
		)
		if err != nil {
			return nil, err
		}
	}
	if opts.Detached {
		if err := cp.writePids(); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// Stop ends every process and removes the control plane's directory. It is safe to call twice.
func (cp *ControlPlane) Stop() {
	if cp == nil {
		return
	}
	cp.scheduler.stop()
	cp.kcm.stop()
	cp.apiserver.stop()
	cp.etcd.stop()
	cp.scheduler, cp.kcm, cp.apiserver, cp.etcd = nil, nil, nil, nil
	if cp.Dir != "" && !cp.keepDir {
		_ = os.RemoveAll(cp.Dir)
		cp.Dir = ""
	}
}

// waitAPIServer waits until kube-apiserver answers /readyz.
func (cp *ControlPlane) waitAPIServer(ctx context.Context) error {
	rt, err := rest.TransportFor(cp.admin)
	if err != nil {
		return fmt.Errorf("building admin transport: %w", err)
	}
	return cp.apiserver.waitFor(ctx, 90*time.Second, httpOK(&http.Client{Transport: rt, Timeout: 5 * time.Second}, cp.apiURL+"/readyz"))
}

// KillAPIServer kills kube-apiserver with SIGKILL (its whole process group) and waits until it
// has exited; etcd and the other processes keep running. RestartAPIServer starts it again.
func (cp *ControlPlane) KillAPIServer() error {
	if cp.apiserver == nil {
		return errors.New("kube-apiserver is not running")
	}
	if err := syscall.Kill(-cp.apiserver.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver: %w", err)
	}
	<-cp.apiserver.exited
	cp.apiserver = nil
	return nil
}

// RestartAPIServer starts kube-apiserver again, after KillAPIServer, with the same flags: the
// same etcd, port, certificates and service-account keys, so clients and tokens of the first
// one keep working. It waits until /readyz answers; its log is kube-apiserver-<n>.log.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if cp.apiserver != nil {
		return errors.New("kube-apiserver is still running: call KillAPIServer first")
	}
	cp.restarts++
	p, err := startProcess("kube-apiserver", cp.apiBin, filepath.Join(cp.Dir, fmt.Sprintf("kube-apiserver-%d.log", cp.restarts)), cp.detached, cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.apiserver = p
	if cp.detached {
		if err := AppendPids(cp.Dir, strconv.Itoa(p.cmd.Process.Pid)); err != nil {
			return err
		}
	}
	return cp.waitAPIServer(ctx)
}

// GarbageCollection reports whether kube-controller-manager runs.
func (cp *ControlPlane) GarbageCollection() bool { return cp.kcm != nil }

// ErrNoControllerManager is returned by helpers that need garbage collection when it is off.
var ErrNoControllerManager = errors.New("kube-controller-manager is not running: start with Options.GarbageCollection")

func httpOK(c *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}
