#!/usr/bin/env bash
# shellcheck disable=SC2016 # the awk programs' $1, $8 are single-quoted on purpose
# End-to-end benchmark of tollgate on a namespace lab (root; not run in CI).
# The one entry point of the wire benchmarks of issue 17:
#
#   benches/e2e.sh [seconds-per-measurement]          (default 10)
#
# Environment:
#   TOLLGATE=path     the binary to measure (default target/release/tollgate,
#                     built with 'cargo build --release' if absent)
#   ROUNDS=5          interleaved rounds per scenario (medians of these)
#   SCENARIOS="conn miss dns l7 bulk flood"   which scenarios, in this order
#                     (fresh-names runs only when named here)
#   FRESH_RATE=2000   names a second the fresh-names scenario offers
#   RULE_COUNTS="10 1000 10000"               rule counts of conn and miss
#   FLOOD_PPS=10000   SYN rate of the flood scenario (hping3 -i u<1e6/rate;
#                     it reaches ~5,000/s on a 2-core machine); 0: --flood
#   WARMUP=1          seconds of unrecorded load before each measurement
#                     (0: none; the flood has none)
#   TOLLGATE_BASE=... A/B mode (below)
#   ENDPOINTS=0       more local Pods (bench/pod-K, 10.97.0.0/16), each on a
#                     veth of its own whose far end holds its address (one
#                     namespace, tgb-pods), sending nothing: the node's
#                     anti-spoofing guards grow with them
#   CLIENT_NODE=bench-node  the client Pod's Node: another name makes it a
#                     remote Pod, whose packets enter the node as a tunnel's
#                     or the uplink's do (its veth is guarded by nobody)
#   CONFIGS=regex     measure only the scenario's configurations it matches
#                     whole (e.g. 'tollgate-fresh.*' for the 10-minute RSS run;
#                     the ratios then need none and conntrack in the same run)
#   PERF=dir          also record a system-wide profile of every measurement
#                     (perf record -a -g, 499 Hz) to dir/<scenario>-<config>-<n>.data,
#                     to compare where a configuration's time goes with the
#                     baselines' (perf report --sort comm,dso,sym -i ...)
#
# Topology (10.98.0.0/16 and 100.64.0.0/10, nothing in the root namespace):
#   tgb-client 10.98.1.2 ── 10.98.1.1 [tgb-node, forwards] 10.98.2.1 ── 10.98.2.2 tgb-server
# The server is Pod backend/web (app=web: nginx, iperf3, dnsmasq); the
# client is Pod frontend/client. The client also owns 100.64.0.0/10 (a
# local route on lo), which the node routes back to it.
#
# Scenarios. In each round every configuration of the scenario is measured
# once, one after the other (none, tollgate..., iptables..., each round
# starting one configuration later), from an empty connection table on the
# node; a figure is the median over ROUNDS, a ratio the median of the
# per-round ratios to `none`, the no-firewall run of the same round.
#   conn   new TCP connections/s with repeated tuples: wrk -t1 -c16 with
#          'Connection: close' (one request, one 2-byte response, closed)
#          from 10.98.1.2. Configurations: none; tollgate-N (cache on and
#          off when the binary has a verdict cache); iptables-N (the same N
#          rules as plain linear iptables in FORWARD after an
#          ESTABLISHED,RELATED accept), N in RULE_COUNTS. tollgate-N runs one
#          ClusterNetworkPolicy of N ingress Drop rules on app=web from N
#          /32s that never match, so each decision passes all N.
#          Also `conntrack`: no filtering, only connection tracking turned
#          on in the node (one ESTABLISHED,RELATED accept in FORWARD): the
#          floor of any stateful firewall, which `none` does not pay.
#   miss   the same, every connection from a new source address: wrk runs
#          with an LD_PRELOAD shim (compiled here with cc) that binds each
#          socket to the next address of 100.64.0.0/10 before connect, so
#          no (source, port, destination) key repeats within ~4 M
#          connections. (SNAT to an address range does not vary the source:
#          the kernel picks the address from a hash of source and
#          destination, so every connection got the same one.) Checked once
#          before the rounds from the server's TIME-WAIT peers.
#   dns    per-lookup RTT p50/p99 (benches/dns_rtt.py: sequential A queries
#          for distinct names, each from a new UDP socket) from the client
#          to dnsmasq on the server, through the node; tollgate runs with an
#          FQDN egress policy on the client (`*.bench.test`, so each reply is
#          learned); also `conntrack` (as in conn). Added µs = tollgate -
#          none of the same round, and tollgate - conntrack.
#   l7     keep-alive HTTP requests/s (wrk -t2 -c16, no 'Connection: close')
#          through an L7 rule (GET /api/*) on app=web; with `l7.queues` 1
#          as well when the binary has that key.
#   bulk   Gbit/s of one established TCP stream (iperf3), tollgate at 1000
#          rules.
#   flood  hping3 SYNs at FLOOD_PPS to a denied port (TCP 9, Drop from the
#          client's /24) for the measurement's seconds; counted: SYNs sent
#          and packets the kernel queued to userspace (the id sequences of
#          /proc/net/netfilter/nfnetlink_queue), with the cache on and off.
#   fresh-names  FRESH_RATE distinct never-seen names a second for the
#          measurement's seconds (benches/fresh_names.py: open loop, an A
#          and an AAAA query per name over 256 client sockets), answered by
#          a responder on the server (10.98.2.3) with 4 A or 4 AAAA records
#          of addresses never given before, so every reply brings 4 new set
#          elements. tollgate runs an FQDN egress policy on the client
#          (`*.fresh.test`). Figures: answered names/s, set elements/s (the
#          agent's fqdn_addresses_learned), lookup p50/p99 (send to the
#          second reply) and what tollgate adds to none and to conntrack,
#          CPU µs per name, the agent's RSS before and after the
#          measurement; its write batches, replies held and delayed and
#          set write errors on stderr. `SCENARIOS=fresh-names ROUNDS=1
#          benches/e2e.sh 600` is issue 34's 10-minute run.
# conn and miss (at the first of RULE_COUNTS) and bulk also measure the
# shipped tollgate with anti-spoofing off (`-noas`, `--anti-spoofing off`,
# when the binary has it): a reference without a target, which shows in
# the same run what the raw table's guard costs every packet.
# The verdict cache is turned on and off with `--set verdictCache.enabled=`
# (or `--verdict-cache on|off`) when `tollgate run --help` offers it; else
# "cache: unsupported by this binary" is printed and tollgate runs as is.
# Every conn, miss and l7 measurement also records the CPU time the whole
# machine spent per connection (or request) meanwhile (busy jiffies of
# /proc/stat: client, server, kernel and agent together; run it on an
# otherwise idle machine), so that what a firewall costs shows even where
# the rate is bounded by something else (the load generator's one core).
# Every tollgate measurement also logs (stderr) the packets queued to
# userspace during it, and the agent's counters whose names hold `cache` or
# `overflow` (its metrics on 127.0.0.1:9479 in the node namespace). The end is a summary table per figure: value, ratio
# to the target's basis, issue 34's target, met or missed (benches/e2e_summary.py, which
# can be re-run on the results file that is kept).
#
# A/B mode, to compare two builds of tollgate in one run:
#   TOLLGATE_BASE=/path/to/old/tollgate [ROUNDS=5] [RULES=1000] benches/e2e.sh [seconds]
# measures conn/s of none, base and new (this tree's or $TOLLGATE) in
# ROUNDS interleaved rounds (none, base, new, none, base, new, ...) with
# RULES rules, and prints every round and the medians, each as a ratio to
# the median of none. With ENDPOINTS and CLIENT_NODE it measures what the
# node's other Pods cost the packets of a remote one, e.g.
#   ENDPOINTS=60 CLIENT_NODE=other-node TOLLGATE_BASE=old RULES=10 benches/e2e.sh 8
#
# Mechanics check (not a measurement): ROUNDS=1 benches/e2e.sh 1
set -euo pipefail

