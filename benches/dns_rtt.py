#!/usr/bin/env python3
"""DNS lookup timing client of benches/e2e.sh (run in the client namespace).

  dns_rtt.py SERVER SECONDS DOMAIN

Sends A queries for distinct names q<n>.DOMAIN to SERVER:53 one after the
other for SECONDS, each from a new UDP socket (a new source port, so a new
flow through the node, as a stub resolver's lookup is), and times each from
send to reply with a monotonic clock. Prints one line:

  <p50 µs> <p99 µs> <answered> <lost>

The client's own overhead (Python, the socket calls) is in every figure;
e2e.sh subtracts the no-firewall run of the same round, so only the time
the node adds remains. A query unanswered within 1 s is lost, not timed.
"""

import os
import socket
import struct
import sys
import time


def query(ident, name):
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return header + qname + struct.pack(">HH", 1, 1)


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    k = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def main():
    server, seconds, domain = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    run = os.getpid() & 0xFFFF
    rtts = []
    lost = 0
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n += 1
        ident = n & 0xFFFF
        packet = query(ident, f"q{run}-{n}.{domain}")
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(1.0)
        try:
            start = time.perf_counter_ns()
            sock.sendto(packet, (server, 53))
            while True:
                reply = sock.recv(512)
                if len(reply) >= 2 and struct.unpack(">H", reply[:2])[0] == ident:
                    break
            rtts.append((time.perf_counter_ns() - start) / 1000.0)
        except socket.timeout:
            lost += 1
        finally:
            sock.close()
    rtts.sort()
    print(f"{percentile(rtts, 0.50):.1f} {percentile(rtts, 0.99):.1f} {len(rtts)} {lost}")


if __name__ == "__main__":
    main()
