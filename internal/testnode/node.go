package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/enix/kuik/internal/testenv"
)

// The node's names and networks. They are constants because every run has network namespaces
// of its own: two runs at once do not share any of them.
const (
	// NodeName is the Node's name.
	NodeName = "testnode"
	// NodeIP is the node's InternalIP, on an interface of the node's network namespace; the API
	// server listens on it and publishes it as the kubernetes Service's endpoint.
	NodeIP = "10.77.0.1"
	// NodeCIDR is the node's network (NodeIP and nothing else).
	NodeCIDR = "10.77.0.0/24"
	// PodCIDR is the pods' network, a bridge in the node's namespace (its gateway is .1). Pods
	// have routes to the node and to the Services, and none out.
	PodCIDR = "10.244.0.0/24"
	// SandboxImage is the pods' sandbox ("pause") image, imported into containerd at start.
	SandboxImage = "kuik.test/pause:1"
)

// Options choose what the node's control plane does beyond the defaults.
type Options struct {
	// CRDs installs kuik's CRDs before kube-controller-manager starts.
	CRDs bool
	// APIServerArgs are extra kube-apiserver flags ("--name=value").
	APIServerArgs []string
}

// Node is a single-node cluster: the control plane (etcd, kube-apiserver,
// kube-controller-manager with every controller, kube-scheduler) and a node (containerd with
// runc, the kubelet, kube-proxy), everything inside network namespaces of the test binary's own.
type Node struct {
	// ControlPlane gives the admin rest.Config (Config), the kubeconfig path and the CA.
	*testenv.ControlPlane
	// Name and IP are the Node's name and InternalIP.
	Name, IP string
	// Dir holds the node's configuration, state and logs (logs/): <run>/node, seen by the
	// node's processes (and the tests) under a short path of their private /run.
	Dir string
	// Timings are the start's milestones, from the start of Start.
	Timings []Timing

	guest          string // the images' program
	bin, k8sBin    string // node and Kubernetes binaries
	containerdSock string
	certsDir       string // containerd's hosts.toml directory

	containerd, kubelet, proxy *testenv.Process
	stopOnce                   sync.Once
}

// Timing is a start milestone.
type Timing struct {
	Name  string
	Since time.Duration
}

// NodeAssetsDir is the directory holding containerd, ctr, containerd-shim-runc-v2 and cni/:
// $KUIK_NODE_ASSETS, or the one hack/node.sh fills for the pinned versions.
func NodeAssetsDir() (string, error) {
	dir := os.Getenv("KUIK_NODE_ASSETS")
	if dir == "" {
		v, err := testenv.ReadVersions()
		if err != nil {
			return "", err
		}
		cache, err := testenv.CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "assets", "node-containerd-"+v["CONTAINERD_VERSION"]+"-cni-"+v["CNI_PLUGINS_VERSION"])
	}
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "cni/loopback", "cni/bridge", "cni/host-local"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("node binary %s not found in %s: run hack/node.sh (make node) first", b, dir)
		}
	}
	return dir, nil
}

// unavailable says why a node cannot run here, or "".
func unavailable() string {
	if runtime.GOOS != "linux" {
		return "needs Linux (namespaces, cgroups, containerd)"
	}
	if os.Geteuid() != 0 {
		return "needs root (namespaces, cgroups, mounts, containerd)"
	}
	k8s, err := testenv.AssetsDir()
	if err != nil {
		return err.Error()
	}
	for _, b := range []string{"kubelet", "kube-scheduler", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(k8s, b)); err != nil {
			return fmt.Sprintf("%s not found in %s: run hack/controlplane.sh (make controlplane)", b, k8s)
		}
	}
	if _, err := NodeAssetsDir(); err != nil {
		return err.Error()
	}
	for _, c := range []struct{ cmd, pkg string }{{"runc", "runc"}, {"nft", "nftables"}, {"ip", "iproute2"}} {
		if lookSbin(c.cmd) == "" {
			return fmt.Sprintf("%s not found: apt-get install %s (hack/node.sh installs it)", c.cmd, c.pkg)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return "no /sys/fs/cgroup"
	}
	return ""
}