DURATION=${1:-10}
ROUNDS=${ROUNDS:-5}
read -r -a SCENARIO_LIST <<<"${SCENARIOS:-conn miss dns l7 bulk flood}"
read -r -a RULE_COUNTS <<<"${RULE_COUNTS:-10 1000 10000}"
FLOOD_PPS=${FLOOD_PPS:-10000}
WARMUP=${WARMUP:-1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE=tgb-node CLIENT=tgb-client SERVER=tgb-server PODS=tgb-pods
ENDPOINTS=${ENDPOINTS:-0} CLIENT_NODE=${CLIENT_NODE:-bench-node}
SERVER_IP=10.98.2.2 CLIENT_IP=10.98.1.2
MISS_NET=100.64.0.0/10 MISS_BASE=$((100 << 24 | 64 << 16)) MISS_COUNT=$((1 << 22))
DENIED_PORT=9
METRICS=127.0.0.1:9479 # the agent's metrics, inside the node namespace

die() { echo "e2e.sh: $*" >&2; exit 1; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "seconds must be a positive integer"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be a whole number of seconds"
[[ $FLOOD_PPS =~ ^[0-9]+$ && $FLOOD_PPS -le 1000000 ]] || die "FLOOD_PPS must be 0..1000000"
[[ $ENDPOINTS =~ ^[0-9]+$ && $ENDPOINTS -le 60000 ]] || die "ENDPOINTS must be 0..60000"
for n in "${RULE_COUNTS[@]}"; do
    # the rules' /32s are 172.16.(i / 250).(i % 250 + 1)
    [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 64000 ]] || die "RULE_COUNTS: '$n' is not 1..64000"
done
for s in "${SCENARIO_LIST[@]}"; do
    case $s in conn | miss | dns | l7 | bulk | flood | fresh-names) ;; *) die "unknown scenario '$s'" ;; esac
done
FRESH_RATE=${FRESH_RATE:-2000}
PERF=${PERF:-}
if [[ -n $PERF ]]; then
    command -v perf >/dev/null || die "PERF: perf is not installed (apt-get install linux-perf)"
    mkdir -p "$PERF"
fi
FRESH_DNS=10.98.2.3
[[ $FRESH_RATE =~ ^[0-9]+$ && $FRESH_RATE -ge 1 ]] || die "FRESH_RATE must be a positive integer"

