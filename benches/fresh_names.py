#!/usr/bin/env python3
"""Fresh-names load of benches/e2e.sh: a DNS responder and a paced client.

  fresh_names.py serve ADDRESS
  fresh_names.py load SERVER SECONDS RATE DOMAIN

`serve` answers every A query with 4 A records and every AAAA query with 4
AAAA records, each address never given before (A from 240.0.0.0/4, AAAA
from fd42::/64, a counter), TTL 300, on UDP ADDRESS:53, until killed.

`load` looks up RATE distinct never-seen names a second (<run>-<n>.DOMAIN)
for SECONDS, open loop: name n's A and AAAA queries are sent at
start + n / RATE, each on the next of 256 UDP sockets (one flow each, as
a busy Pod's resolver), whether earlier names were answered or not. A
name is answered when both replies are in; its latency is from the send
to the second reply (monotonic clock). A name not answered within 1 s is
lost. Prints one line:

  <answered names/s> <p50 µs> <p99 µs> <answered> <lost> <sent names/s>

The client's own overhead (Python, the socket calls) is in every figure;
e2e.sh compares with the no-firewall run of the same round.
"""

import os
import selectors
import socket
import struct
import sys
import time

SOCKETS = 256
LOST_AFTER = 1.0


def serve(address):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))
    counter = 0
    while True:
        packet, peer = sock.recvfrom(512)
        if len(packet) < 17:
            continue
        ident = packet[:2]
        end = packet.find(b"\0", 12)
        if end < 0 or len(packet) < end + 5:
            continue
        question = packet[12 : end + 5]
        qtype = struct.unpack(">H", packet[end + 1 : end + 3])[0]
        if qtype not in (1, 28):
            continue
        answers = []
        for _ in range(4):
            counter += 1
            if qtype == 1:
                rdata = struct.pack(">I", (240 << 24) | (counter & 0x0FFFFFFF))
            else:
                rdata = bytes.fromhex("fd42000000000000") + struct.pack(">Q", counter)
            answers.append(struct.pack(">HHHIH", 0xC00C, qtype, 1, 300, len(rdata)) + rdata)
        header = ident + struct.pack(">HHHHH", 0x8180, 1, 4, 0, 0)
        sock.sendto(header + question + b"".join(answers), peer)


def query(ident, name, qtype):
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return header + qname + struct.pack(">HH", qtype, 1)


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def load(server, seconds, rate, domain):
    run = os.getpid() & 0xFFFF
    sel = selectors.DefaultSelector()
    socks = []
    for i in range(SOCKETS):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect((server, 53))
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    pending = {}  # (socket index, id) -> name index
    waiting = {}  # name index -> [send time, replies missing]
    latencies = []
    lost = 0
    sent = 0
    q = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        now = time.perf_counter()
        if now < deadline and now >= start + sent / rate:
            name = f"n{run}-{sent}.{domain}"
            waiting[sent] = [now, 2]
            for qtype in (1, 28):
                index, ident = q % SOCKETS, (q // SOCKETS) & 0xFFFF
                q += 1
                pending[(index, ident)] = sent
                try:
                    socks[index].send(query(ident, name, qtype))
                except BlockingIOError:
                    pass
            sent += 1
            continue
        if now >= deadline + LOST_AFTER or (now >= deadline and not waiting):
            break
        timeout = max(0.0, min(start + sent / rate, deadline + LOST_AFTER) - now)
        for key, _ in sel.select(timeout):
            index = key.data
            while True:
                try:
                    reply = socks[index].recv(512)
                except BlockingIOError:
                    break
                if len(reply) < 2:
                    continue
                name = pending.pop((index, struct.unpack(">H", reply[:2])[0]), None)
                entry = waiting.get(name)
                if entry is None:
                    continue
                entry[1] -= 1
                if entry[1] == 0:
                    del waiting[name]
                    latencies.append((time.perf_counter() - entry[0]) * 1e6)
        # Forget names unanswered for too long (oldest first).
        now = time.perf_counter()
        for name in list(waiting):
            if now - waiting[name][0] < LOST_AFTER:
                break
            del waiting[name]
            lost += 1
    lost += len(waiting)
    latencies.sort()
    print(
        f"{len(latencies) / seconds:.1f} {percentile(latencies, 0.50):.1f} "
        f"{percentile(latencies, 0.99):.1f} {len(latencies)} {lost} {sent / seconds:.1f}"
    )


def main():
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "load":
        load(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
