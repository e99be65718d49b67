#!/usr/bin/env bash
# tollgate demo lab: network namespaces on one machine, tollgate enforcing
# rules/ on the "node" namespace.
#
#   scripts/lab.sh up      build the lab, start servers and tollgate (root)
#   scripts/lab.sh demo    run a few probes and print ALLOWED / DENIED
#   scripts/lab.sh down    remove everything (also after a crash)
#   scripts/lab.sh status  list namespaces, tollgate's log tail, its chains
#   scripts/lab.sh observe the audit log's last lines, a few metrics and
#                          `tollgate status` (the agent runs with the audit
#                          log $STATE/np.log, metrics on 127.0.0.1:9090 in
#                          tg-node and the status socket $STATE/tollgate.sock)
#
# Topology (all addresses inside 10.99.0.0/16 and fd00:99::/32; nothing is
# configured in the root namespace):
#
#   tg-client1  eth0 10.99.1.2/24 fd00:99:1::2/64 ── n-client1 10.99.1.1 ┐
#   tg-client2  eth0 10.99.2.2/24 fd00:99:2::2/64 ── n-client2 10.99.2.1 ├─ tg-node
#   tg-server   eth0 10.99.3.2/24 fd00:99:3::2/64 ── n-server  10.99.3.1 │  (router + host,
#   tg-dns      eth0 10.99.4.2/24 fd00:99:4::2/64 ── n-dns     10.99.4.1 ┘   tollgate runs here)
#
# Inventory the lab assumes rules/inventory.yaml declares (rules/README-lab.md
# is the reference the example rules follow):
#   Node       tg-node, labels kubernetes.io/os=linux, role=lab-node
#              (also given on the command line), addresses 10.99.{1,2,3,4}.1
#   Namespace  frontend (env=prod), untrusted (env=dev,
#              egress=open), backend (env=prod),
#              infra (env=infra)
#   Pod        frontend/client1  app=client   10.99.1.2
#   Pod        untrusted/client2 app=client   10.99.2.2
#   Pod        backend/web       app=web      10.99.3.2  ports http=80, echo=8080
#   Pod        infra/dns         app=dns      10.99.4.2  port dns=53 (UDP+TCP)
# Services: tg-server runs an HTTP server on 80 and a TCP echo-ish server
# (nc) on 8080; tg-node runs an HTTP server on 8080 (a "host service") and
# accepts TCP 22 (nc) to play the SSH port; tg-dns runs dnsmasq answering
# web.lab.test -> 10.99.3.2, www.allowed.test -> 10.99.3.10 and
# www.blocked.test -> 10.99.3.20 (two extra addresses on tg-server that are
# not Pods: "sites outside the cluster"), TTL 60 s, when dnsmasq is
# installed. Clients resolve through tg-dns (/etc/netns/<ns>/resolv.conf).
#
# The script installs nothing: it checks for the tools and says what to
# install. tollgate is taken from $TOLLGATE, else target/dist/tollgate, target/release/tollgate,
# else target/debug/tollgate (run `cargo build` first).
set -euo pipefail

NS_NODE=tg-node
PEERS=(tg-client1 tg-client2 tg-server tg-dns)
STATE=/run/tollgate-lab
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RULES=${RULES:-$ROOT/rules}

