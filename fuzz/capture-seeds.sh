#!/usr/bin/env bash
# Records real traffic in two network namespaces of its own (a veth pair,
# 10.231.0.0/24 and fd31:231::/64) and turns it into fuzz seeds:
#   seeds/packet_flow/  raw IP packets (DNS, HTTP, ICMP, ICMPv6/ND/MLD, IGMP, UDP)
#   seeds/dns_learn/    8 control bytes + each DNS reply (UDP payloads, TCP-framed ones)
#   seeds/http_stream/  8 control bytes + each client byte stream sent to port 80
#   seeds/nfqueue_msg/  NFQUEUE netlink messages the kernel sent about the
#                       same traffic, queued in the server namespace
#                       (nfqueue-seeds.py)
# Needs root, iproute2, iptables, tcpdump, dnsmasq, dig, curl, nc, python3.
# Touches nothing outside its namespaces; removes them on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
[[ $(id -u) -eq 0 ]] || { echo "capture-seeds.sh: needs root" >&2; exit 1; }

CLI="tgfz-c-$$"
SRV="tgfz-s-$$"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    ip netns del "$CLI" 2>/dev/null || true
    ip netns del "$SRV" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Waits (bounded) until a command succeeds.
wait_for() {
    local deadline=$((SECONDS + 10))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { echo "capture-seeds.sh: timed out: $*" >&2; exit 1; }
        sleep 0.1
    done
}

ip netns add "$CLI"
ip netns add "$SRV"
ip link add tgfz-c$$ netns "$CLI" type veth peer name tgfz-s$$ netns "$SRV"
ip -n "$CLI" link set lo up
ip -n "$SRV" link set lo up
ip -n "$CLI" addr add 10.231.0.1/24 dev tgfz-c$$
ip -n "$SRV" addr add 10.231.0.2/24 dev tgfz-s$$
ip -n "$CLI" addr add fd31:231::1/64 dev tgfz-c$$ nodad
ip -n "$SRV" addr add fd31:231::2/64 dev tgfz-s$$ nodad

ip -n "$CLI" link set tgfz-c$$ up
ip -n "$SRV" link set tgfz-s$$ up
ip netns exec "$CLI" tcpdump -i tgfz-c$$ -U -s 0 -w "$WORK/cap.pcap" 2>"$WORK/tcpdump.log" &
PIDS+=($!)
wait_for grep -q "listening on" "$WORK/tcpdump.log"
# Every packet the server namespace receives goes to queue 0, every packet
# it sends to queue 1 (bypassed while no reader is bound).
for tables in iptables ip6tables; do
    ip netns exec "$SRV" "$tables" -A INPUT -j NFQUEUE --queue-num 0 --queue-bypass
    ip netns exec "$SRV" "$tables" -A OUTPUT -j NFQUEUE --queue-num 1 --queue-bypass
done
ip netns exec "$SRV" python3 nfqueue-seeds.py seeds/nfqueue_msg "$WORK/nfqueue.ready" &
PIDS+=($!)
wait_for test -e "$WORK/nfqueue.ready"

ip netns exec "$SRV" dnsmasq --no-daemon --no-resolv --no-hosts --bind-interfaces \
    --listen-address=10.231.0.2 --listen-address=fd31:231::2 --port=53 \
    --address=/allowed.example/10.231.0.80 --address=/allowed.example/fd31:231::80 \
    --host-record=edge.cdn.example,10.231.0.81,fd31:231::81 \
    --host-record=edge.cdn.example,10.231.0.82 \
    --cname=www.cdn.example,edge.cdn.example --log-facility=- 2>"$WORK/dnsmasq.log" &
PIDS+=($!)
mkdir -p "$WORK/www/api/v2"
echo ok >"$WORK/www/api/v2/items"
head -c 300000 /dev/zero >"$WORK/www/large"  # GSO packets on queue 1
(cd "$WORK/www" && exec ip netns exec "$SRV" python3 -m http.server 80 --bind :: >/dev/null 2>&1) &
PIDS+=($!)
wait_for ip netns exec "$CLI" dig +short +time=1 +tries=1 @10.231.0.2 allowed.example
wait_for ip netns exec "$CLI" curl -sf -m 1 http://10.231.0.2/api/v2/items

in_cli() { ip netns exec "$CLI" "$@" >/dev/null 2>&1 || true; }
for server in 10.231.0.2 fd31:231::2; do
    for name in allowed.example www.cdn.example nope.example; do
        in_cli dig +time=1 +tries=1 @"$server" "$name" A
        in_cli dig +time=1 +tries=1 @"$server" "$name" AAAA
    done
    in_cli dig +tcp +time=1 +tries=1 @"$server" www.cdn.example A
    in_cli dig +tcp +time=1 +tries=1 @"$server" allowed.example AAAA
