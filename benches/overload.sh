#!/usr/bin/env bash
# shellcheck disable=SC2016 # the awk programs' $1, $c are single-quoted on purpose
# Overload bench of tollgate on a namespace lab (root; not run in CI).
#
#   sudo benches/overload.sh            (env: FLOOD_SECONDS=15, DNS_NAMES=80000,
#                                        L7_MAX_FLOWS=4096, L7_HELD=8000,
#                                        AUDIT_CONNECTIONS=5000, TOLLGATE=path)
#
# Topology (10.64.0.0/16, nothing in the root namespace is touched):
#   tgovl-c-PID 10.64.1.2 ── 10.64.1.1 [tgovl-n-PID: tollgate, servers] 10.64.2.1 ── 10.64.2.2 tgovl-d-PID (dnsmasq)
# The node runs one ClusterNetworkPolicy applied to itself: ingress TCP 8080
# allowed from the client, TCP 8081 allowed for HTTP GET /ok* only (L7),
# everything else dropped (port 9090 has a real listener that counts what it
# accepts); egress DNS to 10.64.2.2 allowed and TCP 80 to '*.flood.test'
# (FQDN, so every DNS reply is learned).
#
# Phases (each prints one row; RSS from /proc: before, peak (VmHWM after
# clear_refs), after):
#   closed-flood  --fail-mode closed, `hping3 -S --flood` at the denied port
#                 for FLOOD_SECONDS while a prober opens new connections to
#                 the allowed port (50/s, latency) and the denied port
#   closed-stall  the same with the agent stopped (SIGSTOP) for 3 s mid-flood
#   open-flood    --fail-mode open, the same flood
#   open-stall    --fail-mode open, agent stopped for 3 s mid-flood
#   l7-*-stall    HTTP requests under the L7 rule, 1 in 10 denied, agent
#                 stopped for 3 s: denied requests the server saw
#   l7-hold       L7_HELD idle keep-alive connections under an L7 rule with
#                 l7MaxFlows L7_MAX_FLOWS, then a second request on each
#   dns-flood     DNS_NAMES lookups of distinct names through the DNS queue
#   audit         benches/audit_overload.sh with this binary
# Denied connections that got through are counted three ways: accepted by
# the listener, SYN-ACKs the node sent from port 9090 (mangle OUTPUT
# counter), SYNs to 9090 past the filter table (nat INPUT counter: the nat
# hook runs after filter and sees every new connection once). Packets the
# kernel could not hand to a worker are derived: NFQUEUE rule hits minus
# the kernel's id sequence (not queued: queue full), and the id sequence
# minus what the workers received (lost in the socket buffer) — dropped
# when fail-closed, accepted without a verdict (and uncounted by the
# kernel) when fail-open. Recovery: time from the end of the flood to the
# first served new allowed connection, then the workers must take new
# packets and the queues drain.
set -euo pipefail

FLOOD_SECONDS=${FLOOD_SECONDS:-15}
DNS_NAMES=${DNS_NAMES:-80000}
L7_MAX_FLOWS=${L7_MAX_FLOWS:-4096}
L7_HELD=${L7_HELD:-8000}
AUDIT_CONNECTIONS=${AUDIT_CONNECTIONS:-5000}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=$ROOT/benches/overload_tools.py
NODE=tgovl-n-$$ CLIENT=tgovl-c-$$ DNSNS=tgovl-d-$$
NODE_IP=10.64.1.1 CLIENT_IP=10.64.1.2 DNS_IP=10.64.2.2
ALLOWED=8080 L7PORT=8081 DENIED=9090
METRICS=127.0.0.1:9471
DIR=$(mktemp -d /tmp/tgovl.XXXXXX)
AGENT=

die() { echo "overload.sh: $*" >&2; exit 1; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
[[ $(id -u) -eq 0 ]] || die "must run as root"
for tool in hping3 dnsmasq python3 curl iptables ipset conntrack; do
    command -v "$tool" >/dev/null || die "missing $tool (scripts/install-deps.sh)"
done

cleanup() {
    set +e
    for ns in "$CLIENT" "$DNSNS" "$NODE"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    done
    [[ -n $AGENT ]] && wait "$AGENT" 2>/dev/null
    for ns in "$CLIENT" "$DNSNS" "$NODE"; do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${TOLLGATE:-} ]]; then
    BIN=$TOLLGATE