die() { echo "lab.sh: $*" >&2; exit 1; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

need_tools() {
    local missing=()
    for t in ip iptables ip6tables ipset ss curl nc ping python3; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    if ((${#missing[@]})); then
        die "missing tools: ${missing[*]} (Debian: apt-get install iproute2 iptables ipset curl netcat-openbsd iputils-ping python3 dnsmasq-base)"
    fi
    [[ $(id -u) -eq 0 ]] || die "must run as root"
}

tollgate_bin() {
    local candidate
    for candidate in "${TOLLGATE:-}" "$ROOT/target/dist/tollgate" "$ROOT/target/release/tollgate" "$ROOT/target/debug/tollgate"; do
        if [[ -n $candidate && -x $candidate ]]; then
            echo "$candidate"
            return
        fi
    done
    die "no tollgate binary: run 'cargo build' or set TOLLGATE=/path/to/tollgate"
}

# link index of a peer namespace (1-based position in PEERS)
link_of() {
    local i
    for i in "${!PEERS[@]}"; do
        [[ ${PEERS[$i]} == "$1" ]] && { echo $((i + 1)); return; }
    done
    die "unknown namespace $1"
}

ns_exists() { [[ -e /run/netns/$1 ]]; }

# start a background process inside a namespace, remembering its pid
spawn() {
    local ns=$1 name=$2; shift 2
    mkdir -p "$STATE"
    # not the nsx function: `$!` must be the process itself, not a subshell
    ip netns exec "$ns" "$@" >"$STATE/$name.log" 2>&1 &
    echo $! >"$STATE/$name.pid"
}

wait_listening() {
    local ns=$1 proto=$2 port=$3 i
    for i in $(seq 1 100); do
        if nsx "$ns" ss -Hl"${proto}"n "sport = :$port" | grep -q .; then
            return 0
        fi
        sleep 0.05
    done
    die "nothing listens on $proto/$port in $ns"
}

up() {
    need_tools
    local bin
    bin=$(tollgate_bin)
    [[ -d $RULES ]] || die "no rules directory at $RULES"
    if ns_exists "$NS_NODE"; then
        die "lab already up (run '$0 down' first)"
    fi
    mkdir -p "$STATE"
    echo "$RULES" >"$STATE/rules-dir"

    ip netns add "$NS_NODE"
    nsx "$NS_NODE" ip link set lo up
    nsx "$NS_NODE" sysctl -qw net.ipv4.ip_forward=1
    nsx "$NS_NODE" sysctl -qw net.ipv6.conf.all.forwarding=1
    local ns k short
    for ns in "${PEERS[@]}"; do
        k=$(link_of "$ns")
        short=${ns#tg-}
        ip netns add "$ns"
        nsx "$ns" ip link set lo up
        nsx "$NS_NODE" ip link add "n-$short" type veth peer name eth0 netns "$ns"
        nsx "$NS_NODE" ip addr add "10.99.$k.1/24" dev "n-$short"
        nsx "$NS_NODE" ip addr add "fd00:99:$k::1/64" dev "n-$short" nodad
        nsx "$NS_NODE" ip link set "n-$short" up
        nsx "$ns" ip addr add "10.99.$k.2/24" dev eth0
        nsx "$ns" ip addr add "fd00:99:$k::2/64" dev eth0 nodad
        nsx "$ns" ip link set eth0 up
        nsx "$ns" ip route add default via "10.99.$k.1"
        nsx "$ns" ip -6 route add default via "fd00:99:$k::1"
        mkdir -p "/etc/netns/$ns"
        echo "nameserver 10.99.4.2" >"/etc/netns/$ns/resolv.conf"
    done
    # Two "external" sites on the server namespace, outside the inventory:
    # FQDN rules can only tell names apart when their addresses differ.
    nsx tg-server ip addr add 10.99.3.10/24 dev eth0
    nsx tg-server ip addr add 10.99.3.20/24 dev eth0
    mkdir -p "/etc/netns/$NS_NODE"
    echo "nameserver 10.99.4.2" >"/etc/netns/$NS_NODE/resolv.conf"

    # Servers first: they must listen before tollgate queues the first packets.
    mkdir -p "$STATE/www"
    echo "hello from web" >"$STATE/www/index.html"
    spawn tg-server web-http python3 -m http.server 80 --bind :: --directory "$STATE/www"
    spawn tg-server web-echo nc -lk 8080
    spawn "$NS_NODE" node-http python3 -m http.server 8080 --bind :: --directory "$STATE/www"
    spawn "$NS_NODE" node-ssh nc -lk 22
    if command -v dnsmasq >/dev/null 2>&1; then
        spawn tg-dns dns dnsmasq --keep-in-foreground --no-resolv --no-hosts \
            --listen-address=10.99.4.2 --bind-interfaces --log-queries \
            --local-ttl=60 --address=/web.lab.test/10.99.3.2 \
            --host-record=www.allowed.test,10.99.3.10 \
            --host-record=www.blocked.test,10.99.3.20 --pid-file="$STATE/dnsmasq.pidfile"
        wait_listening tg-dns u 53
    else
        echo "lab.sh: dnsmasq not installed: tg-dns has no DNS server (FQDN demos disabled)" >&2
    fi
    wait_listening tg-server t 80
    wait_listening tg-server t 8080
    wait_listening "$NS_NODE" t 8080
    wait_listening "$NS_NODE" t 22

    local addrs=()
    for k in 1 2 3 4; do addrs+=(--node-address "10.99.$k.1" --node-address "fd00:99:$k::1"); done
    spawn "$NS_NODE" tollgate "$bin" run --policies "$RULES" --node-name tg-node \
        --node-labels kubernetes.io/os=linux,role=lab-node "${addrs[@]}" \
        --privileged 10.99.1.0/24,tcp/22 --audit-log "$STATE/np.log" \
        --allowed-source-prefix backend/web=10.99.3.10/32 \
        --allowed-source-prefix backend/web=10.99.3.20/32 \
        --metrics-address 127.0.0.1:9090 --status-socket "$STATE/tollgate.sock"
    local i
    for i in $(seq 1 300); do
        grep -q "ruleset applied generation=" "$STATE/tollgate.log" 2>/dev/null && break
        if ! kill -0 "$(cat "$STATE/tollgate.pid")" 2>/dev/null; then
            cat "$STATE/tollgate.log" >&2
            die "tollgate exited; the lab stays up for inspection ('$0 down' removes it)"
        fi
        sleep 0.1
    done
    grep "ruleset applied generation=" "$STATE/tollgate.log" >/dev/null ||
        die "tollgate did not apply a ruleset within 30 s; see $STATE/tollgate.log"
    echo "lab up: tollgate pid $(cat "$STATE/tollgate.pid"), log $STATE/tollgate.log"
}

down() {
    # Terminate tollgate politely first (its chains stay in the kernel until
    # the namespaces are deleted below).
    if [[ -f $STATE/tollgate.pid ]]; then
        local pid i
        pid=$(cat "$STATE/tollgate.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
    fi
    local ns pid
    for ns in "$NS_NODE" "${PEERS[@]}"; do
        if ns_exists "$ns"; then
            # Everything inside a lab namespace was started by this script.
            for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns delete "$ns"
        fi
        rm -rf "/etc/netns/$ns"
    done
    rm -rf "$STATE"
    echo "lab down"
}

# outcome LABEL COMMAND...: runs the probe and prints ALLOWED or DENIED
outcome() {
    local label=$1; shift
    if "$@" >/dev/null 2>&1; then
        printf '  %-58s ALLOWED\n' "$label"
    else
        printf '  %-58s DENIED\n' "$label"
    fi
}

demo() {
    ns_exists "$NS_NODE" || die "lab is not up (run '$0 up')"
    echo "tollgate lab demo (rules from $(cat "$STATE/rules-dir" 2>/dev/null || echo "$RULES"))"
    echo "pods:"
    outcome "client1 -> web    HTTP GET http://10.99.3.2/" nsx tg-client1 curl -fsS --max-time 2 http://10.99.3.2/
    outcome "client2 -> web    HTTP GET http://10.99.3.2/" nsx tg-client2 curl -fsS --max-time 2 http://10.99.3.2/
    outcome "client1 -> web    TCP 8080" nsx tg-client1 nc -z -w 2 10.99.3.2 8080
    outcome "client2 -> web    TCP 8080" nsx tg-client2 nc -z -w 2 10.99.3.2 8080
    outcome "client1 -> web    ping" nsx tg-client1 ping -c 1 -W 2 10.99.3.2
    outcome "client1 -> web    HTTP over IPv6" nsx tg-client1 curl -fsS --max-time 2 "http://[fd00:99:3::2]/"
    echo "L7 (rules/l7-http.yaml: GET/HEAD anywhere, any method to foo.bar.com/api/v2/*):"
    outcome "client1 -> web    HTTP POST / (403 Forbidden)" nsx tg-client1 curl -fsS --max-time 2 -X POST http://10.99.3.2/
    printf '    %s\n' "$(nsx tg-client1 curl -sS --max-time 2 -X POST http://10.99.3.2/ 2>&1 | head -n 1)"
    # python's http.server answers 501 to a POST that reaches it.
    outcome "client1 -> web    HTTP POST foo.bar.com/api/v2/items" nsx tg-client1 \
        sh -c "curl -sS --max-time 2 -o /dev/null -w '%{http_code}' -X POST -H 'Host: foo.bar.com' http://10.99.3.2/api/v2/items | grep -qx 501"
    echo "node:"
    outcome "client1 -> node   TCP 22 (its egress allows the Node)" nsx tg-client1 nc -z -w 2 10.99.1.1 22
    outcome "client2 -> node   TCP 22" nsx tg-client2 nc -z -w 2 10.99.2.1 22
    outcome "client1 -> node   HTTP :8080" nsx tg-client1 curl -fsS --max-time 2 http://10.99.1.1:8080/
    outcome "client2 -> node   HTTP :8080" nsx tg-client2 curl -fsS --max-time 2 http://10.99.2.1:8080/
    outcome "client1 -> node   ping" nsx tg-client1 ping -c 1 -W 2 10.99.1.1
    if [[ -f $STATE/dns.pid ]]; then
        echo "names (via tg-dns):"
        outcome "client1 -> web.lab.test HTTP" nsx tg-client1 curl -fsS --max-time 2 http://web.lab.test/
        outcome "client1 -> www.allowed.test HTTP" nsx tg-client1 curl -fsS --max-time 2 http://www.allowed.test/
        outcome "client1 -> www.blocked.test HTTP" nsx tg-client1 curl -fsS --max-time 2 http://www.blocked.test/
        outcome "client1 -> 10.99.3.20 HTTP (no lookup)" nsx tg-client1 curl -fsS --max-time 2 http://10.99.3.20/
        echo "learned from DNS answers (tollgate get fqdn):"
        nsx "$NS_NODE" "$(tollgate_bin)" get fqdn --socket "$STATE/tollgate.sock" \
            --policies "$(cat "$STATE/rules-dir" 2>/dev/null || echo "$RULES")" 2>&1 | sed 's/^/  /' || true
    fi
    echo "queues (node namespace):"
    nsx "$NS_NODE" cat /proc/net/netfilter/nfnetlink_queue 2>/dev/null | sed 's/^/  /' || true
}

# What the agent reports about the probes: the audit log (rules with
# enableLogging), its metrics and its status summary.
observe() {
    ns_exists "$NS_NODE" || die "lab is not up (run '$0 up')"
    echo "== audit log ($STATE/np.log, last lines)"
    tail -n 3 "$STATE/np.log" 2>/dev/null || echo "  (empty: no logged rule matched yet)"
    echo "== metrics (ip netns exec $NS_NODE curl http://127.0.0.1:9090/metrics)"
    nsx "$NS_NODE" curl -fsS --max-time 2 http://127.0.0.1:9090/metrics |
        grep -E '^tollgate_(verdicts_total|rule_hits_total|policies|enforced_endpoints)' |
        grep -v ' 0$' | head -n 8 || true
    echo "== status ($(tollgate_bin) status --socket $STATE/tollgate.sock, the summary)"
    "$(tollgate_bin)" status --socket "$STATE/tollgate.sock" | sed '/^METRIC/,$d' || true
}

status() {
    ip netns list | grep -E '^tg-' || echo "no lab namespaces"
    if [[ -f $STATE/tollgate.log ]]; then
        echo "--- tollgate log (tail)"
        tail -n 20 "$STATE/tollgate.log"
    fi
    if ns_exists "$NS_NODE"; then
        echo "--- tollgate chains in $NS_NODE"
        nsx "$NS_NODE" iptables-save | grep -E '^(:TOLLGATE|-A [A-Z]+ .*TOLLGATE)' || true
        nsx "$NS_NODE" ipset list -n | grep '^tollgate-' || true
    fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    demo) demo ;;
    observe) observe ;;
    status) status ;;
    *) echo "usage: $0 up|demo|observe|down|status" >&2; exit 2 ;;
esac
