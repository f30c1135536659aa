#!/usr/bin/env bash
# Runs every libFuzzer target in a fuzz build for a few seconds each.
#
# usage: scripts/run-fuzz.sh BUILD_DIR [SECONDS]
#
# A target is an executable named fuzz_* anywhere under BUILD_DIR. Seeds come from
# tests/fuzz/corpus/NAME when it exists; new inputs go to BUILD_DIR/corpus/NAME so the
# source tree stays clean. Crashes are written to BUILD_DIR/crashes/NAME/.
set -euo pipefail

build=${1:?usage: run-fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)

mapfile -t targets < <(find "$build" -type f -perm -u+x -name 'fuzz_*' \
	! -path '*/CMakeFiles/*' | sort)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "run-fuzz: no fuzz_* executables under $build: nothing to run"
	exit 0
fi

rc=0
for t in "${targets[@]}"; do
	name=$(basename "$t")
	work="$build/corpus/$name"
	crashes="$build/crashes/$name"
	mkdir -p "$work" "$crashes"
	seeds=()
	[[ -d "$root/tests/fuzz/corpus/$name" ]] && seeds=("$root/tests/fuzz/corpus/$name")
	echo "run-fuzz: $name for ${seconds}s"
	# The outer timeout is a backstop in case the target hangs outside libFuzzer's control.
	if ! timeout -k 10 $((seconds + 60)) "$t" -max_total_time="$seconds" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" \
		"$work" "${seeds[@]}" >"$build/corpus/$name.log" 2>&1; then
		echo "run-fuzz: $name FAILED; last lines of $build/corpus/$name.log:"
		tail -n 40 "$build/corpus/$name.log"
		rc=1
	else
		grep -E '^stat::number_of_executed_units|^Done ' "$build/corpus/$name.log" || true
	fi
done
exit $rc
