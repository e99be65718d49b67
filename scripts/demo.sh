#!/usr/bin/env bash
# One command to see tollgate work: installs the system packages, builds
# tollgate, builds the network-namespace lab with the policies in rules/,
# starts tollgate in the lab's node namespace and shows which probes the
# policies allow. The lab stays up afterwards; `scripts/lab.sh down` ends it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ $(id -u) -eq 0 ]] || { echo "demo.sh: run as root (it creates network namespaces)" >&2; exit 1; }
scripts/install-deps.sh
cargo build --release --locked
export TOLLGATE="$PWD/target/release/tollgate"

echo "== policies (evaluation order)"
"$TOLLGATE" get policies --policies rules/
scripts/lab.sh down >/dev/null 2>&1 || true
scripts/lab.sh up
echo "== probes"
scripts/lab.sh demo
echo
echo "The lab is still up: 'scripts/lab.sh status' shows it, 'scripts/lab.sh down' removes it."