// lookSbin finds a command on PATH or in the sbin directories root's PATH usually has.
func lookSbin(cmd string) string {
	if p, err := exec.LookPath(cmd); err == nil {
		return p
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if p := filepath.Join(d, cmd); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start runs the node; it must run in the namespaces Run made (the node role).
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	t0 := time.Now()
	run := os.Getenv(runEnv)
	if os.Getenv(roleEnv) != roleNode || run == "" {
		return nil, errors.New("testnode.Start runs only inside testnode.Run's namespaces")
	}
	st, err := readState(run)
	if err != nil {
		return nil, err
	}
	n = &Node{Name: NodeName, IP: NodeIP, Dir: nodeDir(run), guest: filepath.Join(run, "bin", "guest")}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	var mu sync.Mutex
	mark := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		n.Timings = append(n.Timings, Timing{Name: name, Since: time.Since(t0)})
	}
	if n.bin, err = NodeAssetsDir(); err != nil {
		return nil, err
	}
	if n.k8sBin, err = testenv.AssetsDir(); err != nil {
		return nil, err
	}
	for _, d := range []string{"logs", "pki", "containerd/certs.d", "cni/net.d", "cni/ipam", "kubelet/root", "kubelet/pki", "kubelet/volume-plugins", "pod-logs", "images"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o750); err != nil {
			return nil, fmt.Errorf("creating node dir: %w", err)
		}
	}
	n.containerdSock = filepath.Join(n.Dir, "containerd", "containerd.sock")
	n.certsDir = filepath.Join(n.Dir, "containerd", "certs.d")

	// containerd first: it needs nothing from the control plane.
	if err := n.writeContainerdConfig(); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(n.bin, "containerd"), "--config", filepath.Join(n.Dir, "containerd", "config.toml"), "--log-level", "warn")
	cmd.Env = n.env()
	if n.containerd, err = testenv.StartProcess("containerd", cmd, n.log("containerd")); err != nil {
		return nil, err
	}
	// While the control plane starts: wait for containerd and import the sandbox image.
	containerdReady := make(chan error, 1)
	go func() {
		err := n.containerd.WaitFor(ctx, 30*time.Second, func(ctx context.Context) error {
			_, err := n.ctr(ctx, "version")
			return err
		})
		if err == nil {
			err = n.importSandboxImage(ctx)
		}
		if err == nil {
			mark("containerd ready, sandbox image imported")
		}
		containerdReady <- err
	}()

	ca, err := testenv.NewCA()
	if err != nil {
		return nil, err
	}
	cp, err := testenv.Start(ctx, testenv.Options{
		CA:               ca,
		AdvertiseAddress: NodeIP,
		Cluster:          true,
		CRDs:             opts.CRDs,
		Dir:              filepath.Join(run, "controlplane"),
		APIServerArgs:    opts.APIServerArgs,
	})
	if err != nil {
		return nil, errors.Join(err, <-containerdReady)
	}
	n.ControlPlane = cp
	mark("apiserver ready")
	if err := <-containerdReady; err != nil {
		return nil, err
	}

	if err := n.startKubelet(ca, st.CgroupRoot); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(ca); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(n.Config())
	if err != nil {
		return nil, fmt.Errorf("building admin client: %w", err)
	}
	if err := n.kubelet.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node not Ready")
	}); err != nil {
		return nil, err
	}
	mark("node Ready")
	// Pods are refused until their namespace's default ServiceAccount exists.
	if err := WaitServiceAccount(ctx, cs, metav1.NamespaceDefault); err != nil {
		return nil, err
	}
	mark("default ServiceAccount")
	return n, nil
}

// WaitServiceAccount waits until the namespace's default ServiceAccount exists (the
// ServiceAccount admission plugin refuses pods until then).
func WaitServiceAccount(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount of %s: %w", namespace, err)
	}
	return nil
}

// Stop stops the node and its control plane: kube-proxy and the kubelet, then every container
// through containerd (processes killed, shims ended, root file systems unmounted), then
// containerd and the control plane. Safe to call twice. What could survive it (shims, mounts,
// network) dies with the namespaces when the tests end.
func (n *Node) Stop() {
	if n == nil {
		return
	}
	n.stopOnce.Do(func() {
		n.proxy.Stop()
		n.kubelet.Stop()
		if n.containerd != nil {
			if err := n.removeContainers(); err != nil {
				fmt.Fprintf(os.Stderr, "testnode: removing containers: %v\n", err)
			}
		}
		n.containerd.Stop()
		n.ControlPlane.Stop()
	})
}

func (n *Node) log(name string) string { return filepath.Join(n.Dir, "logs", name+".log") }

// env is the daemons' environment: the node's binaries first on PATH (containerd looks its shim
// up there), then the system's, with sbin (runc, nft, mount).
func (n *Node) env() []string {
	env := []string{"PATH=" + n.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "KUIK_TESTNODE_") {
			env = append(env, kv)
		}
	}
	return env
}

// ctr runs containerd's client against the node's containerd, in the Kubernetes namespace.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.bin, "ctr"), append([]string{"--address", n.containerdSock, "--namespace", "k8s.io"}, args...)...)
	cmd.Env = n.env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return b, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return b, nil
}

// removeContainers ends every container of the node (pods' and sandboxes') through containerd:
// their processes are killed, their shims exit and their root file systems are unmounted.
// Deleting a sandbox's task can take its containers' with it, so it lists again until none is
// left.
func (n *Node) removeContainers() error {
	ctx := context.Background()
	for _, kind := range []string{"tasks", "containers"} {
		var lastErr error
		for range 3 {
			out, err := n.ctr(ctx, kind, "ls", "--quiet")
			if err != nil {
				return err
			}
			ids := strings.Fields(string(out))
			if len(ids) == 0 {
				lastErr = nil
				break
			}
			for _, id := range ids {
				args := []string{kind, "delete", id}
				if kind == "tasks" {
					args = []string{kind, "delete", "--force", id}
				}
				if _, err := n.ctr(ctx, args...); err != nil {
					lastErr = err
				}
			}
		}
		if lastErr != nil {
			return lastErr
		}
	}
	return nil
}

// importSandboxImage builds the pause image from the guest program and imports it: nothing is
// pulled from outside.
func (n *Node) importSandboxImage(ctx context.Context) error {
	img, err := GuestImage(n.guest, "sandbox")
	if err != nil {
		return err
	}
	tar := filepath.Join(n.Dir, "images", "pause.tar")
	if err := writeImageTar(tar, SandboxImage, img); err != nil {
		return err
	}
	if _, err := n.ctr(ctx, "images", "import", "--snapshotter", "overlayfs", tar); err != nil {
		return fmt.Errorf("importing the sandbox image: %w", err)
	}
	return nil
}
