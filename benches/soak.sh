#!/usr/bin/env bash
# Soak test of `tollgate run` (root; not run in CI). Builds the release
# binary, makes a namespace lab of its own, and drives mixed traffic through
# the agent for DURATION while the policy flips every 3-6 s:
#   - new TCP connections, IPv4 and IPv6, to allowed, rejected and dropped
#     ports of a Pod behind the node (FORWARD) and of the node (INPUT);
#   - DNS lookups (TTL 2-5 s) followed by connections to the answers under an
#     FQDN egress rule, to addresses never handed out, and to answers whose
#     TTL has passed (must fail);
#   - HTTP keep-alive connections (2-7 requests each, allowed and denied
#     paths) to nginx under an l7Protocols rule.
# Every outcome is checked (benches/soak.py); wrong allows/denies are printed
# with time and details. Every 10 s the agent's RSS, fds, threads, L7 flows,
# FQDN mirror and kernel sets, conntrack entries, audit counters and queue
# counters go to a CSV. At the end: a start/warm-up/end/peak table, PASS or
# FAIL (exit 1) on wrong verdicts, stalls, errors, and on growth after the
# warm-up beyond the stated tolerances.
#
#   sudo benches/soak.sh                   # 30 minutes
#   sudo DURATION=3m benches/soak.sh       # shorter (s, m or h)
#
# Environment: DURATION (default 30m), WARMUP (default 5m, at most a third
# of DURATION; flatness is judged only after a warm-up of 150 s or more,
# i.e. DURATION of 8m or more), CLIENTS (probe threads, default 4), OUT (results directory,
# default target/soak/<UTC time>), TOLLGATE (a binary to use instead of
# building target/release/tollgate).
#
# Lab (addresses 10.213.0.0/16 and fdd5::/16, used by nothing else):
#   client  eth0 10.213.1.2 fdd5:1::2 ─┐
#   web     eth0 10.213.2.2 fdd5:2::2 ─┼─ node 10.213.{1,2,3}.1 fdd5:{1,2,3}::1
#   dns     eth0 10.213.3.2 fdd5:3::2 ─┘  (router; tollgate runs here)
# web also owns 10.213.100.0/22 and fdd5:100::/30 ("external sites": the
# DNS server hands out 10.213.100.x for *.fq.soak.test and 10.213.102.x for
# *.flip.soak.test; 10.213.101.x is never handed out).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${DURATION:-30m}
CLIENTS=${CLIENTS:-4}
METRICS_PORT=9479

die() { echo "soak.sh: $*" >&2; exit 2; }
seconds() {
    local v=$1
    case $v in
        *h) echo $((${v%h} * 3600)) ;;
        *m) echo $((${v%m} * 60)) ;;
        *s) echo "${v%s}" ;;
        *) echo "$v" ;;
    esac
}
DURATION_S=$(seconds "$DURATION")
WARMUP_S=$(seconds "${WARMUP:-5m}")
((WARMUP_S <= DURATION_S / 3)) || WARMUP_S=$((DURATION_S / 3))

[[ $(id -u) -eq 0 ]] || die "must run as root"
for t in ip iptables ip6tables ipset conntrack nginx python3; do
    command -v "$t" >/dev/null || die "missing $t (scripts/install-deps.sh)"
done

if [[ -n ${TOLLGATE:-} ]]; then
    BIN=$TOLLGATE
else
    (cd "$ROOT" && cargo build --release --bin tollgate) || die "release build failed"
    BIN=$ROOT/target/release/tollgate
fi
[[ -x $BIN ]] || die "no binary at $BIN"

