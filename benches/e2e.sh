#!/usr/bin/env bash
# End-to-end benchmark of tollgate on a namespace lab (root; not run in CI).
#
#   benches/e2e.sh [seconds-per-measurement]     (default 10)
#
# Topology (10.98.0.0/16, nothing in the root namespace):
#   tgb-client 10.98.1.2 ── 10.98.1.1 [tgb-node, forwards] 10.98.2.1 ── 10.98.2.2 tgb-server
# The server is Pod backend/web (app=web); the client is Pod frontend/client.
#
# Measured for every configuration, client -> server through the node:
#   conn/s   new TCP connections per second, each carrying one HTTP request
#            and one response then closed (wrk, 'Connection: close', 16
#            connections in flight, against nginx returning a 2-byte body)
#   Gbit/s   bulk throughput of one TCP stream (iperf3, 1 stream)
# Configurations:
#   none           no firewall at all (the reference; ratios are to this)
#   tollgate-N     tollgate with one ClusterNetworkPolicy of N ingress rules
#                  applied to app=web (Drop from N distinct /32s that never
#                  match, so each new connection is classified past all N)
#   iptables-N     the same N rules as plain iptables rules in FORWARD,
#                  after an ESTABLISHED,RELATED accept (the usual shape)
# N in 10, 100, 1000, 10000.
#
# Tools: wrk, iperf3, nginx (nginx-light), iptables; installed with apt-get
# when missing. tollgate: $TOLLGATE, else target/release/tollgate (built
# with 'cargo build --release' if absent).
#
# A/B mode, to compare two builds of tollgate in one run:
#   TOLLGATE_BASE=/path/to/old/tollgate [ROUNDS=5] [RULES=1000] benches/e2e.sh [seconds]
# measures conn/s of none, base and new (this tree's or $TOLLGATE) in
# ROUNDS interleaved rounds (none, base, new, none, base, new, ...) with
# RULES rules, and prints every round and the medians, each as a ratio to
# the median of none.
set -euo pipefail

DURATION=${1:-10}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE=tgb-node CLIENT=tgb-client SERVER=tgb-server
SERVER_IP=10.98.2.2
RULE_COUNTS=(10 100 1000 10000)

