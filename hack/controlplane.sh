#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl, kube-scheduler, kubelet, kube-proxy and etcd at
# the versions pinned in hack/versions.env, from Go modules, into a cache outside the repository
# keyed by version (the node's other binaries come from hack/node.sh):
#   ${KUIK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kuik}/k8s-<version>/
#   ${KUIK_CACHE_DIR:-...}/etcd-<version>/
# Binaries already there are reused; each one is built into a temporary file and renamed, so an
# interrupted build never leaves a broken binary behind.
#
#   hack/controlplane.sh          build what is missing, then print the assets directory
#   hack/controlplane.sh dir      print the assets directory without building
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "$root/hack/versions.env"

cache=${KUIK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kuik}
k8s_dir=$cache/k8s-$KUBERNETES_VERSION
etcd_dir=$cache/etcd-$ETCD_VERSION
assets=$cache/assets/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION

if [[ ${1:-} == dir ]]; then
	echo "$assets"
	exit 0
fi

log() { echo "controlplane: $*" >&2; }

# A throwaway module per build, outside the repository.
work=$(mktemp -d "${TMPDIR:-/tmp}/kuik-controlplane.XXXXXX")
trap 'rm -rf "$work"' EXIT

build_kubernetes() {
	local want=(kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy) missing=() b
	for b in "${want[@]}"; do [[ -x $k8s_dir/$b ]] || missing+=("$b"); done
	if ((${#missing[@]} == 0)); then
		log "kubernetes $KUBERNETES_VERSION: cached in $k8s_dir"
		return
	fi
	log "kubernetes $KUBERNETES_VERSION: building ${missing[*]} (cold: about 16 minutes)"
	local mod=$work/k8s staging_version=v0${KUBERNETES_VERSION#v1}
	mkdir -p "$mod"
	(
		cd "$mod"
		go mod init kuik.local/controlplane-tools >/dev/null 2>&1
		# k8s.io/kubernetes points its staging modules at ./staging; replace each with its
		# published twin. The list comes from kubernetes' own go.mod.
		local gomod
		gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
		{
			echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
			echo "replace ("
			sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\1#p' "$gomod" |
				grep -v -e '^k8s.io/sample-cli-plugin$' -e '^k8s.io/sample-controller$' |
				sort -u | while read -r m; do echo "	$m => $m $staging_version"; done
			echo ")"
		} >>go.mod
		{
			echo "//go:build tools"
			echo "package tools"
			echo "import ("
			for b in "${want[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
			echo ")"
		} >tools.go
		go mod tidy >/dev/null
		local minor=${KUBERNETES_VERSION#v1.}
		minor=${minor%%.*}
		local ld="-s -w"
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
		done
		mkdir -p "$k8s_dir" out
		local pkgs=()
		for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
		go build -trimpath -ldflags "$ld" -o out/ "${pkgs[@]}"
		for b in "${missing[@]}"; do
			cp out/"$b" "$k8s_dir/.$b.tmp"
			mv -f "$k8s_dir/.$b.tmp" "$k8s_dir/$b"
		done
	)
}

build_etcd() {
	if [[ -x $etcd_dir/etcd ]]; then
		log "etcd $ETCD_VERSION: cached in $etcd_dir"
		return
	fi
	log "etcd $ETCD_VERSION: building"
	local mod=$work/etcd
	mkdir -p "$mod" "$etcd_dir"
	(
		cd "$mod"
		go mod init kuik.local/etcd-tools >/dev/null 2>&1
		go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1
		go build -trimpath -ldflags "-s -w" -o "$etcd_dir/.etcd.tmp" go.etcd.io/etcd/server/v3
		mv -f "$etcd_dir/.etcd.tmp" "$etcd_dir/etcd"
	)
}

build_etcd
build_kubernetes

mkdir -p "$assets"
for b in kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy; do ln -sfn "$k8s_dir/$b" "$assets/$b"; done
ln -sfn "$etcd_dir/etcd" "$assets/etcd"
echo "$assets"