else
    echo "building tollgate (release)..." >&2
    (cd "$ROOT" && cargo build --release --bin tollgate >&2)
    BIN=$ROOT/target/release/tollgate
fi

# --- lab -----------------------------------------------------------------
for ns in "$NODE" "$CLIENT" "$DNSNS"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip -n "$NODE" link add vc type veth peer name eth0 netns "$CLIENT"
ip -n "$NODE" link add vd type veth peer name eth0 netns "$DNSNS"
ip -n "$NODE" addr add $NODE_IP/24 dev vc
ip -n "$NODE" addr add 10.64.2.1/24 dev vd
ip -n "$NODE" link set vc up
ip -n "$NODE" link set vd up
for pair in "$CLIENT $CLIENT_IP 10.64.1.1" "$DNSNS $DNS_IP 10.64.2.1"; do
    read -r ns ip gw <<<"$pair"
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$gw"
done
nsx "$CLIENT" sysctl -qw net.ipv4.ip_local_port_range="1024 65000"

# Ground truth for "a denied connection got through": counters the agent
# does not own, in hooks that run after the filter table.
nsx "$NODE" iptables -w -t nat -A INPUT -p tcp --dport $DENIED -m comment --comment denied-past-filter
nsx "$NODE" iptables -w -t mangle -A OUTPUT -p tcp --sport $DENIED --tcp-flags SYN,ACK SYN,ACK \
    -m comment --comment denied-synack

mkdir "$DIR/policies"
cat >"$DIR/policies/node.yaml" <<EOF
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: overload}
spec:
  priority: 1
  appliedTo: [{nodeSelector: {matchLabels: {role: overload}}}]
  ingress:
  - name: allow-web
    action: Allow
    from: [{ipBlock: {cidr: 10.64.1.0/24}}]
    ports: [{protocol: TCP, port: $ALLOWED}]
  - name: allow-l7
    action: Allow
    from: [{ipBlock: {cidr: 10.64.1.0/24}}]
    ports: [{protocol: TCP, port: $L7PORT}]
    l7Protocols: [{http: {method: GET, path: '/ok*'}}]
  - name: drop-rest
    action: Drop
  egress:
  - name: dns
    action: Allow
    to: [{ipBlock: {cidr: $DNS_IP/32}}]
    ports: [{protocol: UDP, port: 53}]
  - name: flood-names
    action: Allow
    to: [{fqdn: '*.flood.test'}]
    ports: [{protocol: TCP, port: 80}]
EOF

( ulimit -n "$(ulimit -Hn)"; exec ip netns exec "$NODE" python3 "$TOOLS" serve \
    --allowed $ALLOWED,$L7PORT --denied $DENIED --count-file "$DIR/denied-accepts" ) &
ip netns exec "$DNSNS" dnsmasq --keep-in-foreground --no-resolv --no-hosts --user=root \
    --listen-address=$DNS_IP --bind-interfaces --synth-domain=flood.test,10.66.0.0/15 \
    --local-ttl=300 --cache-size=0 --dns-forward-max=1000 --pid-file="$DIR/dnsmasq.pid" &
i=0
until [[ -s $DIR/denied-accepts && -s $DIR/dnsmasq.pid ]]; do
    i=$((i + 1)); ((i < 200)) || die "servers did not start"; sleep 0.05
done

# --- helpers ---------------------------------------------------------------
start_agent() { # fail-mode, extra flags...
    local mode=$1; shift
    : >"$DIR/agent.log"
    ip netns exec "$NODE" "$BIN" run --policies "$DIR/policies" --node-name overload \
        --node-labels role=overload --node-address $NODE_IP --node-address 10.64.2.1 \
        --fail-mode "$mode" --metrics-address $METRICS --status-socket "$DIR/status.sock" \
        "$@" 2>>"$DIR/agent.log" &
    AGENT=$!
    local i=0
    until grep -q "ruleset applied generation=1" "$DIR/agent.log"; do
        i=$((i + 1)); ((i < 600)) || { cat "$DIR/agent.log" >&2; die "agent did not start"; }
        kill -0 "$AGENT" 2>/dev/null || { cat "$DIR/agent.log" >&2; die "agent exited"; }
        sleep 0.05
    done
}

