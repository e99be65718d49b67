#!/usr/bin/env bash
# One command to see tollgate work: checks the Rust toolchain (and says how
# to get it), installs the few system packages the lab needs, builds
# tollgate (the `dist` profile: no debug info), builds the network-namespace
# lab with the policies in rules/, starts tollgate in the lab's node
# namespace with the audit log and metrics on, shows which probes the
# policies allow, then an audit-log line, a few metrics and the status
# summary. The lab stays up afterwards; `scripts/lab.sh down` ends it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ $(id -u) -eq 0 ]] || { echo "demo.sh: run as root (it creates network namespaces)" >&2; exit 1; }
scripts/install-deps.sh --demo
cargo build --profile dist --locked --bin tollgate
export TOLLGATE="$PWD/target/dist/tollgate"

echo "== policies (evaluation order)"
"$TOLLGATE" get policies --policies rules/
scripts/lab.sh down >/dev/null 2>&1 || true
scripts/lab.sh up
echo "== probes"
scripts/lab.sh demo
echo
scripts/lab.sh observe
echo
echo "The lab is still up: 'scripts/lab.sh status' shows it, 'scripts/lab.sh down' removes it."
