#!/usr/bin/env bash
# The cluster-scale simulation of issue 32 (root; the design and figures
# are in docs/design/scale.md, how to run in docs/dev/bench.md):
#
#   benches/scale.sh --nodes N --pods P [--churn-seconds S] [--debug | --bin-dir DIR]
#                    [--pod-changes PER_S] [--status-writes PER_S] [--node-reports PER_S]
#
# Builds the simulation (benches/scale/, crate tollgate-scale) and the
# tollgate binary in release (--debug: in the dev profile; --bin-dir: no
# build, the two executables already in DIR, as CI's smoke run uses those
# `cargo test --workspace` built), creates three network namespaces of its own (tgs-<pid>-sim,
# -wide, -local: loopback only, nothing in the root namespace), and runs
# the simulation in the first: the fake API server, the controller (its
# child, a daemon: never in the root namespace) and the simulated agents;
# the two real agents run in the other two, each reaching the server on a
# listener bound on its own loopback. Namespaces and processes are removed
# on exit, failure included. The last line is exactly
#   scale nodes=N pods=P agent_rss_mib=… agent_rss_local_mib=… p99_apply_ms=… cluster_apply_ms=… cpu_per_change_ms=… idle_status_events_per_agent=…
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "scale.sh: $*" >&2; exit 1; }

PROFILE=release
BIN=
ARGS=()
while (($#)); do
    case $1 in
    --debug) PROFILE=debug; shift ;;
    --bin-dir)
        (($# >= 2)) || die "--bin-dir needs a directory"
        BIN=$(cd "$2" && pwd) || die "--bin-dir: no directory '$2'"
        shift 2 ;;
    --nodes | --pods | --churn-seconds | --pod-changes | --status-writes | --node-reports)
        (($# >= 2)) || die "$1 needs a value"
        [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "$1: '$2' is not a number"
        ARGS+=("$1" "$2"); shift 2 ;;
    *) die "unknown argument '$1' (usage: benches/scale.sh --nodes N --pods P [--churn-seconds S] [--debug | --bin-dir DIR])" ;;
    esac
done
[[ " ${ARGS[*]} " == *" --nodes "* && " ${ARGS[*]} " == *" --pods "* ]] ||
    die "usage: benches/scale.sh --nodes N --pods P [--churn-seconds S] [--debug | --bin-dir DIR]"

[[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces)"
command -v cargo >/dev/null ||
    die "the Rust toolchain is missing (cargo not found): install it with rustup (https://rustup.rs), then run again"

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v ipset >/dev/null || need+=(ipset)
if ((${#need[@]})); then
    echo "installing: ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

cd "$ROOT"
if [[ -z $BIN ]]; then
    build=(cargo build --locked)
    [[ $PROFILE == release ]] && build+=(--release)
    "${build[@]}" -p tollgate --bin tollgate >&2
    "${build[@]}" -p tollgate-scale >&2
    BIN=$ROOT/target/$PROFILE
fi
for exe in tollgate tollgate-scale; do
    [[ -x $BIN/$exe ]] || die "no executable $BIN/$exe"
done

NS=(tgs-$$-sim tgs-$$-wide tgs-$$-local)
WORK=
cleanup() {
    local ns pid
    for ns in "${NS[@]}"; do
        if [[ -e /run/netns/$ns ]]; then
            for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$ns"
        fi
    done
    [[ -n $WORK ]] && rm -rf "$WORK"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ns in "${NS[@]}"; do
    [[ -e /run/netns/$ns ]] && die "namespace $ns exists"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
done
WORK=$(mktemp -d /tmp/tollgate-scale.XXXXXX)

ip netns exec "${NS[0]}" "$BIN/tollgate-scale" "${ARGS[@]}" \
    --tollgate "$BIN/tollgate" --work "$WORK" \
    --netns-wide "${NS[1]}" --netns-local "${NS[2]}"