ensure_tools() {
    local need=()
    command -v wrk >/dev/null || need+=(wrk)
    command -v iperf3 >/dev/null || need+=(iperf3)
    command -v nginx >/dev/null || need+=(nginx-light)
    command -v iptables >/dev/null || need+=(iptables)
    command -v ipset >/dev/null || need+=(ipset)
    command -v conntrack >/dev/null || need+=(conntrack)
    command -v hping3 >/dev/null || need+=(hping3)
    command -v dnsmasq >/dev/null || need+=(dnsmasq-base)
    command -v curl >/dev/null || need+=(curl)
    command -v dig >/dev/null || need+=(dnsutils)
    command -v cc >/dev/null || need+=(gcc)
    [[ -e /usr/include/dlfcn.h ]] || need+=(libc6-dev)
    command -v python3 >/dev/null || need+=(python3)
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

for ns in $NODE $CLIENT $SERVER $PODS; do
    [[ -e /run/netns/$ns ]] && die "namespace $ns exists: is another run going? (ip netns delete $ns)"
done

AGENT_PID=
cleanup() {
    if [[ -n $AGENT_PID ]]; then kill -TERM "$AGENT_PID" 2>/dev/null || true; fi
    local ns pid
    for ns in $NODE $CLIENT $SERVER $PODS; do
        if [[ -e /run/netns/$ns ]]; then
            for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$ns"
        fi
    done
    [[ -n ${WORK:-} ]] && rm -rf "$WORK"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
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
    # The all-miss sources: the client owns the whole range (AnyIP), the
    # node routes it back.
    nsx $CLIENT ip route add local $MISS_NET dev lo
    nsx $NODE ip route add $MISS_NET via $CLIENT_IP dev n1
    # ENDPOINTS idle Pods, each with its veth and host route.
    if ((ENDPOINTS > 0)); then
        ip netns add $PODS
        nsx $PODS ip link set lo up
        for ((k = 0; k < ENDPOINTS; k++)); do
            nsx $NODE ip link add "p$k" type veth peer name "e$k" netns $PODS
            nsx $PODS ip addr add "$(endpoint_ip $k)/32" dev "e$k"
            nsx $PODS ip link set "e$k" up
            nsx $NODE ip link set "p$k" up
            nsx $NODE ip route add "$(endpoint_ip $k)/32" dev "p$k"
        done
    fi

    mkdir -p "$WORK/nginx"
    cat >"$WORK/nginx/nginx.conf" <<NGINX
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    client_body_temp_path $WORK/nginx;
    proxy_temp_path $WORK/nginx;
    fastcgi_temp_path $WORK/nginx;
    uwsgi_temp_path $WORK/nginx;
    scgi_temp_path $WORK/nginx;
    server { listen 80 backlog=4096; location / { return 200 "ok"; } }
}
NGINX
    nsx $SERVER nginx -c "$WORK/nginx/nginx.conf" -g 'daemon on;'
    nsx $SERVER iperf3 -s -D --logfile "$WORK/iperf3.log"
    nsx $SERVER dnsmasq --no-resolv --no-hosts --user=root --listen-address=$SERVER_IP \
        --bind-interfaces --address=/bench.test/10.97.0.5 --local-ttl=300 \
        --dns-forward-max=1000 --pid-file="$WORK/dnsmasq.pid"
    if [[ " ${SCENARIO_LIST[*]} " == *" fresh-names "* ]]; then
        nsx $SERVER ip addr add $FRESH_DNS/24 dev eth0
        nsx $SERVER python3 "$ROOT/benches/fresh_names.py" serve $FRESH_DNS &
    fi
    local i
    for i in $(seq 1 100); do
        [[ " ${SCENARIO_LIST[*]} " != *" fresh-names "* ]] ||
            nsx $SERVER ss -Hlun "src = $FRESH_DNS and sport = :53" | grep -q . || { sleep 0.05; continue; }
        nsx $SERVER ss -Hltn 'sport = :80' | grep -q . &&
            nsx $SERVER ss -Hltn 'sport = :5201' | grep -q . &&
            nsx $SERVER ss -Hlun 'sport = :53' | grep -q . && return 0
        sleep 0.05
    done
    die "servers did not start"
}

# The LD_PRELOAD shim of the miss scenario: each IPv4 connect() first binds
# the socket to the next address of the range (BENCH_SRC_BASE, _COUNT,
# starting at _FIRST), the port left to connect (IP_BIND_ADDRESS_NO_PORT).
build_shim() {
    cat >"$WORK/bindnext.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

static uint32_t next_index;
static int (*real_connect)(int, const struct sockaddr *, socklen_t);

static uint32_t env_u32(const char *name, uint32_t fallback) {
    const char *v = getenv(name);
    return v ? (uint32_t)strtoul(v, NULL, 10) : fallback;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (!real_connect) {
        real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
        __atomic_store_n(&next_index, env_u32("BENCH_SRC_FIRST", 0), __ATOMIC_SEQ_CST);
    }
    if (addr && addr->sa_family == AF_INET) {
        uint32_t count = env_u32("BENCH_SRC_COUNT", 1);
        uint32_t i = __atomic_fetch_add(&next_index, 1, __ATOMIC_SEQ_CST) % count;
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(env_u32("BENCH_SRC_BASE", 0) + i);
        int one = 1;
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        bind(fd, (const struct sockaddr *)&src, sizeof src);
    }
    return real_connect(fd, addr, len);
}
C
    cc -O2 -shared -fPIC -o "$WORK/bindnext.so" "$WORK/bindnext.c" -ldl
    echo 1 >"$WORK/miss-next"
}

