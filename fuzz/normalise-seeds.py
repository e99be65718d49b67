#!/usr/bin/env python3
"""Writes fuzz/seeds/l7_normalise/: client TCP segments, IPv4 and IPv6,
that a receiver keeps or discards (issue 27): a timestamp, MD5 and TCP-AO
options, an MD5 option behind an unknown one, an option running past the
header, two timestamps, data or FIN without ACK, SYN with data, a wrong
checksum; IPv6 only, Destination and Hop-by-Hop options of each action,
padding Linux refuses, a Routing header. No root, no scapy: plain struct
packing."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds", "l7_normalise")
SRC4, DST4 = bytes([10, 79, 24, 2]), bytes([10, 79, 24, 1])
SRC6 = bytes.fromhex("fd790018000000000000000000000002")
DST6 = bytes.fromhex("fd790018000000000000000000000001")
ACK, PSH, FIN, SYN = 0x10, 0x08, 0x01, 0x02
HEAD = b"GET /api/v2/x HTTP/1.1\r\nHo"
TIMESTAMP = bytes([1, 1, 8, 10]) + struct.pack("!II", 500001, 77)


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp(pseudo, flags, options, payload, corrupt):
    options += b"\0" * (-len(options) % 4)
    offset = (20 + len(options)) // 4
    header = struct.pack("!HHIIBBHHH", 40000, 80, 1000, 5001, offset << 4, flags, 8192, 0, 0)
    segment = header + options + payload
    check = csum(pseudo(len(segment)) + segment) ^ (0x0100 if corrupt else 0)
    return segment[:16] + struct.pack("!H", check) + segment[18:]


def v4(flags, options, payload, corrupt=False):
    pseudo = lambda n: SRC4 + DST4 + struct.pack("!BBH", 0, 6, n)
    seg = tcp(pseudo, flags, options, payload, corrupt)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, 0x4000, 64, 6, 0, SRC4, DST4)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + seg


def v6(flags, options, payload, corrupt=False, extension=None):
    """`extension`: (type, body) of one extension header before TCP, its
    body everything after the next-header and length bytes."""
    pseudo = lambda n: SRC6 + DST6 + struct.pack("!IxxxB", n, 6)
    seg = tcp(pseudo, flags, options, payload, corrupt)
    first, headers = 6, b""
    if extension is not None:
        kind, body = extension
        body += b"\0" * (-(len(body) + 2) % 8)
        headers = bytes([6, (len(body) + 2) // 8 - 1]) + body
        first = kind
    ip = struct.pack("!IHBB16s16s", 6 << 28, len(headers) + len(seg), first, 64, SRC6, DST6)
    return ip + headers + seg


MD5 = bytes([19, 18]) + bytes(16)
SHAPES = {
    "timestamp": (ACK | PSH, TIMESTAMP, HEAD),
    "md5": (ACK | PSH, TIMESTAMP + MD5, HEAD),
    "ao": (ACK | PSH, TIMESTAMP + bytes([29, 6, 1, 2, 3, 4]), HEAD),
    "md5-behind-unknown": (ACK | PSH, bytes([253, 4, 0, 0]) + MD5, HEAD),
    "option-past-header": (ACK | PSH, bytes([253, 9, 0, 0]), HEAD),
    "two-timestamps": (ACK | PSH, TIMESTAMP + TIMESTAMP, HEAD),
    "data-without-ack": (PSH, TIMESTAMP, HEAD),
    "fin-without-ack": (FIN, TIMESTAMP, b""),
    "syn-with-data": (SYN, TIMESTAMP, HEAD),
}
DESTINATION, HOP_BY_HOP, ROUTING = 60, 0, 43
EXTENSIONS = {
    "padn": (DESTINATION, bytes([1, 4, 0, 0, 0, 0])),
    "skip-type": (DESTINATION, bytes([0x3E, 2, 9, 9, 1, 0])),
    "discard-01": (DESTINATION, bytes([0x7E, 2, 0, 0, 1, 0])),
    "discard-10": (DESTINATION, bytes([0x9E, 2, 0, 0, 1, 0])),
    "discard-11": (DESTINATION, bytes([0xDE, 2, 0, 0, 1, 0])),
    "long-padding": (DESTINATION, bytes([1, 6]) + bytes(12)),
    "nonzero-padn": (DESTINATION, bytes([1, 4, 0, 7, 0, 0])),
    "router-alert": (HOP_BY_HOP, bytes([5, 2, 0, 0, 1, 0])),
    "routing": (ROUTING, bytes([0, 0, 0, 0, 0, 0])),
}

os.makedirs(OUT, exist_ok=True)
for name, (flags, options, payload) in SHAPES.items():
    for family, build in (("v4", v4), ("v6", v6)):
        with open(os.path.join(OUT, f"{name}-{family}"), "wb") as f:
            f.write(build(flags, options, payload))
for family, build in (("v4", v4), ("v6", v6)):
    with open(os.path.join(OUT, f"bad-checksum-{family}"), "wb") as f:
        f.write(build(ACK | PSH, TIMESTAMP, HEAD, corrupt=True))
for name, extension in EXTENSIONS.items():
    with open(os.path.join(OUT, f"ipv6-{name}"), "wb") as f:
        f.write(v6(ACK | PSH, TIMESTAMP, HEAD, extension=extension))
