#!/usr/bin/env bash
# Fuzz smoke, as CI runs it (scripts/test.sh calls it when CI=true or
# FUZZ_SMOKE=1): installs cargo-fuzz if missing, builds every target under
# fuzz/ and runs each for FUZZ_SECONDS (default 30) from the committed
# seeds, FUZZ_JOBS targets at a time (default: one per CPU). Fails on any
# crash, assertion or leak; the input that failed is left in
# fuzz/artifacts/<target>/.
#
# `scripts/fuzz-smoke.sh --build-only` installs and builds, and runs
# nothing (scripts/test.sh builds ahead this way, beside the tests).
#
# The long runs of docs/dev/fuzz.md: FUZZ_RUNS=N runs each target for N
# executions instead of a time, FUZZ_SANITIZER=none builds without ASan
# (about 5x the executions per second), e.g.
#   FUZZ_RUNS=10000000 FUZZ_SANITIZER=none scripts/fuzz-smoke.sh
#
# Stable Rust only: cargo-fuzz passes -Zsanitizer=address, which stable
# rustc accepts with RUSTC_BOOTSTRAP=1 (the toolchain's own switch for
# unstable flags; nothing is downloaded). Targets are built optimized with
# debug assertions and overflow checks, as the long runs were
# (docs/dev/fuzz.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_only=false
case ${1:-} in
--build-only) build_only=true ;;
'') ;;
*)
    echo "fuzz-smoke.sh: unknown argument '$1' (only --build-only)" >&2
    exit 2
    ;;
esac
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_SANITIZER=${FUZZ_SANITIZER:-address}
if [[ -n ${FUZZ_RUNS:-} ]]; then
    limit=(-runs="$FUZZ_RUNS")
    what="$FUZZ_RUNS executions"
else
    limit=(-max_total_time="$FUZZ_SECONDS")
    what="${FUZZ_SECONDS}s"
fi
CARGO_FUZZ_VERSION=0.13.2
export RUSTC_BOOTSTRAP=1

if [[ $(cargo fuzz --version 2>/dev/null) != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# Longest input per target: a truncated packet copy, one DNS message, a
# few pipelined requests, one policy file, one L7 client segment, an L7
# connection's segments (or one segment), a few NFQUEUE netlink messages.
declare -A MAX_LEN=([packet_flow]=512 [dns_learn]=2048 [http_stream]=4096 [policy_compile]=8192 [l7_urgent]=1600 [l7_normalise]=2048 [nfqueue_msg]=4096)

cargo fuzz build -O --debug-assertions --sanitizer "$FUZZ_SANITIZER"
if [[ $build_only == true ]]; then
    exit 0
fi

# One libFuzzer process per target (each single-threaded), FUZZ_JOBS of
# them at a time (default: one per CPU), so each target still runs for its
# whole time or count; each job's exit status in $status_dir/<target>.
run_target() {
    local target=$1 max_len dict=() log
    max_len=${MAX_LEN[$target]:?"fuzz-smoke.sh: no max_len for target $target"}
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    # A target's dictionary, when it has one.
    if [[ -f fuzz/dicts/$target.dict ]]; then
        dict=(-dict="fuzz/dicts/$target.dict")
    fi
    echo "fuzz-smoke: $target for $what" >&2
    log="fuzz/artifacts/$target/smoke.log"
    cargo fuzz run -O --debug-assertions --sanitizer "$FUZZ_SANITIZER" "$target" \
        "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        "${limit[@]}" "${dict[@]}" -max_len="$max_len" -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$target/" >"$log" 2>&1
}
jobs=${FUZZ_JOBS:-$(nproc)}
status_dir=$(mktemp -d)
trap 'rm -rf "$status_dir"' EXIT
targets=$(cargo fuzz list)
for target in $targets; do
    while (($(jobs -rp | wc -l) >= jobs)); do
        wait -n || true
    done
    (
        rc=0
        run_target "$target" || rc=$?
        echo "$rc" >"$status_dir/$target"
    ) &
done
wait

failed=0
for target in $targets; do
    log="fuzz/artifacts/$target/smoke.log"
    if [[ $(cat "$status_dir/$target" 2>/dev/null) != 0 ]]; then
        tail -n 80 "$log" >&2
        echo "fuzz-smoke: $target failed; input and full log in fuzz/artifacts/$target/" >&2
        failed=1
        continue
    fi
    grep -E '^#[0-9]+\s+DONE|^stat::(number_of_executed_units|average_exec_per_sec)' "$log" >&2
done
((failed == 0)) || exit 1
echo "fuzz-smoke: all targets ran $what without a crash" >&2