OUT=${OUT:-$ROOT/target/soak/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TAG=tgsk$$
NODE=$TAG-node
CLIENT=$TAG-client
WEB=$TAG-web
DNS=$TAG-dns
DIR=$(mktemp -d /tmp/tollgate-soak.XXXXXX)
AGENT=
PIDS=()

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    if [[ -n $AGENT ]] && kill -0 "$AGENT" 2>/dev/null; then
        kill -TERM "$AGENT"
        for _ in $(seq 100); do kill -0 "$AGENT" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$AGENT" 2>/dev/null || true
    fi
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for ns in "$NODE" "$CLIENT" "$WEB" "$DNS"; do
        if [[ -e /run/netns/$ns ]]; then
            for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns del "$ns"
        fi
    done
    [[ -f $DIR/agent.log ]] && cp "$DIR/agent.log" "$OUT/agent.log"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
spawn() { # NS LOGNAME CMD...: background process in a namespace
    local ns=$1 name=$2; shift 2
    ip netns exec "$ns" "$@" >"$DIR/$name.log" 2>&1 &
    PIDS+=($!)
}
wait_listening() { # NS PORT
    for _ in $(seq 200); do
        nsx "$1" ss -Htln "sport = :$2" | grep -q . && return 0
        sleep 0.05
    done
    die "nothing listens on tcp/$2 in $1"
}

# --- lab -------------------------------------------------------------------
ip netns add "$NODE"
nsx "$NODE" ip link set lo up
nsx "$NODE" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
k=0
for ns in "$CLIENT" "$WEB" "$DNS"; do
    k=$((k + 1))
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
    ip -n "$NODE" link add "sk$k" type veth peer name eth0 netns "$ns"
    ip -n "$NODE" addr add "10.213.$k.1/24" dev "sk$k"
    ip -n "$NODE" addr add "fdd5:$k::1/64" dev "sk$k" nodad
    ip -n "$NODE" link set "sk$k" up
    ip -n "$ns" addr add "10.213.$k.2/24" dev eth0
    ip -n "$ns" addr add "fdd5:$k::2/64" dev eth0 nodad
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "10.213.$k.1"
    ip -n "$ns" -6 route add default via "fdd5:$k::1"
done
# The "external sites" live on web: local routes make it answer on every
# address of the ranges.
ip -n "$WEB" route add local 10.213.100.0/22 dev lo
ip -n "$WEB" -6 route add local fdd5:100::/30 dev lo
ip -n "$NODE" route add 10.213.100.0/22 via 10.213.2.2
ip -n "$NODE" -6 route add fdd5:100::/30 via fdd5:2::2

# --- servers (listening before the agent queues anything) ------------------
mkdir -p "$DIR/nginx"
cat >"$DIR/nginx/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1;
pid $DIR/nginx/nginx.pid; error_log $DIR/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $DIR/nginx/body; proxy_temp_path $DIR/nginx/proxy;
  fastcgi_temp_path $DIR/nginx/fcgi; uwsgi_temp_path $DIR/nginx/uwsgi; scgi_temp_path $DIR/nginx/scgi;
  keepalive_requests 1000000; keepalive_timeout 60s;
  server { listen 80; listen [::]:80; location / { return 200 "soak-ok \$uri\n"; } }
}
NGINX
spawn "$WEB" nginx nginx -c "$DIR/nginx/nginx.conf" -p "$DIR/nginx"
spawn "$WEB" echo python3 "$ROOT/benches/soak.py" serve 8080 8081 8082 8083 8443
spawn "$NODE" echo-node python3 "$ROOT/benches/soak.py" serve 9090 9091 9092
for port in 80 8080 8081 8082 8083 8443; do wait_listening "$WEB" "$port"; done
for port in 9090 9091 9092; do wait_listening "$NODE" "$port"; done

