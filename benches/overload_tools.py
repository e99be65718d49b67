#!/usr/bin/env python3
"""Traffic roles for benches/overload.sh, each run inside a lab namespace.

  serve   --allowed P[,P...] --denied P --count-file F
          HTTP/1.1 keep-alive server on the allowed ports (answers every
          request head with 200 "ok", counts requests for paths other than
          /ok* into F.requests); on the denied port it accepts, counts into
          F (rewritten on every accept) and closes.
  probe   --target IP --allowed P --denied P --seconds S [--rate R]
          New connections during S seconds: R/s to the allowed port (one
          GET each, latency measured connect -> response), and as many to
          the denied port (1 s timeout each). Prints one JSON line.
  recover --target IP --port P --timeout S
          Tries a new allowed connection every 50 ms (1 s timeout each)
          until one is served; prints the seconds it took, or fails.
  dns     --server IP --names N --net A.B --domain D [--window W]
          N queries for distinct names A-B-x-y.D (answered by dnsmasq
          --synth-domain with address A.B.x.y, A.B+1.x.y past 65,024
          names), W outstanding; prints JSON.
  l7load  --target IP --port P --seconds S [--connections C] [--every K]
          C keep-alive connections sending GET /ok, every K-th request a
          GET /admin (denied by the L7 rule: 403 or reset expected; a 200
          is a bypass); reconnects after a denial or a failure. JSON.
  hold    --target IP --port P --count N --seconds S [--path P] [--go F]
          Opens N keep-alive connections, one GET /ok each, holds them S
          seconds (or until file F exists, at most S), then sends a second
          GET P on every one before reading any answer, and counts the
          answers: ok (200), forbidden (403), reset, no answer. A reset of
          a GET /ok means the firewall forgot the connection. JSON lines.

Standard library only; every loop is bounded by a count or a deadline.
"""

import argparse
import errno
import json
import os
import selectors
import socket
import struct
import sys
import threading
import time

REQUEST = b"GET /ok HTTP/1.1\r\nHost: bench\r\n\r\n"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"


def write_count(path, n):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % n)
    os.replace(tmp, path)


def serve(args):
    sel = selectors.DefaultSelector()
    allowed = [int(p) for p in args.allowed.split(",")]
    listeners = {}
    for port in allowed + [args.denied]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(4096)
        s.setblocking(False)
        listeners[s] = port
        sel.register(s, selectors.EVENT_READ, ("listen", port))
    denied_accepts = denied_requests = 0
    write_count(args.count_file + ".requests", 0)
    write_count(args.count_file, 0)
    while True:
        for key, _ in sel.select(timeout=1.0):
            kind, data = key.data
            if kind == "listen":
                while True:
                    try:
                        conn, _ = key.fileobj.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError as e:  # EMFILE: shed, keep serving
                        if e.errno in (errno.EMFILE, errno.ENFILE):
                            break
                        raise
                    if data == args.denied:
                        denied_accepts += 1
                        write_count(args.count_file, denied_accepts)
                        conn.close()
                        continue
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ, ("conn", bytearray()))
            else:
                conn = key.fileobj
                try:
                    chunk = conn.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(conn)
                    conn.close()
                    continue
                data += chunk
                while b"\r\n\r\n" in data:
                    head = bytes(data[: data.index(b"\r\n\r\n")])
                    del data[: data.index(b"\r\n\r\n") + 4]
                    if not head.split(b" ")[1:2] or not head.split(b" ")[1].startswith(b"/ok"):
                        denied_requests += 1
                        write_count(args.count_file + ".requests", denied_requests)
                    try:
                        conn.sendall(RESPONSE)
                    except OSError:
                        break


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return round(sorted_values[i] * 1000, 2)


def one_request(target, port, timeout):
    """Connects, sends one GET, reads the response: latency in s, or None."""
    start = time.monotonic()
    try:
        with socket.create_connection((target, port), timeout=timeout) as c:
            c.sendall(REQUEST)
            got = b""
            while not got.endswith(b"ok\n"):
                chunk = c.recv(4096)
                if not chunk:
                    return None
                got += chunk
    except OSError:
        return None
    return time.monotonic() - start


