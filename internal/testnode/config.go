package testnode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/enix/kuik/internal/testenv"
)

// containerd 2.x, configuration version 4. Every setting here was needed on the machines kuik
// is tested on; see TESTING.md, "A real node".
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 4
# Version 4 imports /etc/containerd/conf.d/*.toml by default.
imports = []
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
temp = "{{.Dir}}/containerd/tmp"

[plugins]
  # Version 4 reads its sockets here: a top-level [grpc] table is silently ignored.
  [plugins.'io.containerd.server.v1.grpc']
    address = "{{.Sock}}"
  [plugins.'io.containerd.server.v1.ttrpc']
    address = "{{.Sock}}.ttrpc"
  [plugins.'io.containerd.internal.v1.opt']
    path = "{{.Dir}}/containerd/opt"
  # NRI would create /var/run/nri/nri.sock.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      # Imported at start: nothing is pulled for sandboxes.
      sandbox = "{{.Sandbox}}"
    [plugins.'io.containerd.cri.v1.images'.registry]
      # One hosts.toml per registry that is not on 127.0.0.1 (which containerd tries over
      # HTTPS, then plain HTTP, by itself).
      config_path = "{{.CertsDir}}"

  [plugins.'io.containerd.cri.v1.runtime']
    # Pods' network namespaces are bind-mounted under state/, not /var/run/netns.
    netns_mounts_under_state_dir = true
    # Root may lack CAP_SYS_RESOURCE (as here), and then cannot lower an oom_score_adj: every
    # sandbox would fail in runc ("can't get final child's PID from pipe").
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{{.Bin}}/cni"]
      conf_dir = "{{.Dir}}/cni/net.d"
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{{.Runc}}"
          Root = "{{.Dir}}/containerd/runc"
          SystemdCgroup = false

  [plugins.'io.containerd.grpc.v1.cri']
    # The kubelet proxies exec, attach and port-forward to this server.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`))

func (n *Node) writeContainerdConfig() error {
	var b bytes.Buffer
	if err := containerdConfig.Execute(&b, map[string]string{
		"Dir": n.Dir, "Sock": n.containerdSock, "Sandbox": SandboxImage, "CertsDir": n.certsDir,
		"Bin": n.bin, "Runc": lookSbin("runc"),
	}); err != nil {
		return fmt.Errorf("rendering containerd config: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(n.Dir, "containerd"), 0o750); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "containerd", "config.toml"), b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	// Pods: loopback, and eth0 on a bridge of the node's namespace with no masquerade and routes
	// to the node and the Services only. hairpinMode lets a pod reach itself through a Service.
	cni := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "testnode",
		"plugins": []any{
			map[string]any{"type": "loopback"},
			map[string]any{
				"type":             "bridge",
				"bridge":           "cni0",
				"isGateway":        true,
				"isDefaultGateway": false,
				"ipMasq":           false,
				"hairpinMode":      true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(n.Dir, "cni", "ipam"),
					"ranges":  []any{[]any{map[string]any{"subnet": PodCIDR}}},
					"routes":  []any{map[string]any{"dst": NodeCIDR}, map[string]any{"dst": testenv.ServiceCIDR}},
				},
			},
		},
	}
	return writeJSON(filepath.Join(n.Dir, "cni", "net.d", "10-testnode.conflist"), cni)
}

