#!/usr/bin/env bash
# End-to-end benchmark of L7 HTTP inspection (root; release build).
# Two namespaces joined by a veth pair: "srv" runs nginx and, in the second
# phase, `tollgate run` with an L7 rule (GET /api/v2/*) applied to the Node;
# "cli" runs wrk on keep-alive connections. In one run: requests/s without
# firewall, requests/s through L7 inspection, the L7 worker thread's CPU
# time per request (from /proc), and the agent's resident memory sampled
# during a long run.
#
#   benches/l7-http.sh [SECONDS_PER_PHASE=10] [MEMORY_RUN_SECONDS=60]
set -euo pipefail

PHASE=${1:-10}
LONG=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/tollgate
[[ -x $BIN ]] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk missing: scripts/install-deps.sh" >&2; exit 1; }

TAG=tgbl7-$$
SRV=$TAG-srv
CLI=$TAG-cli
DIR=$(mktemp -d)
AGENT=
NGINX=
cleanup() {
    if [[ -n $AGENT ]]; then
        kill "$AGENT" 2>/dev/null || true
        wait "$AGENT" 2>/dev/null || true
    fi
    if [[ -n $NGINX ]]; then
        kill "$NGINX" 2>/dev/null || true
    fi
    ip netns del "$SRV" 2>/dev/null || true
    ip netns del "$CLI" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

ip netns add "$SRV"
ip netns add "$CLI"
ip -n "$SRV" link set lo up
ip -n "$CLI" link set lo up
ip -n "$SRV" link add bl7a type veth peer name bl7b netns "$CLI"
ip -n "$SRV" addr add 10.79.9.1/24 dev bl7a
ip -n "$CLI" addr add 10.79.9.2/24 dev bl7b
ip -n "$SRV" link set bl7a up
ip -n "$CLI" link set bl7b up

cat >"$DIR/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1;
pid $DIR/nginx.pid; error_log $DIR/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $DIR/body; proxy_temp_path $DIR/proxy; fastcgi_temp_path $DIR/fcgi;
  uwsgi_temp_path $DIR/uwsgi; scgi_temp_path $DIR/scgi;
  keepalive_requests 100000000;
  server { listen 80; location / { return 200 "ok\n"; } }
}
NGINX
ip netns exec "$SRV" nginx -c "$DIR/nginx.conf" -p "$DIR" &
NGINX=$!
for _ in $(seq 100); do
    ip netns exec "$SRV" ss -Htln | grep -q ':80 ' && break
    sleep 0.05
done

mkdir -p "$DIR/policies"
cat >"$DIR/policies/l7.yaml" <<'POLICY'
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-l7}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {matchLabels: {role: web}}}]
  ingress:
  - name: api-only
    action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {method: GET, path: /api/v2/*}}]
POLICY

WRK=(wrk -t2 -c16 --latency http://10.79.9.1/api/v2/bench)
rps() { awk '/^Requests\/sec/ {print $2}'; }
reqs() { awk '/requests in/ {print $1}'; }

echo "== no firewall, ${PHASE}s"
base=$(ip netns exec "$CLI" "${WRK[@]}" -d"${PHASE}s")
echo "$base" | grep -E 'Requests/sec|Latency|requests in'

ip netns exec "$SRV" "$BIN" run --policies "$DIR/policies" --node-name bench \
    --node-labels role=web --queues 1 2>"$DIR/agent.log" &
AGENT=$!
for _ in $(seq 200); do grep -q 'ruleset applied' "$DIR/agent.log" 2>/dev/null && break; sleep 0.05; done
grep -q 'ruleset applied' "$DIR/agent.log" || { cat "$DIR/agent.log"; exit 1; }
# Sanity: the rule is enforced.
code=$(ip netns exec "$CLI" curl -sS --max-time 5 -o /dev/null -w '%{http_code}' http://10.79.9.1/admin || true)
[[ $code == 403 ]] || { echo "expected 403 for /admin, got $code" >&2; cat "$DIR/agent.log" >&2; exit 1; }

l7_tid() {
    for t in /proc/"$AGENT"/task/*; do
        if [[ $(cat "$t/comm") == nfqueue-l7-* ]]; then basename "$t"; fi
    done
}
TID=$(l7_tid)
[[ -n $TID ]] || { echo "no L7 worker thread in $AGENT" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$AGENT/task/$TID/stat"; }
HZ=$(getconf CLK_TCK)

echo "== through L7 inspection, ${PHASE}s"
t0=$(ticks)
l7=$(ip netns exec "$CLI" "${WRK[@]}" -d"${PHASE}s")
t1=$(ticks)
echo "$l7" | grep -E 'Requests/sec|Latency|requests in'
n=$(echo "$l7" | reqs)
echo "L7 worker CPU: $(( (t1 - t0) * 1000 / HZ )) ms for $n requests = $(awk -v t=$((t1 - t0)) -v hz="$HZ" -v n="$n" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}') us/request"
echo "ratio L7 / no firewall: $(awk -v a="$(echo "$l7" | rps)" -v b="$(echo "$base" | rps)" 'BEGIN {printf "%.0f%%", a / b * 100}')"

echo "== memory over ${LONG}s (agent VmRSS, kB, every 10 s)"
ip netns exec "$CLI" "${WRK[@]}" -d"${LONG}s" >"$DIR/long.txt" &
WRKPID=$!
samples=()
for _ in $(seq 0 10 "$LONG"); do
    samples+=("$(awk '/VmRSS/ {print $2}' "/proc/$AGENT/status")")
    sleep 10
done
wait "$WRKPID"
echo "VmRSS: ${samples[*]}"
grep -E 'Requests/sec|requests in' "$DIR/long.txt"
kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
grep 'L7 queue stats' "$DIR/agent.log" | sed 's/^.*INFO //'