# The address of idle endpoint K (ENDPOINTS).
endpoint_ip() { echo "10.97.$(($1 / 250)).$(($1 % 250 + 1))"; }

# The Pods and Namespaces; the server Pod also holds the address given
# (fresh-names: its responder's, which anti-spoofing would drop otherwise).
inventory() {
    local web_ips="[{ip: $SERVER_IP}${1:+, {ip: $1\}}]"
    cat <<INV
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
status: {podIP: $SERVER_IP, podIPs: $web_ips}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: frontend, labels: {app: client}}
spec: {nodeName: $CLIENT_NODE}
status: {podIP: $CLIENT_IP}
INV
    local k
    for ((k = 0; k < ENDPOINTS; k++)); do
        printf -- '---\napiVersion: v1\nkind: Pod\nmetadata: {name: pod-%d, namespace: backend, labels: {app: idle}}\nspec: {nodeName: bench-node}\nstatus: {podIP: %s}\n' \
            "$k" "$(endpoint_ip "$k")"
    done
}

# One ClusterNetworkPolicy on app=web: N ingress Drop rules from /32s that
# never match, then the lines given (more rules).
web_policy() {
    local n=$1 extra=${2:-} i
    cat <<EOP
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-$n}
spec:
  priority: 5
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
EOP
    for ((i = 0; i < n; i++)); do
        printf '    - {name: r%d, action: Drop, from: [{ipBlock: {cidr: 172.16.%d.%d/32}}], ports: [{protocol: TCP, port: 80}]}\n' \
            "$i" $((i / 250)) $((i % 250 + 1))
    done
    [[ -z $extra ]] || printf '%s\n' "$extra"
}

write_policies() {
    local n=$1 dir=$2
    mkdir -p "$dir"
    inventory >"$dir/inventory.yaml"
    web_policy "$n" >"$dir/bench.yaml"
}

# The policy directories of the scenarios: conn/miss/bulk at N rules
# (policies-N), dns (policies-fqdn), l7 (policies-l7), flood (policies-flood),
# fresh-names (policies-fresh).
write_scenario_policies() {
    local n
    for n in "${RULE_COUNTS[@]}" 1000; do write_policies "$n" "$WORK/policies-$n"; done

    mkdir -p "$WORK/policies-fqdn"
    inventory >"$WORK/policies-fqdn/inventory.yaml"
    web_policy 10 >"$WORK/policies-fqdn/bench.yaml"
    cat >"$WORK/policies-fqdn/fqdn.yaml" <<EOP
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-fqdn}
spec:
  priority: 4
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
    - {name: dns, action: Allow, to: [{ipBlock: {cidr: $SERVER_IP/32}}], ports: [{protocol: UDP, port: 53}]}
    - {name: names, action: Allow, to: [{fqdn: '*.bench.test'}], ports: [{protocol: TCP, port: 80}]}
EOP

    mkdir -p "$WORK/policies-fresh"
    inventory $FRESH_DNS >"$WORK/policies-fresh/inventory.yaml"
    web_policy 10 >"$WORK/policies-fresh/bench.yaml"
    cat >"$WORK/policies-fresh/fqdn.yaml" <<EOP
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-fresh}
spec:
  priority: 4
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
    - {name: dns, action: Allow, to: [{ipBlock: {cidr: $FRESH_DNS/32}}], ports: [{protocol: UDP, port: 53}]}
    - {name: names, action: Allow, to: [{fqdn: '*.fresh.test'}], ports: [{protocol: TCP, port: 80}]}
