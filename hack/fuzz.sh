#!/usr/bin/env bash
# Runs every fuzz target of the module (each `func FuzzXxx` in a _test.go file), one after the
# other, for DURATION each (default 10m), with one fuzzing worker (-parallel=1) so that the rest
# of the machine stays usable, and prints one summary line per target:
#
#   hack/fuzz.sh [DURATION]
#
#   target=./internal/routing.FuzzNormalize fuzzed=10m0s wall=612s execs=123456 new_interesting=12 crashers=0 ok
#
# Each target's full output goes to ${FUZZ_LOG_DIR:-$(mktemp -d)}/<package>.<target>.log (the
# directory is printed first). A crasher is written by go test under the package's
# testdata/fuzz/<target>/ as a regression seed: commit it with the fix. New interesting inputs go
# to the Go build cache's fuzz corpus ($(go env GOCACHE)/fuzz), as go test does.
# FUZZ_TARGETS='./internal/routing.FuzzNormalize ...' restricts the run to those targets.
# The exit status is 1 when a target failed (a crasher or a build error).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
duration=${1:-10m}
logs=${FUZZ_LOG_DIR:-$(mktemp -d -t kuik-fuzz.XXXXXX)}
mkdir -p "$logs"
echo "fuzz: logs in $logs"

# package.target for each fuzz target, from the sources (sorted: stable order).
if [[ -n ${FUZZ_TARGETS:-} ]]; then
	read -r -a targets <<<"$FUZZ_TARGETS"
else
	mapfile -t targets < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . |
		grep -v '^./hack/tools/' |
		sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)$#\1.\2#' | sort -u)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz: no fuzz target found" >&2
	exit 1
fi

failed=0
for t in "${targets[@]}"; do
	pkg=${t%.*}
	name=${t##*.}
	log=$logs/$(echo "${pkg#./}" | tr / _).$name.log
	start=$(date +%s)
	status=ok
	rm -f "$log.first"
	fuzz() { go test -run '^$' -fuzz "^${name}\$" -fuzztime "$duration" -parallel=1 "$pkg" >"$log" 2>&1; }
	if ! fuzz; then
		# go's fuzzing engine can end a clean run with "context deadline exceeded" when the
		# time is up while a worker is busy (a loaded machine); no input failed. That, and only
		# that, is run once more; a failing input never is.
		if ! grep -q 'Failing input written to' "$log" && grep -q 'context deadline exceeded' "$log"; then
			cp "$log" "$log.first"
			echo "fuzz: $t: the engine ended with 'context deadline exceeded' and no failing input: running it once more" >&2
		fi
		if [[ ! -e $log.first ]] || ! fuzz; then
			status=FAILED
			failed=1
		fi
	fi
	end=$(date +%s)
	# The last progress line: "fuzz: elapsed: 10m0s, execs: 123 (12/sec), new interesting: 4 (total: 40)".
	last=$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1 || true)
	execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
	interesting=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
	elapsed=$(grep -E '^fuzz: elapsed: ' "$log" | tail -n 1 | sed -nE 's/^fuzz: elapsed: ([0-9hms.]+),.*/\1/p' || true)
	if [[ -z $last && $status == ok ]]; then
		# A DURATION shorter than gathering the baseline coverage of the corpus (the seeds and
		# the cache's interesting inputs, all run once): nothing mutated, the corpus passed.
		status="ok (baseline coverage only: DURATION too short to start mutating)"
	fi
	crashers=$(grep -c 'Failing input written to' "$log" || true)
	if [[ $status == FAILED && $crashers -eq 0 ]]; then
		status="FAILED (no crasher: see the log)"
	fi
	echo "target=$t fuzzed=${elapsed:-0s} wall=$((end - start))s execs=${execs:-0} new_interesting=${interesting:-0} crashers=$crashers $status"
	if [[ $status != ok ]]; then
		grep -E 'Failing input written to|panic:|--- FAIL' "$log" | head -n 5 | sed 's/^/  /' || true
	fi
done
exit "$failed"
