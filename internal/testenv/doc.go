// Package testenv runs a real Kubernetes control plane for tests: etcd and kube-apiserver, and
// kube-controller-manager (garbage collector and namespace controller) when a test needs
// ownerReference garbage collection or namespace deletion. Everything listens on 127.0.0.1 on
// free ports, so several test packages can run at once.
//
// The binaries come from hack/controlplane.sh, which builds them at the versions pinned in
// hack/versions.env into a cache outside the repository. KUIK_ASSETS overrides where they are.
//
// Children are started with PR_SET_PDEATHSIG from a thread that lives as long as the test
// process, so they die with it however it ends (panic, Ctrl-C, SIGKILL): no orphan etcd or
// kube-apiserver is ever left behind.
package testenv
