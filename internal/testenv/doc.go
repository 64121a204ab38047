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
//
// # Where things are
//
//	controlplane.go   Options, Start and Stop: etcd, kube-apiserver, and the controllers
//	clients.go        client configs (admin, impersonated) and kubeconfig files
//	process.go        child processes: spawned to die with the test, logged, awaited
//	detached.go       processes left running for the demo, and how they are stopped
//	certs.go          a throwaway CA and the certificates it signs
//	assets.go         where the binaries are, and the pinned versions
//	crds.go           kuik's CRDs, installed and established
//	apply.go          server-side apply of manifests
//	run.go            Run: one control plane for a test package's TestMain
package testenv
