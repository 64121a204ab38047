// Package testnode runs a real single-node Kubernetes cluster for tests: etcd, kube-apiserver,
// kube-controller-manager (every controller, each under its own service account),
// kube-scheduler, containerd with Debian's runc, the kubelet and kube-proxy (nftables mode).
// Pods really pull their images (from registries the tests start, with basic authentication),
// really run, and reach the API server through the kubernetes Service.
//
// # Isolation and cleanup
//
// testnode.Run, called from TestMain, starts the test binary again as PID 1 of new PID, mount
// and network namespaces, and runs the tests there:
//
//   - Network: the namespace has lo and a veth pair kept inside it carrying NodeIP; pods sit on a
//     bridge of that namespace (PodCIDR, no masquerade) with routes to the node and the Services
//     only. Nothing connects it to the host's interfaces: there is no route out.
//   - Processes: when the tests end, however they end, PID 1 exits and the kernel kills
//     everything left in the namespace (containerd's shims and the containers included).
//   - Mounts: the namespace's mounts are private and go with it (rootfs overlays, secret
//     volumes, the kubelet's bind mounts, pods' network namespaces).
//   - Files the daemons write outside their configured directories (/run/containerd/s,
//     /var/lib/cni, /var/lib/kubelet/device-plugins, /var/log/containers, /run/mount...) land on
//     a private /run and on overlays of /var/lib and /var/log whose upper layers are in the
//     run's directory.
//   - The kernel-wide sysctls the kubelet sets (vm.overcommit_memory, kernel.panic,
//     kernel.panic_on_oops...) are shadowed: files of the run are bound over them in /proc/sys,
//     so the host's values never change. They are recorded and checked (restored if changed).
//   - cgroups: the kubelet's cgroupRoot (one per run) is created by the host process in every
//     hierarchy, and removed depth-first after the run.
//
// The host process records all of it in <tmp>/kuik-testnode/run-*/state.json and holds a lock
// on the run while it lives. If it is killed (SIGKILL, go test's timeout), the namespaces die
// with it (PR_SET_PDEATHSIG on PID 1), and the next run, finding the lock free, removes the
// cgroups, checks the sysctls and deletes the run directory. After every run it checks that no
// process, mount, cgroup, sysctl change or host file of the run is left, and fails otherwise.
//
// # Requirements
//
// Linux, root, runc and nft (apt), the binaries of hack/controlplane.sh (with kubelet,
// kube-scheduler and kube-proxy) and of hack/node.sh (containerd, its shim, ctr, CNI plugins):
// `make node`. The host process downloads every module of kuik's go.mod before it enters the
// namespaces, where go runs with GOPROXY=off: builds in there (kuik's images, plugin binaries)
// never need the network, even on a machine whose module cache was empty. Tests skip with the
// reason when one is missing, or fail when KUIK_NODE_REQUIRED=1
// (CI). KUIK_TESTNODE_KEEP=1 keeps the run directory (configuration and logs/) for inspection.
//
// # Images
//
// Nothing is pulled from outside. The sandbox image and the tests' images hold one static
// program, ./guest, built at the start of the run: GuestImage, Node.PushGuest.
package testnode
