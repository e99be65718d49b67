#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, formatting, lints,
# unit tests, CLI tests and the network-namespace end-to-end tests.
# Run as root for the end-to-end tests; with CI=true they must run (the
# harness fails instead of skipping).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $(id -u) -eq 0 ]]; then
    scripts/install-deps.sh
else
    echo "test.sh: not root: end-to-end tests will be skipped" >&2
fi

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
results=$(mktemp)
trap 'rm -f "$results"' EXIT
cargo test --locked 2>&1 | tee "$results"

# Fuzz smoke (about 15 minutes on a fresh 2-core machine, most of it the
# cold build): in CI, or on request.
if [[ ${CI:-} == true || ${FUZZ_SMOKE:-} == 1 ]]; then
    scripts/fuzz-smoke.sh
fi

# One closing line for the whole suite (cargo prints one per test binary,
# the last being the doc tests').
count() { grep -E '^test result:' "$results" | grep -Eo "[0-9]+ $1" | awk '{s += $1} END {print s + 0}'; }
echo "tests: $(count passed) passed, $(count failed) failed"
