#!/usr/bin/env bash
# Builds what a real node needs besides the Kubernetes binaries of hack/controlplane.sh:
# containerd, ctr and containerd-shim-runc-v2, and the CNI plugins, from their Go modules at
# the versions pinned in hack/versions.env, into a cache outside the repository keyed by version:
#   ${KUIK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kuik}/containerd-<version>/
#   ${KUIK_CACHE_DIR:-...}/cni-plugins-<version>/
# and gathers them (symlinks) in one node assets directory, which internal/testnode reads.
# runc (the OCI runtime) and nftables (for kube-proxy) come from apt: as root, with apt-get,
# they are installed when missing.
# Binaries already there are reused; each one is built into a temporary file and renamed, so an
# interrupted build never leaves a broken binary behind.
#
#   hack/node.sh          build what is missing, install runc and nft, print the assets directory
#   hack/node.sh dir      print the assets directory without building
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "$root/hack/versions.env"

cache=${KUIK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kuik}
containerd_dir=$cache/containerd-$CONTAINERD_VERSION
cni_dir=$cache/cni-plugins-$CNI_PLUGINS_VERSION
assets=$cache/assets/node-containerd-$CONTAINERD_VERSION-cni-$CNI_PLUGINS_VERSION

if [[ ${1:-} == dir ]]; then
	echo "$assets"
	exit 0
fi

log() { echo "node: $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kuik-node.XXXXXX")
trap 'rm -rf "$work"' EXIT

# tools_module DIR MODULE@VERSION PACKAGE...: a throwaway module requiring MODULE whose
# tools.go imports PACKAGE..., so `go mod tidy` resolves exactly what they need.
tools_module() {
	local dir=$1 mod=$2 p
	shift 2
	mkdir -p "$dir"
	cd "$dir"
	go mod init kuik.local/node-tools >/dev/null 2>&1
	go get "$mod" >/dev/null 2>&1
	{
		echo "//go:build tools"
		echo "package tools"
		echo "import ("
		for p; do echo "	_ \"$p\""; done
		echo ")"
	} >tools.go
	go mod tidy >/dev/null 2>&1
}

# install_into DIR BIN...: move freshly built out/BIN into DIR atomically.
install_into() {
	local dir=$1 b
	shift
	mkdir -p "$dir"
	for b; do
		cp "out/$b" "$dir/.$b.tmp"
		mv -f "$dir/.$b.tmp" "$dir/$b"
	done
}

# containerd 2.x is pure Go with CGO_ENABLED=0 (only the btrfs snapshotter needs cgo), with the
# tags its Makefile uses for static builds; the shim is built without gRPC, as upstream does.
build_containerd() {
	local bins=(containerd ctr containerd-shim-runc-v2) missing=() b
	for b in "${bins[@]}"; do [[ -x $containerd_dir/$b ]] || missing+=("$b"); done
	if ((${#missing[@]} == 0)); then
		log "containerd $CONTAINERD_VERSION: cached in $containerd_dir"
		return
	fi
	log "containerd $CONTAINERD_VERSION: building ${missing[*]}"
	local m=github.com/containerd/containerd/v2
	(
		tools_module "$work/containerd" "$m@$CONTAINERD_VERSION" "$m/cmd/containerd" "$m/cmd/ctr" "$m/cmd/containerd-shim-runc-v2"
		local ld="-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Package=$m"
		mkdir -p out
		CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs" \
			-ldflags "$ld" -o out/ "$m/cmd/containerd" "$m/cmd/ctr"
		CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_grpc" \
			-ldflags "$ld" -o out/ "$m/cmd/containerd-shim-runc-v2"
		install_into "$containerd_dir" "${bins[@]}"
	)
}

# Pods get loopback plus a bridge with host-local addresses (the kernel here has no dummy links;
# a loopback-only network is refused by containerd, which wants an address on eth0).
build_cni() {
	local plugins=(main/loopback main/bridge ipam/host-local) missing=() p pkgs=()
	for p in "${plugins[@]}"; do [[ -x $cni_dir/${p#*/} ]] || missing+=("$p"); done
	if ((${#missing[@]} == 0)); then
		log "CNI plugins $CNI_PLUGINS_VERSION: cached in $cni_dir"
		return
	fi
	log "CNI plugins $CNI_PLUGINS_VERSION: building ${missing[*]}"
	local m=github.com/containernetworking/plugins
	for p in "${missing[@]}"; do pkgs+=("$m/plugins/$p"); done
	(
		tools_module "$work/cni" "$m@$CNI_PLUGINS_VERSION" "${pkgs[@]}"
		mkdir -p out
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o out/ "${pkgs[@]}"
		local names=()
		for p in "${missing[@]}"; do names+=("${p#*/}"); done
		install_into "$cni_dir" "${names[@]}"
	)
}

# From Debian: runc (containerd's shim runs it) and nft (kube-proxy's nftables mode).
install_apt() {
	local want=() pkg cmd
	for pkg in runc:runc nftables:nft; do
		cmd=${pkg#*:}
		command -v "$cmd" >/dev/null 2>&1 || [[ -x /usr/sbin/$cmd ]] || want+=("${pkg%%:*}")
	done
	((${#want[@]})) || return 0
	if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		log "missing ${want[*]}: install them (apt-get install -y ${want[*]}); the node tests skip without them"
		return 0
	fi
	log "installing ${want[*]} from apt"
	apt-get install -y --no-install-recommends "${want[@]}" >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${want[@]}" >/dev/null; }
}

build_containerd
build_cni
install_apt

mkdir -p "$assets"
for b in containerd ctr containerd-shim-runc-v2; do ln -sfn "$containerd_dir/$b" "$assets/$b"; done
ln -sfn "$cni_dir" "$assets/cni"
echo "$assets"
