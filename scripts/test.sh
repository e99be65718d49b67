#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, formatting, lints
# (Rust; shell scripts with shellcheck; the Dockerfile with hadolint where
# installed; the Python helpers compiled), unit tests, CLI tests, the
# network-namespace end-to-end tests (tests/netns) and a smoke run of the
# benches. Run as root for the end-to-end tests: not root,
# they are skipped, and the closing line says how many. With CI=true a
# skip is a failure (the harness panics instead of skipping, and this
# script refuses any skip it counts).
#
# The closing line, parsed by CI, is exactly
#   tests: N passed, N failed, N skipped
# where skips are the harness's `SKIPPED: <test> <reason>` lines (its one
# skip marker) and are not counted as passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ci=${CI:-}
# Wall time of each phase, printed before the closing line.
phases=()
lap_start=$SECONDS
lap() {
    phases+=("$1 $((SECONDS - lap_start))s")
    lap_start=$SECONDS
}
if [[ $(id -u) -eq 0 ]]; then
    scripts/install-deps.sh
else
    echo "test.sh: not root: the end-to-end tests will be SKIPPED" >&2
fi
lap packages

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
lap fmt+clippy

# Shell scripts and the Dockerfile: shellcheck is a Debian package
# (install-deps.sh); hadolint is not, so it runs only where installed.
if command -v shellcheck >/dev/null; then
    shellcheck .ci/run scripts/*.sh benches/*.sh docker/*.sh fuzz/*.sh
elif [[ $ci == true ]]; then
    echo "test.sh: shellcheck is missing (scripts/install-deps.sh installs it)" >&2
    exit 1
else
    echo "test.sh: shellcheck not installed: shell scripts not checked" >&2
fi
if command -v hadolint >/dev/null; then
    hadolint docker/Dockerfile
else
    echo "test.sh: hadolint not installed (not packaged in Debian): docker/Dockerfile not checked" >&2
fi

# The Python helpers of the benches and the fuzz seeds compile (byte code
# to a temporary directory: no __pycache__ left in the tree).
pycache=$(mktemp -d)
results=$(mktemp)
fuzz_build_log=$(mktemp)
fuzz_build=
trap 'rm -rf "$results" "$pycache" "$fuzz_build_log"; [[ -z $fuzz_build ]] || kill -- "-$fuzz_build" 2>/dev/null || true' EXIT
PYTHONPYCACHEPREFIX=$pycache python3 -m py_compile benches/*.py fuzz/*.py
lap scripts

fuzz=false
if [[ $ci == true || ${FUZZ_SMOKE:-} == 1 ]]; then
    fuzz=true
fi
# The fuzz targets' instrumented build (its own target directory, ~6 min
# of both cores when cold) runs beside the tests at the lowest priority:
# the end-to-end tests mostly wait on the network, and take the CPU first
# when they need it. Its output is shown when the fuzz smoke starts.
if [[ $fuzz == true ]]; then
    # Its own session (setsid), so that an early exit stops cargo too. A
    # new session is a new scheduler autogroup, among which the CPU is
    # shared equally whatever the nice values inside: the autogroup's
    # own nice value is set too (measured: without it the build took
    # half the CPU from the tests' build).
    setsid -w sh -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 scripts/fuzz-smoke.sh --build-only' \
        >"$fuzz_build_log" 2>&1 &
    fuzz_build=$!
fi

# The end-to-end tests spend most of their time waiting (polling a
# condition with a deadline), so one more test thread than CPUs: on 2
# cores 3 threads ran the netns binary in 589 s instead of 838.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-$(($(nproc) + 1))}

# Every crate of the workspace in one feature resolution: the tests, the
# benches and the scale smoke below share one build of each dependency (a
# `cargo build` of a single binary resolves features without the
# dev-dependencies and would build some 40 crates again).
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$results" || status=$?
lap tests
# The benches build, link and run once each (criterion's test mode; the
# benches' own smoke sizes), in the test profile the suite already built
# (`cargo bench --no-run` would build every dependency again, optimized).
# A failing bench fails the run; they print no `test result:` line.
cargo test --workspace --locked --no-fail-fast --bench '*' 2>&1 | tee -a "$results" || status=$?
lap benches
# The cluster-scale simulation at a tiny size (seconds; root: it runs in
# network namespaces), so that it never rots: its summary line is checked.
# It runs the executables the tests above built (tollgate for the netns
# tests, tollgate-scale for its own CLI test).
if [[ $(id -u) -eq 0 ]]; then
    scale=$(benches/scale.sh --nodes 20 --pods 600 --churn-seconds 5 --bin-dir "${CARGO_TARGET_DIR:-target}/debug" | tail -n 1) || status=1
    echo "$scale"
    [[ $scale =~ ^scale\ nodes=20\ pods=600\ agent_rss_mib=[0-9.]+\ agent_rss_local_mib=[0-9.]+\ p99_apply_ms=[0-9]+\ cluster_apply_ms=[0-9]+\ cpu_per_change_ms=[0-9.]+\ idle_status_events_per_agent=[0-9.]+$ ]] || {
        echo "test.sh: benches/scale.sh smoke: unexpected summary '$scale'" >&2
        status=1
    }
    lap scale-smoke
fi

# Fuzz smoke (docs/dev/fuzz.md): in CI, or on request. Its build started
# beside the tests; what is left is its runs (about 2 minutes on 2 cores).
if [[ $fuzz == true ]]; then
    build_status=0
    wait "$fuzz_build" || build_status=$?
    fuzz_build=
    cat "$fuzz_build_log" >&2
    if ((build_status != 0)); then
        echo "test.sh: the fuzz targets' build failed (exit $build_status)" >&2
        status=1
    else
        lap fuzz-build-wait
        scripts/fuzz-smoke.sh || status=1
    fi
    lap fuzz-smoke
fi

# One closing line for the whole suite (cargo prints one per test binary,
# the last being the doc tests'). A skipped test returns normally, so
# cargo counts it as passed: it is taken out of the passed count here.
# (awk alone: a grep that matches nothing would end the script under
# set -e and pipefail before the closing line.)
count() {
    awk -v what="$1;" '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) == what) s += $i }
        END { print s + 0 }' "$results"
}
skipped=$(awk '{ n += gsub(/SKIPPED: [A-Za-z0-9_]+/, "") } END { print n + 0 }' "$results")
passed=$(($(count passed) - skipped))
failed=$(count failed)
if ((skipped > 0)); then
    {
        echo
        echo "!!! $skipped tests SKIPPED: they did not run (see the SKIPPED: lines above) !!!"
        echo
    } >&2
    if [[ $ci == true ]]; then
        echo "test.sh: skipped tests are failures under CI=true" >&2
        status=1
    fi
fi
echo "test.sh: wall time by phase: ${phases[*]} (total ${SECONDS}s)"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$status"