stop_agent() {
    kill -TERM "$AGENT" 2>/dev/null || true
    wait "$AGENT" 2>/dev/null || true
    AGENT=
}

rss_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$AGENT/status"; }
reset_peak() { echo 5 >"/proc/$AGENT/clear_refs"; }

metric() { # name regex (sums every series)
    nsx "$NODE" curl -sf "http://$METRICS/metrics" |
        awk -v re="^$1" '$0 ~ re {s += $NF} END {printf "%d\n", s}'
}

# Sum over the connection queues of one /proc/net/netfilter/nfnetlink_queue
# column (1-based): 3 waiting, 6 queue_dropped, 7 user_dropped, 8 id_sequence.
kernel_col() {
    nsx "$NODE" awk -v c="$1" '$1 == 100 || $1 == 101 {s += $c} END {print s + 0}' \
        /proc/net/netfilter/nfnetlink_queue
}

# Packets that hit the new-connection NFQUEUE rules (all owned chains: the
# node's egress is under policy too, so TOLLGATE-OUTPUT queues as well).
nfqueue_rule_packets() {
    local chain sum=0 n
    for chain in TOLLGATE-INPUT TOLLGATE-OUTPUT TOLLGATE-FORWARD; do
        n=$(nsx "$NODE" iptables -w -t filter -L "$chain" -v -x -n |
            awk '/NFQUEUE/ && /balance 100:101/ {s += $1} END {print s + 0}')
        sum=$((sum + n))
    done
    echo "$sum"
}

# The same per chain, for the log.
nfqueue_rule_packets_by_chain() {
    local chain
    for chain in TOLLGATE-INPUT TOLLGATE-OUTPUT TOLLGATE-FORWARD; do
        printf '%s=%s ' "$chain" "$(nsx "$NODE" iptables -w -t filter -L "$chain" -v -x -n |
            awk '/NFQUEUE/ && /balance 100:101/ {s += $1} END {print s + 0}')"
    done
}

rule_packets() { # table chain comment
    nsx "$NODE" iptables -w -t "$1" -L "$2" -v -x -n | awk -v c="$3" '$0 ~ c {print $1}'
}

snapshot() { # prefix: stores <prefix>_<counter> shell variables
    local p=$1
    printf -v "${p}_rule" %s "$(nfqueue_rule_packets)"
    printf -v "${p}_idseq" %s "$(kernel_col 8)"
    printf -v "${p}_qdrop" %s "$(kernel_col 6)"
    printf -v "${p}_udrop" %s "$(kernel_col 7)"
    printf -v "${p}_worker" %s "$(metric 'tollgate_queue_packets_total\{queue="10[01]"\}')"
    printf -v "${p}_overflows" %s "$(metric 'tollgate_queue_overflows_total')"
    printf -v "${p}_bypassed" %s "$(metric 'tollgate_queue_bypassed_total')"
    printf -v "${p}_past" %s "$(rule_packets nat INPUT denied-past-filter)"
    printf -v "${p}_synack" %s "$(rule_packets mangle OUTPUT denied-synack)"
    printf -v "${p}_accepts" %s "$(cat "$DIR/denied-accepts")"
}

json() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d.get(sys.argv[2]))' "$1" "$2"; }

wait_queues_empty() {
    local i=0
    until [[ $(kernel_col 3) == 0 ]]; do
        i=$((i + 1)); ((i < 600)) || return 1; sleep 0.05
    done
}

ROWS=()
# shellcheck disable=SC2059 # the caller passes the format
row() { ROWS+=("$(printf "$@")"); }