func (n *Node) startKubelet(ca *testenv.CA, cgroupRoot string) error {
	pki := filepath.Join(n.Dir, "pki")
	serving, err := ca.ServingPairFor([]net.IP{net.ParseIP(NodeIP)}, n.Name)
	if err != nil {
		return err
	}
	if err := serving.WriteFiles(pki, "kubelet.crt", "kubelet.key"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pki, "ca.crt"), ca.PEM, 0o600); err != nil {
		return fmt.Errorf("writing CA: %w", err)
	}
	client, err := ca.ClientPair("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "kubelet", "kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, n.Config().Host, ca.PEM, client); err != nil {
		return err
	}
	resolv := filepath.Join(n.Dir, "resolv.conf") // no cluster DNS: pods get no resolver
	if err := os.WriteFile(resolv, nil, 0o600); err != nil {
		return fmt.Errorf("writing resolv.conf: %w", err)
	}
	sock := "unix://" + n.containerdSock
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// 1.35+ refuses cgroup v1 unless told.
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/" + cgroupRoot,
		"cgroupsPerQOS":            true,
		"enforceNodeAllocatable":   []string{"pods"},
		"containerRuntimeEndpoint": sock,
		"imageServiceEndpoint":     sock,
		"address":                  NodeIP,
		"port":                     10250,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"tlsCertFile":              filepath.Join(pki, "kubelet.crt"),
		"tlsPrivateKeyFile":        filepath.Join(pki, "kubelet.key"),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": filepath.Join(pki, "ca.crt")},
		},
		"authorization":   map[string]any{"mode": "Webhook"},
		"podLogsDir":      filepath.Join(n.Dir, "pod-logs"),
		"volumePluginDir": filepath.Join(n.Dir, "kubelet", "volume-plugins"),
		"resolvConf":      resolv,
		// The kubelet then sets vm.overcommit_memory, kernel.panic... (in shadow files bound
		// over /proc/sys in the node's mount namespace) instead of refusing to start.
		"protectKernelDefaults": false,
		"failSwapOn":            false,
		"serializeImagePulls":   false,
		// A busy CI disk must not evict the tests' pods nor collect their images.
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeStatusUpdateFrequency":   "4s",
		"syncFrequency":               "10s",
		"fileCheckFrequency":          "10s",
	}
	config := filepath.Join(n.Dir, "kubelet", "config.yaml")
	if err := writeYAML(config, cfg); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(n.k8sBin, "kubelet"),
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet", "root"),
		"--cert-dir="+filepath.Join(n.Dir, "kubelet", "pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+NodeIP,
		"--v=1",
	)
	cmd.Env = n.env()
	n.kubelet, err = testenv.StartProcess("kubelet", cmd, n.log("kubelet"))
	return err
}

// startKubeProxy runs kube-proxy in nftables mode under its usual identity (system:kube-proxy,
// bound to system:node-proxier), so pods reach the API server through the kubernetes Service.
// It leaves the kernel-wide conntrack settings alone.
func (n *Node) startKubeProxy(ca *testenv.CA) error {
	client, err := ca.ClientPair("system:kube-proxy")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "kube-proxy.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, n.Config().Host, ca.PEM, client); err != nil {
		return err
	}
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   n.Name,
		"mode":               "nftables",
		"clusterCIDR":        PodCIDR,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		// Lowering it needs CAP_SYS_RESOURCE.
		"oomScoreAdj": 0,
		// 0: leave nf_conntrack_max (kernel-wide) and the timeouts as they are.
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	}
	config := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := writeYAML(config, cfg); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(n.k8sBin, "kube-proxy"), "--config="+config, "--v=1")
	cmd.Env = n.env()
	n.proxy, err = testenv.StartProcess("kube-proxy", cmd, n.log("kube-proxy"))
	return err
}

// writeRegistryHosts tells containerd to reach host (host:port) over plain HTTP.
func (n *Node) writeRegistryHosts(host string) error {
	dir := filepath.Join(n.certsDir, host)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("writing hosts.toml: %w", err)
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o600); err != nil {
		return fmt.Errorf("writing hosts.toml: %w", err)
	}
	return nil
}

// writeRegistryCA tells containerd to reach host (host:port) over HTTPS, verifying its
// certificate with caPEM only.
func (n *Node) writeRegistryCA(host string, caPEM []byte) error {
	dir := filepath.Join(n.certsDir, host)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("writing hosts.toml: %w", err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s's CA: %w", host, err)
	}
	toml := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", "https://"+host, "https://"+host, ca)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o600); err != nil {
		return fmt.Errorf("writing hosts.toml: %w", err)
	}
	return nil
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}
