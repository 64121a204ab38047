#!/bin/sh
# A trivial peer for the syncer benchmark's -peer-cmd: the "kubectl in a loop" replication many
# clusters run today. Every PERIOD seconds (first argument, default 30) it copies the
# dockerconfigjson of $BENCH_SOURCE_SECRET (namespace/name) into a Secret $PEER_SECRET of every
# namespace matching $BENCH_NAMESPACE_SELECTOR, with one `kubectl apply --server-side` of all
# of them. The bench sets those variables, KUBECONFIG and KUBECTL (see hack/bench/syncer/peer.go):
#
#   go run ./hack/bench/syncer -peer-cmd 'hack/bench/syncer/peer-kubectl.sh 30' -peer-secret peer-pull
set -eu
period=${1:-30}
kubectl=${KUBECTL:-kubectl}
src_ns=${BENCH_SOURCE_SECRET%%/*}
src=${BENCH_SOURCE_SECRET#*/}
while :; do
	data=$("$kubectl" -n "$src_ns" get secret "$src" -o 'jsonpath={.data.\.dockerconfigjson}')
	"$kubectl" get namespaces -l "$BENCH_NAMESPACE_SELECTOR" -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' |
		awk -v name="$PEER_SECRET" -v data="$data" 'NF {
			printf "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: %s\n", name, $1, data
		}' |
		"$kubectl" apply --server-side --field-manager=peer-kubectl -f - >/dev/null
	echo "$(date -u +%H:%M:%S) applied $PEER_SECRET"
	sleep "$period"
done
