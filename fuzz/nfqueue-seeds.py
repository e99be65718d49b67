#!/usr/bin/env python3
"""Reads NFQUEUE netlink messages as the kernel sends them and keeps them as
seeds of the nfqueue_msg target (capture-seeds.sh runs it, as root, in the
server namespace of its lab, whose rules queue INPUT to queue 0 and OUTPUT
to queue 1). Binds queue 0 with a 64-byte copy range (longer packets carry
NFQA_CAP_LEN) and queue 1 with 1024 bytes and NFQA_CFG_F_GSO (GSO packets
carry NFQA_SKB_INFO), accepts every packet, and also sends a verdict for a
packet id the kernel does not hold, to record its error answer. Each
datagram received is one seed, at most two per kind (message type, queue,
hook, IP version and protocol, cut or not, skb info, size class).

Usage: nfqueue-seeds.py OUT_DIR READY_FILE  (runs until SIGTERM)"""
import hashlib
import os
import signal
import socket
import struct
import sys

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD, NFQA_CAP_LEN, NFQA_SKB_INFO = 1, 2, 10, 13, 14
NFQA_CFG_F_GSO = 4
# queue: (copy range, flags)
QUEUES = {0: (64, 0), 1: (1024, NFQA_CFG_F_GSO)}
PER_KIND = 2

out_dir, ready_file = sys.argv[1], sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def attribute(kind, value):
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def message(kind, flags, seq, queue, attributes):
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + b"".join(attributes)
    return struct.pack("=IHHII", 16 + len(body), NFNL_SUBSYS_QUEUE << 8 | kind, flags, seq, 0) + body


def attributes(body):
    found, at = {}, 0
    while at + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, at)
        if length < 4:
            break
        found[kind & 0x3FFF] = body[at + 4:at + length]
        at += (length + 3) & ~3
    return found


sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
sock.bind((0, 0))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
seq = 0
for queue, (copy_range, flags) in QUEUES.items():
    seq += 1
    sock.send(message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, queue, [
        attribute(1, struct.pack("!BxH", 1, 0)),  # NFQA_CFG_CMD: bind
        attribute(2, struct.pack("!IB", copy_range, 2)),  # NFQA_CFG_PARAMS: copy packet
        attribute(3, struct.pack("!I", 1024)),  # NFQA_CFG_QUEUE_MAXLEN
        attribute(4, struct.pack("!I", NFQA_CFG_F_GSO)),  # NFQA_CFG_MASK
        attribute(5, struct.pack("!I", flags)),  # NFQA_CFG_FLAGS
    ]))

kinds = {}
asked_for_an_error = False
bound = 0
while True:
    datagram = sock.recv(1 << 17)
    if len(datagram) < 16:
        continue
    kind = struct.unpack_from("=H", datagram, 4)[0]
    if kind == NLMSG_ERROR:
        errno = -struct.unpack_from("=i", datagram, 16)[0]
        key = ("error", errno)
        if errno == 0:
            bound += 1
            if bound == len(QUEUES):
                open(ready_file, "w").close()
    elif kind == NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET:
        queue = struct.unpack_from("!H", datagram, 18)[0]
        found = attributes(datagram[20:struct.unpack_from("=I", datagram)[0]])
        packet_id, _, hook = struct.unpack("!IHB", found[NFQA_PACKET_HDR][:7])
        payload = found.get(NFQA_PAYLOAD, b"")
        version = payload[0] >> 4 if payload else 0
        protocol = (payload[9] if version == 4 else payload[6]) if len(payload) > 9 else -1
        skb_info = struct.unpack("!I", found[NFQA_SKB_INFO])[0] if NFQA_SKB_INFO in found else 0
        key = ("packet", queue, hook, version, protocol, NFQA_CAP_LEN in found, skb_info,
               len(datagram) // 256)
        seq += 1
        verdicts = [message(NFQNL_MSG_VERDICT, NLM_F_REQUEST, seq, queue, [
            attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))])]
        if not asked_for_an_error:
            asked_for_an_error = True
            seq += 1
            verdicts.append(message(NFQNL_MSG_VERDICT, NLM_F_REQUEST, seq, queue, [
                attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, 0x7FFFFFF0))]))
        for verdict in verdicts:
            sock.send(verdict)
    else:
        key = ("other", kind)
    kinds[key] = kinds.get(key, 0) + 1
    if kinds[key] <= PER_KIND:
        name = "cap-" + hashlib.sha1(datagram).hexdigest()[:16]
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(datagram)