# --- policies --------------------------------------------------------------
mkdir -p "$DIR/policies"
cat >"$DIR/policies/inventory.yaml" <<'YAML'
apiVersion: v1
kind: Node
metadata: {name: soak-node, labels: {role: soak-node}}
---
apiVersion: v1
kind: Namespace
metadata: {name: soak, labels: {env: soak}}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: soak, labels: {app: client}}
spec: {nodeName: soak-node}
status: {podIP: 10.213.1.2, podIPs: [{ip: 10.213.1.2}, {ip: "fdd5:1::2"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: soak, labels: {app: web}}
spec: {nodeName: soak-node}
status: {podIP: 10.213.2.2, podIPs: [{ip: 10.213.2.2}, {ip: "fdd5:2::2"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: dns, namespace: soak, labels: {app: dns}}
spec: {nodeName: soak-node}
status: {podIP: 10.213.3.2, podIPs: [{ip: 10.213.3.2}, {ip: "fdd5:3::2"}]}
YAML
cat >"$DIR/policies/static.yaml" <<'YAML'
# Never changes during the soak (benches/soak.py knows these outcomes).
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-web}
spec:
  priority: 10
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: allow-echo
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 8080}]
  - name: reject-echo
    action: Reject
    ports: [{protocol: TCP, port: 8082}]
  - name: drop-echo
    action: Drop
    enableLogging: true
    logLabel: soak-drop
    ports: [{protocol: TCP, port: 8083}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-node}
spec:
  priority: 10
  appliedTo: [{nodeSelector: {matchLabels: {role: soak-node}}}]
  ingress:
  - name: allow-node
    action: Allow
    enableLogging: true
    from: [{ipBlock: {cidr: 10.213.0.0/16}}, {ipBlock: {cidr: "fdd5::/16"}}]
    ports: [{protocol: TCP, port: 9090}]
  - name: reject-node
    action: Reject
    ports: [{protocol: TCP, port: 9092}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-client}
spec:
  priority: 10
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
  - name: allow-fqdn
    action: Allow
    to: [{fqdn: "*.fq.soak.test"}]
    ports: [{protocol: TCP, port: 8443}]
  - name: reject-external
    action: Reject
    to: [{ipBlock: {cidr: 10.213.100.0/22}}, {ipBlock: {cidr: "fdd5:100::/30"}}]
YAML
python3 "$ROOT/benches/soak.py" policy A >"$DIR/policies/flip.yaml"
python3 "$ROOT/benches/soak.py" policy B >"$DIR/flip-b.yaml"
"$BIN" validate "$DIR/policies"/*.yaml >/dev/null
"$BIN" validate "$DIR/policies/inventory.yaml" "$DIR/policies/static.yaml" "$DIR/flip-b.yaml" >/dev/null
rm "$DIR/flip-b.yaml"
cat >"$DIR/config.yaml" <<YAML
auditLogMaxBytes: 1048576
auditLogMaxFiles: 2
YAML

# --- agent -----------------------------------------------------------------
# Not through nsx: $! must be the agent itself (ip netns exec execs it).
ip netns exec "$NODE" "$BIN" run --config "$DIR/config.yaml" --policies "$DIR/policies" \
    --node-name soak-node --node-labels role=soak-node --queues 2 \
    --fqdn-min-ttl 2 --dns-trusted-server 10.213.3.2 --dns-trusted-server fdd5:3::2 \
    --status-socket "$DIR/status.sock" --metrics-address "127.0.0.1:$METRICS_PORT" \
    --audit-log "$DIR/audit/np.log" 2>"$DIR/agent.log" &
AGENT=$!
for _ in $(seq 300); do
    grep -q 'ruleset applied generation=1' "$DIR/agent.log" && break
    kill -0 "$AGENT" 2>/dev/null || { cat "$DIR/agent.log" >&2; die "agent exited"; }
    sleep 0.1
done
grep -q 'ruleset applied generation=1' "$DIR/agent.log" || die "agent did not start; $DIR/agent.log"

echo "soak: $DURATION (warm-up ${WARMUP_S} s), $CLIENTS clients, agent pid $AGENT, results in $OUT"
echo "soak: load at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
set +e
python3 "$ROOT/benches/soak.py" drive --duration "$DURATION_S" --warmup "$WARMUP_S" \
    --client-ns "$CLIENT" --node-ns "$NODE" --dns-ns "$DNS" --agent-pid "$AGENT" \
    --status-socket "$DIR/status.sock" --metrics-port "$METRICS_PORT" \
    --policies "$DIR/policies" --audit-log "$DIR/audit/np.log" --out "$OUT" --clients "$CLIENTS"
rc=$?
set -e
echo "soak: load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# A clean shutdown is part of the result.
kill -TERM "$AGENT"
for _ in $(seq 100); do kill -0 "$AGENT" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$AGENT" 2>/dev/null; then
    echo "FAIL: agent did not exit within 10 s of SIGTERM"
    rc=1
else
    wait "$AGENT" || { echo "FAIL: agent exited with status $?"; rc=1; }
    AGENT=
    grep -q 'shutdown complete' "$DIR/agent.log" || { echo "FAIL: no 'shutdown complete'"; rc=1; }
    grep -E 'queue stats|dns stats' "$DIR/agent.log" | sed 's/^.*INFO //' | tee -a "$OUT/summary.txt"
fi
for level in ERROR WARN; do
    n=$(grep -c " $level " "$DIR/agent.log" || true)
    echo "agent log: $n $level lines" | tee -a "$OUT/summary.txt"
done
echo "results: $OUT (samples.csv, events.jsonl, summary.txt, agent.log)"
exit "$rc"