# shellcheck disable=SC2154 # b_*, m_*, a_* are set by snapshot() with printf -v
flood_phase() { # name, stall (0|1)
    local name=$1 stall=$2
    local rss_before; rss_before=$(rss_kb VmRSS)
    reset_peak
    snapshot b
    local t0; t0=$(date +%s.%N)
    nsx "$CLIENT" timeout -s INT "$FLOOD_SECONDS" hping3 -q -S -p $DENIED --flood $NODE_IP \
        >"$DIR/hping.log" 2>&1 &
    local flood=$!
    sleep 1
    nsx "$CLIENT" python3 "$TOOLS" probe --target $NODE_IP --allowed $ALLOWED --denied $DENIED \
        --seconds $((FLOOD_SECONDS - 2)) --rate 50 >"$DIR/probe.json" &
    local probe=$!
    if [[ $stall == 1 ]]; then
        sleep 4
        kill -STOP "$AGENT"
        sleep 3
        kill -CONT "$AGENT"
    fi
    wait "$probe" || true
    wait "$flood" || true
    local t1; t1=$(date +%s.%N)
    local rec; rec=$(nsx "$CLIENT" python3 "$TOOLS" recover --target $NODE_IP --port $ALLOWED --timeout 30 || true)
    local stuck=no
    wait_queues_empty || stuck=waiting
    snapshot m
    nsx "$CLIENT" python3 "$TOOLS" probe --target $NODE_IP --allowed $ALLOWED --denied $DENIED \
        --seconds 2 --rate 20 --threads 1 >"$DIR/after.json"
    wait_queues_empty || stuck=waiting
    snapshot a
    local after; after=$(cat "$DIR/after.json")
    # Every new connection of the after-probe is one more packet a worker took.
    (( a_worker - m_worker >= $(json "$after" allowed_attempts) )) || stuck=yes
    local rss_peak rss_after; rss_peak=$(rss_kb VmHWM); rss_after=$(rss_kb VmRSS)
    local seconds; seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')
    local hit=$((m_rule - b_rule)) queued=$((m_idseq - b_idseq)) received=$((m_worker - b_worker))
    local qfull=$((hit - queued)) socklost=$((queued - received))
    local p; p=$(cat "$DIR/probe.json")
    echo "--- $name: hping3 $(grep -h 'packets transmitted' "$DIR/hping.log" || true)" >&2
    echo "    probe during: $p" >&2
    echo "    probe after:  $after  recovery: $rec" >&2
    echo "    NFQUEUE rule hits since start: $(nfqueue_rule_packets_by_chain)" >&2
    echo "    kernel queue_dropped +$((m_qdrop - b_qdrop)) user_dropped +$((m_udrop - b_udrop)); agent bypassed +$((m_bypassed - b_bypassed)); conntrack entries now $(nsx "$NODE" conntrack -C 2>/dev/null)" >&2
    row "%-12s %7.0f %8d %8d %8d %8d %7d | %4s/%-4s %6s %7s | %4s %4s %7s %7s %4s | %6s %4s %-7s | %3d %4d %3d" \
        "$name" "$(awk -v h="$hit" -v s="$seconds" 'BEGIN {print h / s}')" "$hit" "$received" \
        "$qfull" "$socklost" "$((m_overflows - b_overflows))" \
        "$(json "$p" allowed_ok)" "$(json "$p" allowed_attempts)" "$(json "$p" latency_ms_p50)" \
        "$(json "$p" latency_ms_p99)" \
        "$(json "$p" denied_attempts)" "$(json "$p" denied_connected)" \
        "$((m_past - b_past))" "$((m_synack - b_synack))" "$((m_accepts - b_accepts))" \
        "$(json "$rec" recovery_s)" "$(json "$after" allowed_ok_pct)" "$stuck" \
        "$((rss_before / 1024))" "$((rss_peak / 1024))" "$((rss_after / 1024))"
}

