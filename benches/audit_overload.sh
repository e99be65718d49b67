#!/bin/sh
# Audit logging under overload (root): N new TCP connections as fast as one
# client can open them, through `tollgate run` with a logged Allow rule,
# once without and once with the audit log (default rate 500/s, burst
# 1000). Prints connections/s for both, how many were delivered, and the
# audit lines written and skipped (from the metrics endpoint). Logging must
# skip lines, never connections.
#
#   sudo benches/audit_overload.sh [N]     (default 5000; needs a built target/debug/tollgate
#                                           or TOLLGATE=path)
set -eu
N=${1:-5000}
BIN=${TOLLGATE:-$(dirname "$0")/../target/debug/tollgate}
NODE=tg-obsb-n-$$
CLIENT=tg-obsb-c-$$
DIR=$(mktemp -d)
AGENT=
cleanup() {
    [ -n "$AGENT" ] && kill "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
    ip netns del "$NODE" 2>/dev/null || true
    ip netns del "$CLIENT" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

ip netns add "$NODE"
ip netns add "$CLIENT"
ip -n "$NODE" link set lo up
ip -n "$NODE" link add va type veth peer name vb netns "$CLIENT"
ip -n "$NODE" addr add 10.61.9.1/24 dev va
ip -n "$NODE" link set va up
ip -n "$CLIENT" link set lo up
ip -n "$CLIENT" addr add 10.61.9.2/24 dev vb
ip -n "$CLIENT" link set vb up

mkdir "$DIR/policies"
cat >"$DIR/policies/p.yaml" <<EOF
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: overload}
spec:
  priority: 1
  appliedTo: [{nodeSelector: {matchLabels: {role: bench}}}]
  ingress:
  - action: Allow
    name: allow-web
    enableLogging: true
    from: [{ipBlock: {cidr: 10.61.9.0/24}}]
    ports: [{protocol: TCP, port: 8080}]
EOF

# A server that accepts and counts connections until told to stop.
ip netns exec "$NODE" python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.61.9.1", 8080)); s.listen(4096)
n = 0
while True:
    c, _ = s.accept(); n += 1
    if c.recv(5) == b"stop!":
        print(n - 1, flush=True); break
    c.close()
' >"$DIR/served" &
SERVER=$!
sleep 0.3

round() { # $1 = label, rest = extra agent flags
    label=$1; shift
    ip netns exec "$NODE" "$BIN" run --policies "$DIR/policies" --node-name bench \
        --node-labels role=bench --queues 1 --status-socket "$DIR/s.sock" \
        --metrics-address 127.0.0.1:9469 "$@" 2>"$DIR/agent.log" &
    AGENT=$!
    i=0
    until grep -q "ruleset applied generation=1" "$DIR/agent.log"; do
        i=$((i + 1)); [ $i -lt 300 ] || { cat "$DIR/agent.log"; exit 1; }; sleep 0.05
    done
    ip netns exec "$CLIENT" python3 -c "
import socket, time
t = time.monotonic()
for _ in range($N):
    c = socket.create_connection(('10.61.9.1', 8080), timeout=3); c.sendall(b'hello'); c.close()
dt = time.monotonic() - t
print('$label: %d connections in %.2f s = %.0f/s' % ($N, dt, $N / dt))
"
    sleep 1.2 # let the last dedup/rate windows settle before scraping
    ip netns exec "$NODE" curl -sf http://127.0.0.1:9469/metrics |
        grep -E '^tollgate_(audit_lines|verdicts_total|verdict_latency_seconds_(sum|count))' | sed "s/^/  /"
    echo "  agent peak RSS: $(awk '$1 == "VmHWM:" {print $2, $3}' "/proc/$AGENT/status")"
    kill "$AGENT"; wait "$AGENT" || true; AGENT=
    # The rules outlive the agent (new connections would meet a queue
    # nobody reads); remove them for the next round.
    ip netns exec "$NODE" "$BIN" cleanup >/dev/null
}

round "audit off"
round "audit on " --audit-log "$DIR/np.log"
echo "  np.log lines: $(wc -l <"$DIR/np.log")"
ip netns exec "$CLIENT" python3 -c '
import socket; c = socket.create_connection(("10.61.9.1", 8080)); c.sendall(b"stop!")'
wait "$SERVER"
echo "connections accepted by the server: $(cat "$DIR/served") of $((2 * N))"