die() { echo "e2e.sh: $*" >&2; exit 1; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

[[ $(id -u) -eq 0 ]] || die "must run as root"

ensure_tools() {
    local need=()
    command -v wrk >/dev/null || need+=(wrk)
    command -v iperf3 >/dev/null || need+=(iperf3)
    command -v nginx >/dev/null || need+=(nginx-light)
    command -v iptables >/dev/null || need+=(iptables)
    command -v ipset >/dev/null || need+=(ipset)
    if ((${#need[@]})); then
        echo "installing: ${need[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
}

tollgate_bin() {
    if [[ -n ${TOLLGATE:-} ]]; then echo "$TOLLGATE"; return; fi
    if [[ ! -x $ROOT/target/release/tollgate ]]; then
        echo "building tollgate (release)..." >&2
        (cd "$ROOT" && cargo build --release --bin tollgate >&2)
    fi
    echo "$ROOT/target/release/tollgate"
}

for ns in $NODE $CLIENT $SERVER; do
    [[ -e /run/netns/$ns ]] && die "namespace $ns exists: is another run going? (ip netns delete $ns)"
done

AGENT_PID=
cleanup() {
    if [[ -n $AGENT_PID ]]; then kill -TERM "$AGENT_PID" 2>/dev/null || true; fi
    local ns pid
    for ns in $NODE $CLIENT $SERVER; do
        if [[ -e /run/netns/$ns ]]; then
            for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$ns"
        fi
    done
    [[ -n ${WORK:-} ]] && rm -rf "$WORK"
    return 0
}
trap cleanup EXIT
WORK=$(mktemp -d /tmp/tollgate-bench.XXXXXX)

build_lab() {
    ip netns add $NODE
    nsx $NODE ip link set lo up
    nsx $NODE sysctl -qw net.ipv4.ip_forward=1
    local k ns
    for k in 1 2; do
        if ((k == 1)); then ns=$CLIENT; else ns=$SERVER; fi
        ip netns add $ns
        nsx $ns ip link set lo up
        nsx $NODE ip link add "n$k" type veth peer name eth0 netns $ns
        nsx $NODE ip addr add "10.98.$k.1/24" dev "n$k"
        nsx $NODE ip link set "n$k" up
        nsx $ns ip addr add "10.98.$k.2/24" dev eth0
        nsx $ns ip link set eth0 up
        nsx $ns ip route add default via "10.98.$k.1"
        # many short connections: let the client reuse TIME_WAIT ports
        nsx $ns sysctl -qw net.ipv4.tcp_tw_reuse=1
        nsx $ns sysctl -qw net.ipv4.ip_local_port_range="1024 65000"
    done

    mkdir -p "$WORK/nginx"
    cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx;
    proxy_temp_path $WORK/nginx;
    fastcgi_temp_path $WORK/nginx;
    uwsgi_temp_path $WORK/nginx;
    scgi_temp_path $WORK/nginx;
    server { listen 80 backlog=4096; location / { return 200 "ok"; } }
}
EOF
    nsx $SERVER nginx -c "$WORK/nginx/nginx.conf" -g 'daemon on;'
    nsx $SERVER iperf3 -s -D --logfile "$WORK/iperf3.log"
    local i
    for i in $(seq 1 100); do
        nsx $SERVER ss -Hltn 'sport = :80' | grep -q . &&
            nsx $SERVER ss -Hltn 'sport = :5201' | grep -q . && return 0
        sleep 0.05
    done
    die "servers did not start"
}

write_policies() {
    local n=$1 dir=$2 i
    mkdir -p "$dir"
    cat >"$dir/inventory.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: backend, labels: {env: prod}}
---
apiVersion: v1
kind: Namespace
metadata: {name: frontend, labels: {env: prod}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: backend, labels: {app: web}}
spec: {nodeName: bench-node}
status: {podIP: $SERVER_IP}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: frontend, labels: {app: client}}
spec: {nodeName: bench-node}
status: {podIP: 10.98.1.2}
EOF
    {
        cat <<EOF
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-$n}
spec:
  priority: 5
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
EOF
        for ((i = 0; i < n; i++)); do
            printf '    - {name: r%d, action: Drop, from: [{ipBlock: {cidr: 172.16.%d.%d/32}}], ports: [{protocol: TCP, port: 80}]}\n' \
                "$i" $((i / 250)) $((i % 250 + 1))
        done
    } >"$dir/bench.yaml"
}

start_tollgate() {
    local dir=$1 log=$2 i
    # `ip netns exec` directly (not the nsx function), so `$!` is tollgate
    ip netns exec $NODE "$BIN" run --policies "$dir" --node-name bench-node \
        --node-labels kubernetes.io/os=linux --node-address 10.98.1.1 \
        --node-address 10.98.2.1 2>"$log" &
    AGENT_PID=$!
    for i in $(seq 1 600); do
        grep -qs "ruleset applied generation=1" "$log" && return 0
        kill -0 "$AGENT_PID" 2>/dev/null || { cat "$log" >&2; die "tollgate exited"; }
        sleep 0.1
    done
    die "tollgate did not apply its ruleset within 60 s"
}

stop_tollgate() {
    local i
    kill -TERM "$AGENT_PID"
    for i in $(seq 1 300); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=
    # The rules outlive the agent; an older base binary without `cleanup`
    # removed them itself.
    ip netns exec $NODE "$BIN" cleanup >/dev/null 2>&1 || true
}

load_iptables() {
    local n=$1 i
    {
        echo "*filter"
        echo "-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
        for ((i = 0; i < n; i++)); do
            echo "-A FORWARD -s 172.16.$((i / 250)).$((i % 250 + 1))/32 -d $SERVER_IP/32 -p tcp --dport 80 -j DROP"
        done
        echo "COMMIT"
    } | nsx $NODE iptables-restore -w
}

flush_iptables() { nsx $NODE iptables -w -F FORWARD; }

measure() {
    local conns gbits
    conns=$(measure_conns)
    gbits=$(nsx $CLIENT iperf3 -c $SERVER_IP -t "$DURATION" -J |
        python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
    echo "$conns $gbits"
}

# Interleaved rounds of none / base / new at one rule count (A/B mode).
compare_builds() {
    local rounds=${ROUNDS:-5} n=${RULES:-1000} r c
    local -a none base new
    write_policies "$n" "$WORK/policies-ab"
    measure_with() {
        BIN=$1
        start_tollgate "$WORK/policies-ab" "$WORK/tollgate-ab.log"
        measure_conns
        stop_tollgate
    }
    for ((r = 1; r <= rounds; r++)); do
        none+=("$(measure_conns)")
        base+=("$(measure_with "$TOLLGATE_BASE")")
        new+=("$(measure_with "$NEW_BIN")")
        echo "round $r: none ${none[-1]} base ${base[-1]} new ${new[-1]} conn/s" >&2
    done
    python3 - "$n" "$DURATION" "${none[*]}" "${base[*]}" "${new[*]}" <<'PY'
import statistics, sys
n, duration = sys.argv[1], sys.argv[2]
rows = {k: [float(x) for x in v.split()] for k, v in zip(("none", "base", "new"), sys.argv[3:])}
ref = statistics.median(rows["none"])
print(f"\n{n} rules, {len(rows['none'])} interleaved rounds of {duration}s, conn/s (ratio to the median of none)")
for k, v in rows.items():
    m = statistics.median(v)
    print(f"{k:5} median {m:9.0f} ({m / ref:.3f})   rounds: " + " ".join(f"{x:.0f}" for x in v))
print(f"new/base, median of the per-round ratios: {statistics.median(b / a for a, b in zip(rows['base'], rows['new'])):.3f}")
PY
}

measure_conns() {
    nsx $CLIENT wrk -t1 -c16 -d"${DURATION}s" -H 'Connection: close' "http://$SERVER_IP/" |
        awk '/^Requests\/sec:/ {print $2}'
}

ensure_tools
BIN=$(tollgate_bin)
build_lab

if [[ -n ${TOLLGATE_BASE:-} ]]; then
    [[ -x $TOLLGATE_BASE ]] || die "TOLLGATE_BASE=$TOLLGATE_BASE is not an executable"
    NEW_BIN=$BIN
    compare_builds
    exit 0
fi

declare -A CONNS GBITS
ORDER=(none)
read -r "CONNS[none]" "GBITS[none]" < <(measure)
for n in "${RULE_COUNTS[@]}"; do
    write_policies "$n" "$WORK/policies-$n"
    start_tollgate "$WORK/policies-$n" "$WORK/tollgate-$n.log"
    read -r "CONNS[tollgate-$n]" "GBITS[tollgate-$n]" < <(measure)
    stop_tollgate
    ORDER+=("tollgate-$n")
done
for n in "${RULE_COUNTS[@]}"; do
    load_iptables "$n"
    read -r "CONNS[iptables-$n]" "GBITS[iptables-$n]" < <(measure)
    flush_iptables
    ORDER+=("iptables-$n")
done

printf '\n%-14s %12s %8s %10s %8s\n' configuration "conn/s" ratio "Gbit/s" ratio
for c in "${ORDER[@]}"; do
    printf '%-14s %12.0f %8.2f %10.2f %8.2f\n' "$c" "${CONNS[$c]}" \
        "$(python3 -c "print(${CONNS[$c]}/${CONNS[none]})")" "${GBITS[$c]}" \
        "$(python3 -c "print(${GBITS[$c]}/${GBITS[none]})")"
done
echo "(${DURATION}s per measurement; kernel $(uname -r); $(nproc) CPUs)"