L7_ROWS=()
# HTTP under the L7 rule with the agent stopped for 3 s: closed-loop
# traffic on 16 keep-alive connections for 12 s (GET /ok, every 10th a
# denied GET /admin), and 400 more established connections that all send
# a denied GET /admin at once while the agent is stopped (open loop: more
# segments than the L7 worker's socket holds, so it is overrun for sure).
l7_stall_phase() { # name
    local name=$1
    local l7q=103
    local q0 u0 r0
    q0=$(nsx "$NODE" awk -v q=$l7q '$1 == q {print $8}' /proc/net/netfilter/nfnetlink_queue)
    u0=$(nsx "$NODE" awk -v q=$l7q '$1 == q {print $7}' /proc/net/netfilter/nfnetlink_queue)
    r0=$(cat "$DIR/denied-accepts.requests")
    rm -f "$DIR/go"
    nsx "$CLIENT" python3 "$TOOLS" hold --target $NODE_IP --port $L7PORT --count 400 \
        --seconds 30 --path /admin --go "$DIR/go" >"$DIR/burst.json" &
    local burst=$!
    local i=0
    until grep -q '"phase": "open"' "$DIR/burst.json" || ((++i > 600)); do sleep 0.05; done
    nsx "$CLIENT" python3 "$TOOLS" l7load --target $NODE_IP --port $L7PORT --seconds 12 \
        >"$DIR/l7load.json" &
    local load=$!
    sleep 4
    kill -STOP "$AGENT"
    touch "$DIR/go"
    sleep 3
    kill -CONT "$AGENT"
    wait "$load" || true
    wait "$burst" || true
    local rec; rec=$(nsx "$CLIENT" python3 "$TOOLS" recover --target $NODE_IP --port $L7PORT --timeout 30 || true)
    local q1 u1 r1
    q1=$(nsx "$NODE" awk -v q=$l7q '$1 == q {print $8}' /proc/net/netfilter/nfnetlink_queue)
    u1=$(nsx "$NODE" awk -v q=$l7q '$1 == q {print $7}' /proc/net/netfilter/nfnetlink_queue)
    r1=$(cat "$DIR/denied-accepts.requests")
    local l b; l=$(cat "$DIR/l7load.json"); b=$(tail -1 "$DIR/burst.json")
    echo "--- $name: $l; burst $(tr '\n' ' ' <"$DIR/burst.json"); L7 queue $l7q queued +$((q1 - q0)) user_dropped +$((u1 - u0)); recovery $rec" >&2
    L7_ROWS+=("$(printf "%-14s %7s %5s | %5s %5s %5s %5s | %5s %5s %5s %5s | %6s | %7s %6s | %6s" "$name" \
        "$(json "$l" allowed_ok)" "$(json "$l" allowed_failed)" \
        "$(json "$l" denied_403)" "$(json "$l" denied_reset)" "$(json "$l" denied_timeout)" \
        "$(json "$l" denied_passed)" \
        "$(json "$b" forbidden)" "$(json "$b" reset)" "$(json "$b" no_answer)" "$(json "$b" ok)" \
        "$((r1 - r0))" "$((q1 - q0))" "$((u1 - u0))" "$(json "$rec" recovery_s)")")
}

echo "load before: $(uptime)" >&2

# --- connection floods ------------------------------------------------------
start_agent closed
flood_phase closed-flood 0
flood_phase closed-stall 1
l7_stall_phase l7-closed-stall
stop_agent
start_agent open
flood_phase open-flood 0
flood_phase open-stall 1
l7_stall_phase l7-open-stall
stop_agent

# --- L7 flow table -----------------------------------------------------------
printf 'l7MaxFlows: %d\n' "$L7_MAX_FLOWS" >"$DIR/l7.yaml"
start_agent closed --config "$DIR/l7.yaml"
rss_before=$(rss_kb VmRSS); reset_peak
( ulimit -n "$(ulimit -Hn)"; exec ip netns exec "$CLIENT" python3 "$TOOLS" hold --target $NODE_IP \
    --port $L7PORT --count "$L7_HELD" --seconds 3 ) >"$DIR/hold.json" &
hold=$!
i=0
until grep -q '"phase": "open"' "$DIR/hold.json" || ((++i > 2400)); do sleep 0.05; done
active=$(metric tollgate_l7_flows_active)
rss_held=$(rss_kb VmRSS)
wait "$hold" || true
echo "--- l7-hold: $(tr '\n' ' ' <"$DIR/hold.json") active while held: $active" >&2
L7_ROW=$(printf "%-13s held %s (failed %s), l7 flows active %s (bound %d), 2nd request answered %s reset %s silent %s | RSS MiB %d/%d/%d (held %d)" \
    l7-hold "$(json "$(head -1 "$DIR/hold.json")" held)" "$(json "$(head -1 "$DIR/hold.json")" failed)" \
    "$active" "$L7_MAX_FLOWS" "$(json "$(tail -1 "$DIR/hold.json")" ok)" \
    "$(json "$(tail -1 "$DIR/hold.json")" reset)" "$(json "$(tail -1 "$DIR/hold.json")" no_answer)" \
    "$((rss_before / 1024))" "$(($(rss_kb VmHWM) / 1024))" "$(($(rss_kb VmRSS) / 1024))" "$((rss_held / 1024))")