EOP

    mkdir -p "$WORK/policies-l7"
    inventory >"$WORK/policies-l7/inventory.yaml"
    cat >"$WORK/policies-l7/bench.yaml" <<'EOP'
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-l7}
spec:
  priority: 5
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
    - name: api-only
      action: Allow
      ports: [{protocol: TCP, port: 80}]
      l7Protocols: [{http: {method: GET, path: /api/*}}]
EOP

    mkdir -p "$WORK/policies-flood"
    inventory >"$WORK/policies-flood/inventory.yaml"
    web_policy 10 "    - {name: denied, action: Drop, from: [{ipBlock: {cidr: 10.98.1.0/24}}], ports: [{protocol: TCP, port: $DENIED_PORT}]}" \
        >"$WORK/policies-flood/bench.yaml"
}

# What the binary supports: the verdict cache (CACHE_MODE key|flag|empty),
# the L7 queue count (L7_QUEUES 1|empty) and anti-spoofing's allowed
# sources (ANTI_SPOOFING yes|empty), and whether it can be turned off
# (ANTI_SPOOFING_OFF yes|empty).
CACHE_MODE='' L7_QUEUES='' ANTI_SPOOFING='' ANTI_SPOOFING_OFF=''
detect_capabilities() {
    local help
    help=$("$BIN" run --help 2>&1) || true
    if grep -q 'verdictCache\.enabled' <<<"$help"; then
        CACHE_MODE=key
    elif grep -q -- '--verdict-cache' <<<"$help"; then
        CACHE_MODE=flag
    fi
    if [[ -n $CACHE_MODE ]]; then
        echo "cache: supported (measured on and off)"
    else
        echo "cache: unsupported by this binary"
    fi
    if grep -q 'l7\.queues' <<<"$help"; then
        L7_QUEUES=1
        echo "l7.queues: supported (measured at 1 and the default)"
    else
        echo "l7.queues: unsupported by this binary"
    fi
    if grep -q -- '--allowed-source-prefix' <<<"$help"; then
        ANTI_SPOOFING=yes
        echo "anti-spoofing: on, the miss scenario's sources allowed for the client"
    fi
    if grep -q -- '--anti-spoofing <on|off>' <<<"$help"; then
        ANTI_SPOOFING_OFF=yes
        echo "anti-spoofing off: measured too (-noas), to show what the guard costs"
    fi
}

# The tollgate configurations of a base name: with the cache on and off
# when supported (base-cache-on base-cache-off), else the base alone.
cache_variants() {
    if [[ -n $CACHE_MODE ]]; then echo "$1-cache-on $1-cache-off"; else echo "$1"; fi
}
# The shipped configuration of a base name: the cache on when supported.
shipped() {
    if [[ -n $CACHE_MODE ]]; then echo "$1-cache-on"; else echo "$1"; fi
}

# The shipped configuration of a base name with anti-spoofing off, when
# the binary can turn it off: a reference (no target) that shows, in the
# same run, what the raw table's per-packet guard costs.
no_anti_spoofing() {
    if [[ -n $ANTI_SPOOFING_OFF ]]; then echo "$(shipped "$1")-noas"; fi
}

# Arguments of `tollgate run` for a configuration name's suffixes.
config_args() {
    local config=$1 on
    TG_ARGS=()
    case $config in
        *-cache-on | *-cache-on-*) on=on ;;
        *-cache-off | *-cache-off-*) on=off ;;
        *) on= ;;
    esac
    if [[ -n $on ]]; then
        if [[ $CACHE_MODE == key ]]; then
            TG_ARGS+=(--set "verdictCache.enabled=$([[ $on == on ]] && echo true || echo false)")
        else
            TG_ARGS+=(--verdict-cache "$on")
        fi
    fi
    if [[ $config == *-l7q1 ]]; then TG_ARGS+=(--set l7.queues=1); fi
    if [[ $config == *-noas ]]; then TG_ARGS+=(--anti-spoofing off); fi
    # The miss scenario's client sends from 100.64.0.0/10, addresses that
    # are not its Pod address: anti-spoofing (binaries that have it) would
    # drop them as spoofed, so they are the client's allowed sources. Only
    # there: a prefix beside the Pods' /32s makes the source set's lookup
    # try two prefix lengths a packet, which no other scenario needs.
    # (`scenario` is the caller's, measure_config's.)
    if [[ $ANTI_SPOOFING == yes && ${scenario:-} == miss && $config != *-noas ]]; then
        TG_ARGS+=(--allowed-source-prefix "frontend/client=$MISS_NET")
    fi
    return 0
}

start_tollgate() {
    local dir=$1 log=$2 i
    shift 2
    # `ip netns exec` directly (not the nsx function), so `$!` is tollgate
    ip netns exec $NODE "$BIN" run --policies "$dir" --node-name bench-node \
        --node-labels kubernetes.io/os=linux --node-address 10.98.1.1 \
        --node-address 10.98.2.1 --status-socket "$WORK/status.sock" \
        --metrics-address $METRICS "$@" >/dev/null 2>"$log" &
    AGENT_PID=$!
    for i in $(seq 1 600); do
        grep -qs "ruleset applied generation=1" "$log" && return 0
        kill -0 "$AGENT_PID" 2>/dev/null || { cat "$log" >&2; die "tollgate exited"; }
        sleep 0.1
    done
    tail -n 20 "$log" >&2
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

# Busy jiffies of the whole machine so far (/proc/stat: user, nice, system,
# irq, softirq, steal; not idle or iowait).
cpu_busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
CLK_TCK=$(getconf CLK_TCK)

# µs of CPU per unit of `value` (a rate per second) over a measurement of
# DURATION seconds during which the machine was busy for `jiffies`.
cpu_per_unit() {
    local jiffies=$1 value=$2
    awk -v j="$jiffies" -v v="$value" -v d="$DURATION" -v hz="$CLK_TCK" \
        'BEGIN { if (v > 0) printf "%.1f\n", j / hz * 1e6 / (v * d); else print 0 }'
}

# Packets the node's kernel has queued to userspace so far, over every
# queue (the id sequence, column 8, of nfnetlink_queue; queues come and go
# with the agent, so only deltas within one agent's run mean anything).
queued_total() {
    nsx $NODE awk '{s += $8} END {print s + 0}' /proc/net/netfilter/nfnetlink_queue
}

# The agent's verdict cache and queue overflow counters (since its start,
# warm-up included), one line, for where the time goes.
agent_counters() {
    nsx $NODE curl -sf --max-time 2 "http://$METRICS/metrics" |
        awk '/^tollgate_[a-z_]*(cache|overflow)[a-z_]*(\{[^}]*\})? / {split($1, n, "{"); s[n[1]] += $2}
             END {line = ""; for (k in s) line = line " " substr(k, 10) "=" s[k]; if (line != "") print "   " line}' || true
}

# wrk's requests/s; its errors (non-2xx, socket errors) go to stderr.
wrk_rps() {
    local out
    out=$("$@")
    grep -E 'Non-2xx|Socket errors' <<<"$out" | sed 's/^/  wrk: /' >&2 || true
    awk '/^Requests\/sec:/ {print $2}' <<<"$out"
}

measure_conns() {
    wrk_rps nsx $CLIENT wrk -t1 -c16 -d"${DURATION}s" -H 'Connection: close' "http://$SERVER_IP/"
}

# --- one measurement per scenario: prints the value(s) of the results line

m_conn() { measure_conns; }

m_miss() {
    local first out reqs
    first=$(cat "$WORK/miss-next")
    out=$(nsx $CLIENT env LD_PRELOAD="$WORK/bindnext.so" BENCH_SRC_BASE=$MISS_BASE \
        BENCH_SRC_COUNT=$MISS_COUNT BENCH_SRC_FIRST="$first" \
        wrk -t1 -c16 -d"${DURATION}s" -H 'Connection: close' "http://$SERVER_IP/")
    grep -E 'Non-2xx|Socket errors' <<<"$out" | sed 's/^/  wrk: /' >&2 || true
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    # Connections made >= requests; leave room for the failed ones.
    echo $(((first + reqs + reqs / 10 + 1000) % MISS_COUNT)) >"$WORK/miss-next"
    awk '/^Requests\/sec:/ {print $2}' <<<"$out"
}

m_dns() {
    local p50 p99 answered lost
    read -r p50 p99 answered lost < <(nsx $CLIENT python3 "$ROOT/benches/dns_rtt.py" $SERVER_IP "$DURATION" bench.test)
    echo "  dns: $answered answered, $lost lost" >&2
    ((answered > 0)) || die "no DNS reply"
    echo "$p50 $p99"
}

# One counter of the agent's metrics (0 without an agent).
agent_metric() {
    [[ -n $AGENT_PID ]] || { echo 0; return; }
    nsx $NODE curl -sf --max-time 2 "http://$METRICS/metrics" |
        awk -v m="$1" '$1 == m {print $2; found = 1} END {if (!found) print 0}'
}

# The agent's resident memory in MiB (0 without an agent).
agent_rss() {
    [[ -n $AGENT_PID ]] || { echo 0; return; }
    awk '/^VmRSS:/ {printf "%.1f\n", $2 / 1024}' "/proc/$AGENT_PID/status"
}

m_fresh-names() {
    local rss_before rss_after learned out names p50 p99 answered lost sent m
    local -A before
    local counters=(fqdn_addresses_learned_total fqdn_write_batches_total fqdn_write_entries_total
        dns_replies_held_total dns_replies_delayed_total dns_ipset_errors_total)
    rss_before=$(agent_rss)
    for m in "${counters[@]}"; do before[$m]=$(agent_metric "tollgate_$m"); done
    out=$(nsx $CLIENT python3 "$ROOT/benches/fresh_names.py" load $FRESH_DNS "$DURATION" "$FRESH_RATE" fresh.test)
    read -r names p50 p99 answered lost sent <<<"$out"
    rss_after=$(agent_rss)
    local line="  fresh-names: $answered names answered, $lost lost, $sent names/s sent"
    if [[ -n $AGENT_PID ]]; then
        line+=";"
        for m in "${counters[@]}"; do
            line+=" ${m%_total}=+$(($(agent_metric "tollgate_$m") - ${before[$m]}))"
        done
    fi
    echo "$line" >&2
    ((answered > 0)) || die "fresh-names: no name answered"
    learned=$(($(agent_metric tollgate_fqdn_addresses_learned_total) - before[fqdn_addresses_learned_total]))
    echo "$names $p50 $p99 $(awk -v l="$learned" -v d="$DURATION" 'BEGIN {printf "%.1f", l / d}') $rss_before $rss_after"
}

m_l7() {
    wrk_rps nsx $CLIENT wrk -t2 -c16 -d"${DURATION}s" "http://$SERVER_IP/api/bench"
}

m_bulk() {
    nsx $CLIENT iperf3 -c $SERVER_IP -t "$DURATION" -J |
        python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
}

m_flood() {
    local before after sent rate
    if ((FLOOD_PPS == 0)); then rate=(--flood); else rate=(-i "u$((1000000 / FLOOD_PPS))"); fi
    before=$(queued_total)
    nsx $CLIENT timeout -s INT "$DURATION" hping3 -q -S -p $DENIED_PORT "${rate[@]}" \
        $SERVER_IP >"$WORK/hping.log" 2>&1 || true
    after=$(queued_total)
    sent=$(awk '/packets transmitted/ {print $1}' "$WORK/hping.log")
    [[ -n $sent ]] || { cat "$WORK/hping.log" >&2; die "hping3 printed no count"; }
    echo "$sent $((after - before))"
}

# --- checks that a scenario measures what it says (once, before its rounds)

check_miss_sources() {
    local first stats
    first=$(cat "$WORK/miss-next")
    nsx $CLIENT env LD_PRELOAD="$WORK/bindnext.so" BENCH_SRC_BASE=$MISS_BASE \
        BENCH_SRC_COUNT=$MISS_COUNT BENCH_SRC_FIRST="$first" \
        wrk -t1 -c16 -d1s -H 'Connection: close' "http://$SERVER_IP/" >/dev/null
    echo $(((first + 100000) % MISS_COUNT)) >"$WORK/miss-next"
    # The server closes first ('Connection: close'): its TIME-WAIT peers
    # are the sources it saw.
    stats=$(nsx $SERVER ss -Htn state time-wait '( sport = :80 )' |
        awk '{split($4, a, /[.:]/); if (a[1] == 100 && a[2] >= 64 && a[2] < 128) {n++; seen[a[1] "." a[2] "." a[3] "." a[4]] = 1}}
             END {d = 0; for (k in seen) d++; print n + 0, d}')
    read -r total distinct <<<"$stats"
    echo "miss: the server saw $distinct distinct sources in $total connections from $MISS_NET"
    ((total > 0 && distinct == total)) || die "miss: sources do not vary ($distinct distinct of $total)"
}

check_l7() {
    local ok denied
    ok=$(nsx $CLIENT curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "http://$SERVER_IP/api/x" || true)
    denied=$(nsx $CLIENT curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "http://$SERVER_IP/admin" || true)
    [[ $ok == 200 && $denied == 403 ]] || die "l7: expected 200 for /api/x and 403 for /admin, got $ok and $denied"
}

check_dns_learned() {
    # The FQDN policy is in force: a lookup through the node is answered and
    # passes the agent (its queues' id sequences move).
    local before after
    before=$(queued_total)
    nsx $CLIENT dig +short +time=2 +tries=1 @$SERVER_IP check.bench.test | grep -qx 10.97.0.5 ||
        die "dns: no answer through tollgate"
    after=$(queued_total)
    ((after > before)) || die "dns: the lookup did not reach the agent"
}

check_fresh_learned() {
    # A fresh name's reply is learned: the agent counts a learned address.
    local answer
    answer=$(nsx $CLIENT dig +time=2 +tries=1 @$FRESH_DNS check.fresh.test 2>&1 || true)
    grep -q $'IN\tA\t240\.' <<<"$answer" ||
        die "fresh-names: no answer through tollgate: $answer$(tail -5 "$WORK/tollgate.log")"
    (($(agent_metric tollgate_fqdn_addresses_learned_total) > 0)) || die "fresh-names: the reply was not learned"
}

# --- scenarios

configs_of() {
    local scenario=$1 n
    case $scenario in
        conn)
            echo none
            echo conntrack
            for n in "${RULE_COUNTS[@]}"; do cache_variants "tollgate-$n"; done
            no_anti_spoofing "tollgate-${RULE_COUNTS[0]}"
            for n in "${RULE_COUNTS[@]}"; do echo "iptables-$n"; done
            ;;
        miss)
            echo none
            echo conntrack
            for n in "${RULE_COUNTS[@]}"; do cache_variants "tollgate-$n"; done
            no_anti_spoofing "tollgate-${RULE_COUNTS[0]}"
            ;;
        dns) echo none; echo conntrack; shipped tollgate-fqdn ;;
        l7)
            echo none; shipped tollgate-l7
            [[ -z $L7_QUEUES ]] || echo "$(shipped tollgate-l7)-l7q1"
            ;;
        bulk) echo none; echo conntrack; shipped tollgate-1000; no_anti_spoofing tollgate-1000 ;;
        flood) cache_variants tollgate-flood ;;
        fresh-names) echo none; echo conntrack; shipped tollgate-fresh ;;
    esac
}

policy_dir_of() {
    local config=$1 base
    base=${config#tollgate-}
    base=${base%%-*}
    echo "$WORK/policies-$base"
}

# An unrecorded WARMUP-second run of the scenario's load (not for the
# flood, whose first SYNs are part of what it counts): a just started agent
# or server is not measured.
warm_up() {
    local scenario=$1
    if ((WARMUP > 0)) && [[ $scenario != flood ]]; then
        DURATION=$WARMUP "m_$scenario" >/dev/null 2>&1 || true
    fi
}

# Runs one measurement of `scenario`, prints its value(s), and leaves the
# machine's CPU µs per connection or request meanwhile in $WORK/cpu (empty
# for the scenarios whose value is not a rate of connections or requests).
timed() {
    local scenario=$1 busy value perf_pid=
    if [[ -n $PERF ]]; then
        local n=0
        while [[ -e $PERF/$scenario-$CONFIG-$n.data ]]; do n=$((n + 1)); done
        perf record -a -g -F 499 -q -o "$PERF/$scenario-$CONFIG-$n.data" 2>/dev/null &
        perf_pid=$!
    fi
    busy=$(cpu_busy)
    value=$("m_$scenario")
    busy=$(($(cpu_busy) - busy))
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
    fi
    case $scenario in
        conn | miss | l7 | fresh-names) cpu_per_unit "$busy" "${value%% *}" >"$WORK/cpu" ;;
        *) : >"$WORK/cpu" ;;
    esac
    echo "$value"
}

# Measures one configuration once; prints the value(s).
measure_config() {
    local scenario=$1 config=$2 value before after
    CONFIG=$config # the profile's name (PERF)
    # Each measurement starts from an empty connection table on the node:
    # the miss scenario alone leaves ~150,000 entries (10 s at 15,000/s)
    # in TIME_WAIT for 2 minutes, and a full table drops new connections.
    nsx $NODE conntrack -F >/dev/null 2>&1 || true
    case $config in
        none) warm_up "$scenario"; timed "$scenario" ;;
        conntrack | iptables-*)
            if [[ $config == conntrack ]]; then load_iptables 0; else load_iptables "${config#iptables-}"; fi
            warm_up "$scenario"
            timed "$scenario"
            flush_iptables
            ;;
        tollgate-*)
            config_args "$config"
            start_tollgate "$(policy_dir_of "$config")" "$WORK/tollgate.log" "${TG_ARGS[@]}"
            case $scenario in
                l7) check_l7 ;;
                dns) check_dns_learned ;;
                fresh-names) check_fresh_learned ;;
            esac
            warm_up "$scenario"
            before=$(queued_total)
            value=$(timed "$scenario")
            after=$(queued_total)
            echo "  $config: $((after - before)) packets queued to userspace" >&2
            agent_counters >&2
            echo $((after - before)) >"$WORK/queued"
            stop_tollgate
            echo "$value"
            ;;
    esac
}

run_scenario() {
    local scenario=$1 r config value
    local -a configs
    read -r -a configs <<<"$(configs_of "$scenario" | tr ' ' '\n' | grep -E "^(${CONFIGS:-.*})\$" | tr '\n' ' ')"
    ((${#configs[@]} > 0)) || die "CONFIGS='$CONFIGS' matches no configuration of $scenario"
    echo "== $scenario: ${configs[*]} ($ROUNDS rounds of ${DURATION}s)" >&2
    [[ $scenario != miss ]] || check_miss_sources
    local n=${#configs[@]} k
    for ((r = 1; r <= ROUNDS; r++)); do
        # Each round starts one configuration later than the one before,
        # so no configuration always runs first or last in a round.
        for ((k = 0; k < n; k++)); do
            config=${configs[$(((k + r - 1) % n))]}
            value=$(measure_config "$scenario" "$config")
            [[ -n $value ]] || die "$scenario $config: no value"
            echo "  round $r $config: $value" >&2
            echo "$scenario $r $config $value" >>"$RESULTS"
            if [[ -s $WORK/cpu ]]; then
                echo "cpu:$scenario $r $config $(cat "$WORK/cpu")" >>"$RESULTS"
            fi
            if [[ $config == tollgate-* ]]; then
                echo "queued:$scenario $r $config $(cat "$WORK/queued")" >>"$RESULTS"
            fi
        done
    done
}

# Interleaved rounds of none / base / new at one rule count (A/B mode).
compare_builds() {
    local rounds=${ROUNDS:-5} n=${RULES:-1000} r
    local -a none base new cpu_none cpu_base cpu_new
    write_policies "$n" "$WORK/policies-ab"
    # conn/s of one measurement; the machine's CPU µs per connection in $WORK/cpu.
    measure_with() {
        if [[ $1 != none ]]; then
            BIN=$1
            start_tollgate "$WORK/policies-ab" "$WORK/tollgate-ab.log"
        fi
        timed conn
        if [[ $1 != none ]]; then stop_tollgate; fi
    }
    for ((r = 1; r <= rounds; r++)); do
        none+=("$(measure_with none)")
        cpu_none+=("$(cat "$WORK/cpu")")
        base+=("$(measure_with "$TOLLGATE_BASE")")
        cpu_base+=("$(cat "$WORK/cpu")")
        new+=("$(measure_with "$NEW_BIN")")
        cpu_new+=("$(cat "$WORK/cpu")")
        echo "round $r: none ${none[-1]} base ${base[-1]} new ${new[-1]} conn/s;" \
            "CPU µs/conn ${cpu_none[-1]} ${cpu_base[-1]} ${cpu_new[-1]}" >&2
    done
    python3 - "$n" "$DURATION" "${none[*]}" "${base[*]}" "${new[*]}" \
        "${cpu_none[*]}" "${cpu_base[*]}" "${cpu_new[*]}" <<'PY'
import statistics, sys
n, duration = sys.argv[1], sys.argv[2]
names = ("none", "base", "new")
rows = {k: [float(x) for x in v.split()] for k, v in zip(names, sys.argv[3:6])}
cpu = {k: [float(x) for x in v.split()] for k, v in zip(names, sys.argv[6:9])}
ref = statistics.median(rows["none"])
print(f"\n{n} rules, {len(rows['none'])} interleaved rounds of {duration}s, conn/s (ratio to the median of none), CPU µs per connection")
for k, v in rows.items():
    m = statistics.median(v)
    print(f"{k:5} median {m:9.0f} ({m / ref:.3f})  cpu {statistics.median(cpu[k]):6.1f} µs   rounds: " + " ".join(f"{x:.0f}" for x in v))
print(f"new/base, median of the per-round ratios: {statistics.median(b / a for a, b in zip(rows['base'], rows['new'])):.3f}")
for k in ("base", "new"):
    print(f"{k} CPU µs per connection above none, median of the per-round differences: "
          f"{statistics.median(c - z for c, z in zip(cpu[k], cpu['none'])):.1f}")
PY
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

echo "tollgate: $BIN"
detect_capabilities
build_shim
write_scenario_policies
RESULTS=$ROOT/target/e2e-results.txt
mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"
for scenario in "${SCENARIO_LIST[@]}"; do run_scenario "$scenario"; done

python3 "$ROOT/benches/e2e_summary.py" "$RESULTS"
echo "(${ROUNDS} interleaved rounds of ${DURATION}s per scenario; kernel $(uname -r); $(nproc) CPUs; results in $RESULTS)"