done
for base in http://10.231.0.2 "http://[fd31:231::2]"; do
    in_cli curl -s -m 2 "$base/api/v2/items?x=1"
    in_cli curl -s -m 2 -I --path-as-is "$base/api/v2/../v2/./items"
    in_cli curl -s -m 2 -d 'a=1&b=2' "$base/api/v2/items"
    in_cli curl -s -m 2 -H 'Transfer-Encoding: chunked' -d 'chunked body' "$base/api/v2/items"
    in_cli curl -s -m 5 -o /dev/null "$base/large"
done
printf 'GET /api/v2/items HTTP/1.1\r\nHost: 10.231.0.2\r\n\r\nGET /admin HTTP/1.1\r\nHost: 10.231.0.2\r\nConnection: close\r\n\r\n' |
    ip netns exec "$CLI" nc -q 1 -w 2 10.231.0.2 80 >/dev/null 2>&1 || true
in_cli ping -c 1 -W 1 10.231.0.2
in_cli ping -6 -c 1 -W 1 fd31:231::2
in_cli sh -c 'echo hi | nc -u -w 1 10.231.0.2 9999'
in_cli sh -c 'echo hi | nc -u -w 1 fd31:231::2 9999'
in_cli nc -z -w 1 10.231.0.2 81
in_cli python3 -c '
import socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton("239.1.2.3"), socket.inet_aton("10.231.0.1")))
time.sleep(0.3)
s.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton("239.1.2.3"), socket.inet_aton("10.231.0.1")))
time.sleep(0.3)'
sleep 0.5  # let tcpdump flush the last packets (-U writes per packet)
kill "${PIDS[0]}"
wait "${PIDS[0]}" 2>/dev/null || true

python3 - "$WORK/cap.pcap" <<'PY'
import hashlib, os, struct, sys
from collections import defaultdict

data = open(sys.argv[1], "rb").read()
assert struct.unpack("<I", data[:4])[0] == 0xA1B2C3D4, "pcap byte order"
linktype = struct.unpack("<I", data[20:24])[0]
assert linktype == 1, "ethernet capture expected"
packets, at = [], 24
while at + 16 <= len(data):
    _, _, incl, _ = struct.unpack("<IIII", data[at:at + 16])
    frame = data[at + 16:at + 16 + incl]
    at += 16 + incl
    if frame[12:14] in (b"\x08\x00", b"\x86\xdd"):
        packets.append(frame[14:])

def transport(ip):
    if ip[0] >> 4 == 4:
        hl = (ip[0] & 15) * 4
        return ip[9], ip[12:16], ip[16:20], ip[hl:struct.unpack("!H", ip[2:4])[0]]
    return ip[6], ip[8:24], ip[24:40], ip[40:40 + struct.unpack("!H", ip[4:6])[0]]

def write(directory, body):
    os.makedirs(directory, exist_ok=True)
    name = hashlib.sha1(body).hexdigest()[:16]
    with open(os.path.join(directory, "cap-" + name), "wb") as f:
        f.write(body)

kinds = defaultdict(int)
streams = defaultdict(bytes)
for ip in packets:
    proto, src, dst, seg = transport(ip)
    kind = (ip[0] >> 4, proto, len(ip) // 64)
    if kinds[kind] < 3:
        kinds[kind] += 1
        write("seeds/packet_flow", ip)
    if proto == 17 and seg[:2] == b"\x00\x35":
        write("seeds/dns_learn", bytes(8) + seg[8:])
    if proto == 6:
        off = (seg[12] >> 4) * 4
        sport, dport = struct.unpack("!HH", seg[:4])
        payload = seg[off:]
        if payload and sport == 53:
            streams[("dns", src, dst, dport)] += payload
        if payload and dport == 80:
            streams[("http", src, dst, sport)] += payload
for key, stream in streams.items():
    if key[0] == "http":
        write("seeds/http_stream", bytes(8) + stream)
    else:
        at = 0
        while at + 2 <= len(stream):
            n = struct.unpack("!H", stream[at:at + 2])[0]
            write("seeds/dns_learn", bytes(8) + stream[at + 2:at + 2 + n])
            at += 2 + n
        write("seeds/dns_learn", b"\x02" + bytes(7) + stream[2:2 + struct.unpack("!H", stream[:2])[0]])
print(f"capture-seeds.sh: {len(packets)} packets captured", file=sys.stderr)
PY