stop_agent

# --- DNS flood ---------------------------------------------------------------
start_agent closed
rss_before=$(rss_kb VmRSS); reset_peak
dns=$(nsx "$NODE" python3 "$TOOLS" dns --server $DNS_IP --names "$DNS_NAMES" --net 10.66 --domain flood.test)
sleep 1
learned=$(metric tollgate_fqdn_addresses_learned_total)
current=$(metric 'tollgate_fqdn_addresses ')
setsize=$(nsx "$NODE" ipset list -t | awk '/^Name: tollgate-fqdn/ {n = 1} n && /^Number of entries/ {s += $NF; n = 0} END {print s + 0}')
echo "--- dns-flood: $dns; learned=$learned mirror=$current ipset entries=$setsize" >&2
DNS_ROW=$(printf "%-13s queries/s %s  answered %s/%s  learned %s  mirror %s (bound 65536)  ipset %s | RSS MiB %d/%d/%d" \
    dns-flood "$(json "$dns" per_s)" "$(json "$dns" answered)" "$(json "$dns" queries)" \
    "$learned" "$current" "$setsize" \
    "$((rss_before / 1024))" "$(($(rss_kb VmHWM) / 1024))" "$(($(rss_kb VmRSS) / 1024))")
stop_agent
# A restart restores the mirror from the sets: what that costs in memory.
start_agent closed
DNS_ROW="$DNS_ROW
dns-restart   $(grep -o 'fqdn mirror restored.*' "$DIR/agent.log" | head -1) | RSS MiB $(($(rss_kb VmRSS) / 1024))"
stop_agent

# --- audit queue ---------------------------------------------------------------
AUDIT_OUT=$(TOLLGATE=$BIN "$ROOT/benches/audit_overload.sh" "$AUDIT_CONNECTIONS" 2>&1 || true)

echo "load after: $(uptime)" >&2
echo
echo "flood at TCP $DENIED (hping3 -S --flood, ${FLOOD_SECONDS} s) from $CLIENT_IP, probes from the same address"
echo "  SYN/s, hits: packets that hit the NFQUEUE rules; taken: received by the workers;"
echo "  q-full: hits the kernel did not queue (queue full); sock-lost: queued but lost in the"
echo "  worker's socket buffer (fail-closed: both dropped; fail-open: both accepted without a"
echo "  verdict); enobufs: the workers' ENOBUFS count; allowed ok/n, p50/p99 ms: new allowed"
echo "  connections during the flood; den/conn: denied connects tried/connected; past: SYNs to"
echo "  $DENIED past the filter table (nat INPUT); synack: SYN-ACKs from $DENIED; acc: accepted by"
echo "  the $DENIED listener; rec-s: first allowed connection served after the flood; ok%: allowed"
echo "  after; stuck: a queue not drained or not taking packets; RSS MiB before/peak/after"
printf "%-12s %7s %8s %8s %8s %8s %7s | %9s %6s %7s | %4s %4s %7s %7s %4s | %6s %4s %-7s | %3s %4s %3s\n" \
    phase SYN/s hits taken q-full sock-lost enobufs "allowed" p50 p99 \
    den conn past synack acc rec-s ok% stuck rss0 peak rss1
printf '%s\n' "${ROWS[@]}"
echo
echo "L7 rule, agent stopped 3 s: 16 keep-alive connections for 12 s (GET /ok served/failed;"
echo "  every 10th a denied GET /admin: answered 403 / reset / no answer / served), 400 established"
echo "  connections sending GET /admin at once during the stop (403 / reset / no answer / served);"
echo "  server: denied requests the server saw; L7 queue 103: queued, user_dropped; rec-s"
printf "%-14s %7s %5s | %5s %5s %5s %5s | %5s %5s %5s %5s | %6s | %7s %6s | %6s\n" phase served fail \
    403 reset none pass 403 reset none pass server queued udrop rec-s
printf '%s\n' "${L7_ROWS[@]}"
echo
echo "$DNS_ROW"
echo "$L7_ROW"
echo "audit:"
while IFS= read -r line; do echo "  $line"; done <<<"$AUDIT_OUT"