def denied_attempt(target, port):
    """'connected' | 'refused' | 'timeout' | 'error' for one connect (1 s)."""
    try:
        with socket.create_connection((target, port), timeout=1.0):
            return "connected"
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError:
        return "error"


def probe(args):
    deadline = time.monotonic() + args.seconds
    lock = threading.Lock()
    latencies, failures = [], [0]
    denied = {"connected": 0, "refused": 0, "timeout": 0, "error": 0}

    def allowed_loop(offset):
        next_at = time.monotonic() + offset
        interval = args.threads / args.rate
        while next_at < deadline:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            took = one_request(args.target, args.allowed, 3.0)
            with lock:
                if took is None:
                    failures[0] += 1
                else:
                    latencies.append(took)
            next_at = max(next_at + interval, time.monotonic())

    def denied_loop():
        while time.monotonic() < deadline:
            outcome = denied_attempt(args.target, args.denied)
            with lock:
                denied[outcome] += 1
            if outcome != "timeout":
                time.sleep(0.02)

    threads = [
        threading.Thread(target=allowed_loop, args=(i / args.rate,))
        for i in range(args.threads)
    ] + [threading.Thread(target=denied_loop) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    attempts = len(latencies) + failures[0]
    print(
        json.dumps(
            {
                "allowed_attempts": attempts,
                "allowed_ok": len(latencies),
                "allowed_failed": failures[0],
                "allowed_ok_pct": round(100.0 * len(latencies) / attempts, 1)
                if attempts
                else None,
                "latency_ms_p50": percentile(latencies, 0.50),
                "latency_ms_p99": percentile(latencies, 0.99),
                "latency_ms_max": percentile(latencies, 1.0),
                "denied_attempts": sum(denied.values()),
                "denied_connected": denied["connected"],
                "denied_refused": denied["refused"],
                "denied_timeout": denied["timeout"],
                "denied_error": denied["error"],
            }
        )
    )


def recover(args):
    start = time.monotonic()
    deadline = start + args.timeout
    attempts = 0
    while time.monotonic() < deadline:
        attempts += 1
        if one_request(args.target, args.port, 1.0) is not None:
            print(json.dumps({"recovery_s": round(time.monotonic() - start, 3),
                              "attempts": attempts}))
            return
        time.sleep(0.05)
    print(json.dumps({"recovery_s": None, "attempts": attempts}))
    sys.exit(1)


DENIED_REQUEST = b"GET /admin HTTP/1.1\r\nHost: bench\r\n\r\n"


def l7load(args):
    deadline = time.monotonic() + args.seconds
    lock = threading.Lock()
    totals = {"allowed_ok": 0, "allowed_failed": 0, "denied_403": 0, "denied_reset": 0,
              "denied_timeout": 0, "denied_passed": 0, "connects_failed": 0}

    def count(key):
        with lock:
            totals[key] += 1

    def answer(c):
        got = b""
        while not (got.endswith(b"ok\n") or b"\r\n\r\n" in got and b" 403 " in got):
            chunk = c.recv(4096)
            if not chunk:
                raise ConnectionResetError("closed")
            got += chunk
        return got

    def worker():
        while time.monotonic() < deadline:
            try:
                c = socket.create_connection((args.target, args.port), timeout=2.0)
            except OSError:
                count("connects_failed")
                continue
            with c:
                i = 0
                while time.monotonic() < deadline:
                    i += 1
                    denied = i % args.every == 0
                    try:
                        c.sendall(DENIED_REQUEST if denied else REQUEST)
                        got = answer(c)
                    except socket.timeout:
                        count("denied_timeout" if denied else "allowed_failed")
                        break
                    except OSError:
                        count("denied_reset" if denied else "allowed_failed")
                        break
                    if not denied:
                        count("allowed_ok")
                        continue
                    count("denied_passed" if got.endswith(b"ok\n") else "denied_403")
                    break  # a denial ends the connection

    threads = [threading.Thread(target=worker) for _ in range(args.connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(totals))


def dns_query(qid, name):
    header = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return header + labels + b"\x00" + struct.pack("!HH", 1, 1)


def dns(args):
    a, b = (int(x) for x in args.net.split("."))
    # Distinct addresses from A.B.0.1 upwards (x.y.z.0 and .255 skipped),
    # spilling into A.B+1 past 65,024 names.
    names = [
        "%d-%d-%d-%d.%s"
        % (a, b + i // 65024, i // 254 % 256, i % 254 + 1, args.domain)
        for i in range(args.names)
    ]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.connect((args.server, 53))
    s.settimeout(0.5)
    outstanding = {}
    sent = answered = lost = 0
    start = time.monotonic()
    deadline = start + args.timeout
    while (sent < len(names) or outstanding) and time.monotonic() < deadline:
        while sent < len(names) and len(outstanding) < args.window:
            qid = sent % 65536
            s.send(dns_query(qid, names[sent]))
            outstanding[qid] = time.monotonic()
            sent += 1
        try:
            reply = s.recv(4096)
        except socket.timeout:
            now = time.monotonic()
            stale = [q for q, t in outstanding.items() if now - t > 2.0]
            for q in stale:
                del outstanding[q]
            lost += len(stale)
            continue
        qid = struct.unpack("!H", reply[:2])[0]
        if outstanding.pop(qid, None) is not None:
            ancount = struct.unpack("!H", reply[6:8])[0]
            if ancount:
                answered += 1
    took = time.monotonic() - start
    print(json.dumps({"queries": sent, "answered": answered, "lost": lost + len(outstanding),
                      "seconds": round(took, 2), "per_s": round(sent / took)}))


def hold(args):
    conns = []
    failed_open = 0
    for _ in range(args.count):
        try:
            c = socket.create_connection((args.target, args.port), timeout=3.0)
            c.sendall(REQUEST)
            if not c.recv(4096).endswith(b"ok\n"):
                raise OSError("short answer")
            conns.append(c)
        except OSError:
            failed_open += 1
    print(json.dumps({"phase": "open", "held": len(conns), "failed": failed_open}), flush=True)
    deadline = time.monotonic() + args.seconds
    while args.go and not os.path.exists(args.go) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not args.go:
        time.sleep(args.seconds)
    second = ("GET %s HTTP/1.1\r\nHost: bench\r\n\r\n" % args.path).encode()
    for c in conns:  # all requests first, then the answers: open loop
        try:
            c.sendall(second)
        except OSError:
            pass
    answers = {"ok": 0, "forbidden": 0, "reset": 0, "no_answer": 0}
    answer_deadline = time.monotonic() + args.answer_timeout
    for c in conns:
        got = b""
        try:
            while not (got.endswith(b"ok\n") or b" 403 " in got):
                c.settimeout(max(0.01, answer_deadline - time.monotonic()))
                chunk = c.recv(4096)
                if not chunk:
                    raise ConnectionResetError("closed")
                got += chunk
            answers["ok" if got.endswith(b"ok\n") else "forbidden"] += 1
        except socket.timeout:
            answers["no_answer"] += 1
        except OSError:
            answers["reset"] += 1
        finally:
            c.close()
    print(json.dumps(dict(phase="second_request", path=args.path, **answers)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--allowed", required=True)
    p.add_argument("--denied", type=int, required=True)
    p.add_argument("--count-file", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--target", required=True)
    p.add_argument("--allowed", type=int, required=True)
    p.add_argument("--denied", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--threads", type=int, default=4)
    p = sub.add_parser("recover")
    p.add_argument("--target", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=30.0)
    p = sub.add_parser("dns")
    p.add_argument("--server", required=True)
    p.add_argument("--names", type=int, required=True)
    p.add_argument("--net", required=True)
    p.add_argument("--domain", required=True)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--timeout", type=float, default=120.0)
    p = sub.add_parser("l7load")
    p.add_argument("--target", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--every", type=int, default=10)
    p = sub.add_parser("hold")
    p.add_argument("--target", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--path", default="/ok")
    p.add_argument("--go")
    p.add_argument("--answer-timeout", type=float, default=10.0)
    args = parser.parse_args()
    {"serve": serve, "probe": probe, "recover": recover, "dns": dns, "l7load": l7load,
     "hold": hold}[args.role](args)


if __name__ == "__main__":
    main()
