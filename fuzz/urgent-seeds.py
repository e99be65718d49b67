#!/usr/bin/env python3
"""Writes fuzz/seeds/l7_urgent/: client TCP segments, IPv4 and IPv6, with
and without URG and an urgent pointer (the issue-13 shapes: one urgent
byte inside Content-Length, before `../../admin`, in a ClientHello, on a
pure ACK), checksums right. No root, no scapy: plain struct packing."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds", "l7_urgent")


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp(src, dst, pseudo, seq, flags, urg_ptr, payload):
    header = struct.pack("!HHIIBBHHH", 40000, 80, seq, 5001, 5 << 4, flags, 64240, 0, urg_ptr)
    segment = header + payload
    check = csum(pseudo(len(segment)) + segment)
    return segment[:16] + struct.pack("!H", check) + segment[18:]


def v4(payload, flags, urg_ptr):
    src, dst = bytes([10, 79, 20, 2]), bytes([10, 79, 20, 1])
    pseudo = lambda n: src + dst + struct.pack("!BBH", 0, 6, n)
    seg = tcp(src, dst, pseudo, 1000, flags, urg_ptr, payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + seg


def v6(payload, flags, urg_ptr):
    src = bytes.fromhex("fd790014000000000000000000000002")
    dst = bytes.fromhex("fd790014000000000000000000000001")
    pseudo = lambda n: src + dst + struct.pack("!IxxxB", n, 6)
    seg = tcp(src, dst, pseudo, 1000, flags, urg_ptr, payload)
    ip = struct.pack("!IHBB16s16s", 6 << 28, len(seg), 6, 64, src, dst)
    return ip + seg


ACK, PSH, URG, FIN, RST = 0x10, 0x08, 0x20, 0x01, 0x04
HELLO = bytes([22, 3, 1, 0, 5, 1, 0, 0, 1, 0])
SHAPES = {
    "content-length": (b"8", ACK | PSH | URG, 1),
    "dot-dot": (b"x", ACK | PSH | URG, 1),
    "hello": (HELLO[4:5], ACK | PSH | URG, 1),
    "pure-ack": (b"", ACK | URG, 5),
    "pointer-no-urg": (b"GET / HTTP/1.1\r\n\r\n", ACK | PSH, 3),
    "plain": (b"GET /api/v2/x HTTP/1.1\r\nHost: x\r\n\r\n", ACK | PSH, 0),
    "fin-urg": (b"z", ACK | FIN | URG, 1),
    "rst-urg": (b"", ACK | RST | URG, 0xFFFF),
}

os.makedirs(OUT, exist_ok=True)
for name, (payload, flags, ptr) in SHAPES.items():
    for family, build in (("v4", v4), ("v6", v6)):
        with open(os.path.join(OUT, f"{name}-{family}"), "wb") as f:
            f.write(build(payload, flags, ptr))
