#!/usr/bin/env python3
"""Traffic, judge and sampler of the tollgate soak (driven by benches/soak.sh).

Subcommands:

  soak.py policy A|B        print that version of policies/flip.yaml
  soak.py serve PORT...     TCP echo servers (answer "ping\\n" with "pong\\n"),
                            run inside a lab namespace by soak.sh.
  soak.py drive [options]   everything else, in one process whose threads
                            enter the lab namespaces they need (setns):
    - a DNS server (dns namespace) that hands out addresses from fixed
      pools with TTLs of 2-5 s and remembers what it handed out when;
    - client threads (client namespace) running random probes and judging
      EVERY outcome against the policy in force;
    - a policy flipper rewriting policies/flip.yaml every 3-6 s between
      versions A and B and waiting for the agent to apply each one;
    - a sampler (node namespace) writing one CSV row every 10 s.

The expected outcome of a probe that depends on the flipping policy is
known only while the policy is stable: such a probe is judged strictly when
the flipper's state was "applied" and unchanged from before the probe until
after it, and the agent's applied generation (status socket) read before and
after is the same; otherwise it is counted as ambiguous. The generation alone
is not enough: the agent swaps a new ruleset in before it bumps the
generation (after the kernel update), so a probe in between would be judged
against the old policy. Everything else is judged strictly.

The lab addresses (10.213.0.0/16, fdd5::/16) and the policies are those of
soak.sh; keep the two files in step.
"""

import argparse
import asyncio
import csv
import ctypes
import http.client
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time

CLONE_NEWNET = 0x40000000

# Addresses (see soak.sh).
NODE_FOR_CLIENT = {4: "10.213.1.1", 6: "fdd5:1::1"}
WEB = {4: "10.213.2.2", 6: "fdd5:2::2"}
DNS_SERVER = {4: "10.213.3.2", 6: "fdd5:3::2"}
# Address pools of the "external" sites, all served by the server namespace.
POOL_FQ = {4: "10.213.100.{}", 6: "fdd5:100::{:x}"}  # *.fq.soak.test: always allowed
POOL_UNLEARNED = {4: "10.213.101.{}", 6: "fdd5:101::{:x}"}  # never handed out
POOL_FLIP = {4: "10.213.102.{}", 6: "fdd5:102::{:x}"}  # *.flip.soak.test: version B only
POOL_SIZE = 250
EXTERNAL_PORT = 8443
TTL_RANGE = (2, 5)
MIN_TTL = 2  # the agent's --fqdn-min-ttl

# Outcomes of one connection attempt or request: allowed; refused (TCP
# reset, or the L7 403); timed out; anything else that is a denial
# (unreachable); "broken": connected, but the exchange failed.
ALLOW, REJECT, DROP, UNREACHABLE, BROKEN = "allow", "reject", "drop", "unreachable", "broken"

# How long an allowed step may take before it counts as a stall, and how
# long a probe waits for a connection it expects to be dropped.
STALL_SECS = 3.0
# Shortest warm-up after which flatness is judged: conntrack's TIME_WAIT
# (120 s) plus a margin.
MIN_WARMUP = 150
ALLOW_WAIT = 8.0
DROP_WAIT = 1.5


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


# --- namespaces -------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(name):
    """Moves the calling thread into network namespace `name`."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def thread_in(ns, target, *args, name=None):
    def run():
        enter_netns(ns)
        target(*args)

    t = threading.Thread(target=run, name=name or target.__name__, daemon=True)
    t.start()
    return t


# --- echo servers -----------------------------------------------------------


async def serve_echo(ports):
    async def handle(reader, writer):
        try:
            line = await asyncio.wait_for(reader.readline(), 30)
            if line == b"ping\n":
                writer.write(b"pong\n")
                await writer.drain()
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    servers = []
    for port in ports:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        servers.append(await asyncio.start_server(handle, sock=sock, backlog=1024))
    await asyncio.gather(*(s.serve_forever() for s in servers))


# --- DNS --------------------------------------------------------------------


def encode_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def read_name(msg, pos):
    """Returns (name, position after the name); follows compression pointers."""
    labels, end, hops = [], None, 0
    while True:
        n = msg[pos]
        if n & 0xC0 == 0xC0:
            if end is None:
                end = pos + 2
            pos = ((n & 0x3F) << 8) | msg[pos + 1]
            hops += 1
            if hops > 16:
                raise ValueError("pointer loop")
            continue
        if n == 0:
            return ".".join(labels), (end if end is not None else pos + 1)
        labels.append(msg[pos + 1 : pos + 1 + n].decode())
        pos += 1 + n


class DnsServer:
    """Answers A/AAAA for *.fq.soak.test and *.flip.soak.test from the pools,
    NXDOMAIN otherwise, and remembers the latest handout of every address."""

    def __init__(self):
        self.lock = threading.Lock()
        # address -> latest time + TTL at which a handout of it was sent
        self.sent_until = {}
        self.answered = 0

    def answer(self, query):
        qid, _flags, qd = struct.unpack("!HHH", query[:6])
        if qd != 1:
            return None
        name, pos = read_name(query, 12)
        qtype, _qclass = struct.unpack("!HH", query[pos : pos + 4])
        question = query[12 : pos + 4]
        family = {1: 4, 28: 6}.get(qtype)
        pool = None
        if name.endswith(".fq.soak.test"):
            pool = POOL_FQ
        elif name.endswith(".flip.soak.test"):
            pool = POOL_FLIP
        if pool is None or family is None:
            return struct.pack("!HHHHHH", qid, 0x8583, 1, 0, 0, 0) + question
        ttl = random.randint(*TTL_RANGE)
        address = pool[family].format(random.randint(1, POOL_SIZE))
        rdata = socket.inet_pton(socket.AF_INET if family == 4 else socket.AF_INET6, address)
        with self.lock:
            now = time.monotonic()
            self.sent_until[address] = max(self.sent_until.get(address, 0), now + max(ttl, MIN_TTL))
            self.answered += 1
        record = struct.pack("!HHHIH", 0xC00C, qtype, 1, ttl, len(rdata)) + rdata
        return struct.pack("!HHHHHH", qid, 0x8580, 1, 1, 0, 0) + question + record

    def serve(self):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 53))
        while True:
            query, peer = sock.recvfrom(512)
            try:
                reply = self.answer(query)
            except (ValueError, IndexError, struct.error, UnicodeDecodeError):
                reply = None
            if reply:
                sock.sendto(reply, peer)


def resolve(name, family, server_family):
    """One UDP query; returns (address, ttl, seconds) or raises OSError."""
    qtype = 1 if family == 4 else 28
    qid = random.randint(0, 0xFFFF)
    query = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + struct.pack("!HH", qtype, 1)
    fam = socket.AF_INET if server_family == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as sock:
        sock.settimeout(ALLOW_WAIT)
        t0 = time.monotonic()
        sock.sendto(query, (DNS_SERVER[server_family], 53))
        while True:
            reply = sock.recv(512)
            if struct.unpack("!H", reply[:2])[0] == qid:
                break
        took = time.monotonic() - t0
    _, flags, _, ancount, _, _ = struct.unpack("!HHHHHH", reply[:12])
    if flags & 0xF or ancount < 1:
        raise OSError(f"DNS rcode {flags & 0xF} answers {ancount}")
    _, pos = read_name(reply, 12)
    pos += 4
    _, pos = read_name(reply, pos)
    rtype, _, ttl, length = struct.unpack("!HHIH", reply[pos : pos + 10])
    rdata = reply[pos + 10 : pos + 10 + length]
    address = socket.inet_ntop(socket.AF_INET if rtype == 1 else socket.AF_INET6, rdata)
    return address, ttl, took


# --- agent status -----------------------------------------------------------


def agent_generation(socket_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(socket_path)
        s.sendall(b'{"request":"status"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)["status"]["rulesetGeneration"]


# --- policy versions --------------------------------------------------------

FLIP_A = """\
# Version A (benches/soak.py writes this file; do not edit by hand)
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-flip-web}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: flip-echo
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 8081}]
  - name: web-l7
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {path: "/api/*"}}, {http: {path: "/flip/*"}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-flip-node}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {matchLabels: {role: soak-node}}}]
  ingress:
  - name: flip-node
    action: Drop
    ports: [{protocol: TCP, port: 9091}]
"""

FLIP_B = """\
# Version B (benches/soak.py writes this file; do not edit by hand)
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-flip-web}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: flip-echo
    action: Reject
    ports: [{protocol: TCP, port: 8081}]
  - name: web-l7
    action: Allow
    from: [{podSelector: {matchLabels: {app: client}}}]
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {path: "/api/*"}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-flip-node}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {matchLabels: {role: soak-node}}}]
  ingress:
  - name: flip-node
    action: Allow
    ports: [{protocol: TCP, port: 9091}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: soak-flip-client}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
  - name: flip-fqdn
    action: Allow
    to: [{fqdn: "*.flip.soak.test"}]
    ports: [{protocol: TCP, port: 8443}]
"""

VERSIONS = {"A": FLIP_A, "B": FLIP_B}


def expected_tcp(target, port, version):
    """Outcome of a new TCP connection from the client under `version`
    (None: the flipping policy decides and no version is known)."""
    if target == "web":
        fixed = {8080: ALLOW, 8082: REJECT, 8083: DROP}
        if port in fixed:
            return fixed[port]
        if port == 8081:
            return None if version is None else {"A": ALLOW, "B": REJECT}[version]
    if target == "node":
        fixed = {9090: ALLOW, 9092: REJECT}
        if port in fixed:
            return fixed[port]
        if port == 9091:
            return None if version is None else {"A": DROP, "B": ALLOW}[version]
    raise ValueError((target, port))


def l7_allowed(path, version):
    if path.startswith("/api/"):
        return True
    if path.startswith("/flip/"):
        return version == "A"
    return False


class PolicyClock:
    """The flipper's view: which version is in force, and a sequence number
    that changes whenever that knowledge changes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seq = 0
        self.version = "A"  # None while a change is being applied

    def snapshot(self):
        with self.lock:
            return self.seq, self.version

    def changing(self):
        with self.lock:
            self.seq += 1
            self.version = None

    def applied(self, version):
        with self.lock:
            self.seq += 1
            self.version = version


# --- the soak ---------------------------------------------------------------


class Soak:
    def __init__(self, args):
        self.args = args
        self.deadline = time.monotonic() + args.duration
        self.stop = threading.Event()
        self.dns = DnsServer()
        self.clock = PolicyClock()
        self.lock = threading.Lock()
        self.counts = {
            "probes": 0,
            "ok": 0,
            "ambiguous": 0,
            "wrong_allow": 0,
            "wrong_deny": 0,
            "wrong_kind": 0,
            "stalls": 0,
            "errors": 0,
            "flips": 0,
        }
        self.by_kind = {}
        self.flip_latency = []  # seconds from write to generation applied
        self.events = open(os.path.join(args.out, "events.jsonl"), "w")
        self.started = time.time()

    # bookkeeping

    def event(self, kind, **details):
        details = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": kind, **details}
        with self.lock:
            self.events.write(json.dumps(details) + "\n")
            self.events.flush()
        log(f"{kind.upper()}: {json.dumps(details)}")

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def judge(self, kind, expected, got, strict, **details):
        """Records one outcome. expected/got: allow/reject/drop; strict False
        means ambiguous (flip in progress)."""
        with self.lock:
            self.counts["probes"] += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if not strict:
            self.count("ambiguous")
            return
        if expected == got:
            self.count("ok")
            return
        if expected == ALLOW:
            verdict = "wrong_deny"
        elif got in (ALLOW, BROKEN):
            verdict = "wrong_allow"  # connected at all
        else:
            verdict = "wrong_kind"  # denied, but not the way the rule says
        self.count(verdict)
        self.event(verdict, probe=kind, expected=expected, got=got, **details)

    def stalled(self, what, seconds, **details):
        self.count("stalls")
        self.event("stall", what=what, seconds=round(seconds, 3), **details)

    def error(self, what, **details):
        self.count("errors")
        self.event("error", what=what, **details)

    # TCP

    def connect(self, address, port, wait):
        """One connection with a ping/pong exchange; returns (outcome, seconds)."""
        fam = socket.AF_INET6 if ":" in address else socket.AF_INET
        t0 = time.monotonic()
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.settimeout(wait)
            try:
                s.connect((address, port))
            except ConnectionRefusedError:
                return REJECT, time.monotonic() - t0
            except (TimeoutError, socket.timeout):
                return DROP, time.monotonic() - t0
            except OSError:
                return UNREACHABLE, time.monotonic() - t0
            s.settimeout(ALLOW_WAIT)
            try:
                s.sendall(b"ping\n")
                reply = s.recv(16)
            except OSError:
                reply = b""
            return (ALLOW if reply == b"pong\n" else BROKEN), time.monotonic() - t0

    def generation(self):
        return agent_generation(self.args.status_socket)

    def flip_window(self, run):
        """Runs `run(version)` for a probe the flipping policy decides;
        returns (result, version or None when ambiguous)."""
        seq0, version = self.clock.snapshot()
        gen0 = self.generation()
        result = run(version)
        gen1 = self.generation()
        seq1, _ = self.clock.snapshot()
        strict = version is not None and seq0 == seq1 and gen0 == gen1
        return result, (version if strict else None), (gen0, gen1)

    def probe_tcp(self, target):
        family = random.choice((4, 6))
        ports = (8080, 8081, 8082, 8083) if target == "web" else (9090, 9091, 9092)
        port = random.choice(ports)
        address = (WEB if target == "web" else NODE_FOR_CLIENT)[family]
        kind = f"tcp-{'forward' if target == 'web' else 'input'}-v{family}"
        fixed = expected_tcp(target, port, "A") == expected_tcp(target, port, "B")
        if fixed:
            expected = expected_tcp(target, port, "A")
            got, took = self.connect(address, port, DROP_WAIT if expected == DROP else ALLOW_WAIT)
            self.judge(kind, expected, got, True, address=address, port=port, seconds=round(took, 3))
        else:
            _, version = self.clock.snapshot()
            wait = DROP_WAIT if version and expected_tcp(target, port, version) == DROP else ALLOW_WAIT
            (got, took), version, gens = self.flip_window(lambda v: self.connect(address, port, wait))
            expected = expected_tcp(target, port, version) if version else None
            self.judge(kind + "-flip", expected, got, version is not None,
                       address=address, port=port, version=version, generations=gens, seconds=round(took, 3))
            if version is None:
                return  # a SYN dropped under one version, retried under the other
        if got == ALLOW and took > STALL_SECS:
            self.stalled("tcp connect", took, address=address, port=port)

    def lookup(self, name, family):
        server_family = random.choice((4, 6))
        try:
            address, ttl, took = resolve(name, family, server_family)
        except OSError as e:
            self.error("dns lookup failed", name=name, family=family, server=DNS_SERVER[server_family], error=str(e))
            return None
        if took > STALL_SECS:
            self.stalled("dns lookup", took, name=name)
        return address, ttl, time.monotonic() - took

    def probe_fqdn(self):
        family = random.choice((4, 6))
        name = f"n{random.getrandbits(40):x}.fq.soak.test"
        found = self.lookup(name, family)
        if not found:
            return
        address, ttl, sent = found
        start = time.monotonic()
        got, took = self.connect(address, EXTERNAL_PORT, ALLOW_WAIT)
        # Learned no earlier than the query was sent: strictly allowed only
        # if the connection started well inside the TTL.
        strict = start < sent + max(ttl, MIN_TTL) - 0.5
        self.judge(f"fqdn-learned-v{family}", ALLOW, got, strict, name=name, address=address, ttl=ttl,
                   seconds=round(took, 3))
        if got == ALLOW and took > STALL_SECS:
            self.stalled("fqdn connect", took, address=address)

    def probe_unlearned(self):
        family = random.choice((4, 6))
        address = POOL_UNLEARNED[family].format(random.randint(1, POOL_SIZE))
        got, took = self.connect(address, EXTERNAL_PORT, ALLOW_WAIT)
        self.judge(f"fqdn-unlearned-v{family}", REJECT, got, True, address=address, seconds=round(took, 3))

    def probe_expired(self):
        """An address of the always-allowed pool whose every handout has
        expired must be denied again. The agent learns an answer before the
        client gets it, at most STALL_SECS after it was sent (a slower
        lookup is a stall), so its entry ends before sent + TTL + margin."""
        family = random.choice((4, 6))
        margin = STALL_SECS + 0.5
        now = time.monotonic()
        prefix = POOL_FQ[family].split("{")[0]
        with self.dns.lock:
            candidates = [(a, until) for a, until in self.dns.sent_until.items()
                          if a.startswith(prefix) and until + margin < now]
        if not candidates:
            return
        address, until = random.choice(candidates)
        got, took = self.connect(address, EXTERNAL_PORT, ALLOW_WAIT)
        with self.dns.lock:
            strict = self.dns.sent_until[address] == until  # not handed out meanwhile
        self.judge(f"fqdn-expired-v{family}", REJECT, got, strict, address=address,
                   expired_s_ago=round(now - until, 3), seconds=round(took, 3))

    def probe_fqdn_flip(self):
        family = random.choice((4, 6))
        name = f"n{random.getrandbits(40):x}.flip.soak.test"

        def run(version):
            found = self.lookup(name, family)
            if not found:
                return None
            address, ttl, sent = found
            start = time.monotonic()
            got, took = self.connect(address, EXTERNAL_PORT, ALLOW_WAIT)
            return address, ttl, sent, start, got, took

        result, version, gens = self.flip_window(run)
        if result is None:
            return
        address, ttl, sent, start, got, took = result
        strict = version is not None and start < sent + max(ttl, MIN_TTL) - 0.5
        expected = {"A": REJECT, "B": ALLOW}.get(version)
        # Version A has no rule for the flip names: the drop-external rule
        # rejects them.
        self.judge(f"fqdn-flip-v{family}", expected, got, strict, name=name, address=address,
                   version=version, generations=gens, seconds=round(took, 3))

    def http_exchange(self, sock, path, buf):
        """Sends one GET; returns (status, body, rest-of-buffer) or raises."""
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: web.soak.test\r\nUser-Agent: soak\r\n\r\n".encode())
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed before a response head")
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode(errors="replace").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        while len(buf) < length:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed inside a response body")
            buf += chunk
        return status, buf[:length].decode(errors="replace"), buf[length:]

    def probe_l7(self):
        family = random.choice((4, 6))
        paths = [random.choice(("/api/items/", "/api/users/", "/flip/x/")) + str(random.randint(0, 999))
                 for _ in range(random.randint(2, 6))]
        if random.random() < 0.4:
            paths.append(random.choice(("/admin", "/api", "/other/api/x")))

        def run(version):
            results = []
            fam = socket.AF_INET6 if family == 6 else socket.AF_INET
            t0 = time.monotonic()
            with socket.socket(fam, socket.SOCK_STREAM) as s:
                s.settimeout(ALLOW_WAIT)
                try:
                    s.connect((WEB[family], 80))
                except OSError as e:
                    return [(None, None, None, repr(e), time.monotonic() - t0)]
                buf = b""
                for path in paths:
                    t1 = time.monotonic()
                    try:
                        status, body, buf = self.http_exchange(s, path, buf)
                    except (OSError, ValueError, IndexError) as e:
                        results.append((path, None, None, repr(e), time.monotonic() - t1))
                        break
                    results.append((path, status, body, None, time.monotonic() - t1))
                    if status != 200:
                        break
            return results

        results, version, gens = self.flip_window(run)
        for path, status, body, err, took in results:
            if path is None:  # port 80 itself is always allowed
                self.judge(f"l7-connect-v{family}", ALLOW, UNREACHABLE, True, address=WEB[family], error=err)
                return
            if status == 200 and body == f"soak-ok {path}\n":
                got = ALLOW
            elif status == 403 and body.startswith("Access denied"):
                got = REJECT
            else:
                got = BROKEN
            depends = path.startswith("/flip/")
            expected = ALLOW if l7_allowed(path, version or "A") else REJECT
            strict = version is not None or not depends
            self.judge(f"l7-http-v{family}", expected, got, strict, address=WEB[family], path=path,
                       version=version, generations=gens, status=status, body=body, error=err)
            if took > STALL_SECS:
                self.stalled("http request", took, path=path)

    def client(self, seed):
        rng = random.Random(seed)
        probes = [
            (self.probe_tcp, ("web",), 4),
            (self.probe_tcp, ("node",), 3),
            (self.probe_fqdn, (), 3),
            (self.probe_unlearned, (), 1),
            (self.probe_expired, (), 1),
            (self.probe_fqdn_flip, (), 2),
            (self.probe_l7, (), 3),
        ]
        weights = [w for _, _, w in probes]
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            fn, args, _ = rng.choices(probes, weights)[0]
            try:
                fn(*args)
            except Exception as e:  # a bug in the harness must not pass silently
                self.error("probe raised", probe=fn.__name__, error=repr(e))
                time.sleep(0.5)
            if self.args.pace:
                time.sleep(self.args.pace)

    # policy flipper

    def write_policy(self, version):
        tmp = os.path.join(self.args.out, ".flip.yaml.tmp")
        with open(tmp, "w") as f:
            f.write(VERSIONS[version])
        os.replace(tmp, os.path.join(self.args.policies, "flip.yaml"))

    def flipper(self):
        version = "A"
        gen = self.generation()
        while not self.stop.wait(random.uniform(3, 6)) and time.monotonic() < self.deadline:
            version = "B" if version == "A" else "A"
            self.clock.changing()
            t0 = time.monotonic()
            self.write_policy(version)
            while True:
                now_gen = self.generation()
                if now_gen > gen:
                    break
                if time.monotonic() - t0 > 30:
                    self.error("reload not applied within 30 s", version=version, generation=gen)
                    self.stop.set()
                    return
                time.sleep(0.02)
            # One write may be seen as two changes (rename), giving two
            # reloads of the same content: settle before calling it applied.
            time.sleep(0.5)
            gen = self.generation()
            self.flip_latency.append(time.monotonic() - t0 - 0.5)
            self.clock.applied(version)
            self.count("flips")

    # sampler

    def metrics(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.args.metrics_port, timeout=5)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        values = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name, _, labels = name_labels.partition("{")
            values.setdefault(name, []).append(("{" + labels if labels else "", float(value)))
        return values

    def kernel_queues(self):
        """/proc/net/netfilter/nfnetlink_queue of the agent's namespace."""
        queues = {}
        with open(f"/proc/{self.args.agent_pid}/net/netfilter/nfnetlink_queue") as f:
            for line in f:
                fields = [int(x) for x in line.split()]
                queues[fields[0]] = {"waiting": fields[2], "queue_dropped": fields[5],
                                     "user_dropped": fields[6], "seen": fields[7]}
        return queues

    def sample(self, previous):
        pid = self.args.agent_pid
        row = {"time": time.strftime("%H:%M:%S", time.gmtime()), "elapsed_s": round(time.time() - self.started)}
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        row["rss_kb"] = int(status["VmRSS"].split()[0])
        row["rss_anon_kb"] = int(status["RssAnon"].split()[0])
        row["threads"] = int(status["Threads"])
        row["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        m = self.metrics()
        total = lambda name: sum(v for _, v in m.get(name, []))  # noqa: E731
        row["l7_flows"] = int(total("tollgate_l7_flows_active"))
        row["fqdn_mirror"] = int(total("tollgate_fqdn_addresses"))
        row["fqdn_kernel"] = fqdn_kernel_entries()
        row["conntrack"] = int(open("/proc/sys/net/netfilter/nf_conntrack_count").read())
        row["audit_written"] = int(total("tollgate_audit_lines_written_total"))
        row["audit_skipped"] = int(total("tollgate_audit_lines_skipped_total"))
        row["audit_files_kb"] = audit_files_kb(self.args.audit_log)
        row["generation"] = int(total("tollgate_ruleset_generation"))
        row["verdicts"] = int(total("tollgate_verdicts_total"))
        row["l7_requests"] = int(total("tollgate_l7_requests_total"))
        row["dns_replies"] = int(total("tollgate_dns_replies_total"))
        packets = {labels: v for labels, v in m.get("tollgate_queue_packets_total", [])}
        kq = self.kernel_queues()
        row["queue_waiting"] = sum(q["waiting"] for q in kq.values())
        row["queue_seen"] = sum(q["seen"] for q in kq.values())
        row["kernel_dropped"] = sum(q["queue_dropped"] + q["user_dropped"] for q in kq.values())
        row["overflows"] = int(total("tollgate_queue_overflows_total"))
        with self.lock:
            row.update({k: self.counts[k] for k in ("probes", "wrong_allow", "wrong_deny", "wrong_kind",
                                                      "ambiguous", "stalls", "errors", "flips")})
        row["load1"] = os.getloadavg()[0]
        # Worker stalls: packets waiting in a queue at two samples in a row
        # while its worker's counter did not move; or probes were made but no
        # queue saw a packet.
        if previous is not None:
            for queue, q in kq.items():
                before = previous["_kq"].get(queue)
                if before and q["waiting"] > 0 and before["waiting"] > 0 and q["seen"] == before["seen"]:
                    self.stalled("queue not moving", 10, queue=queue, waiting=q["waiting"])
            full_interval = row["elapsed_s"] - previous["elapsed_s"] >= self.args.sample_every * 0.9
            if full_interval and row["probes"] > previous["probes"] and row["queue_seen"] == previous["queue_seen"]:
                self.stalled("no packet queued while probes ran", 10)
        row["_kq"] = kq
        row["_packets"] = packets
        return row

    def sampler(self):
        fields = None
        rows = []
        previous = None
        with open(os.path.join(self.args.out, "samples.csv"), "w", newline="") as f:
            writer = None
            next_at = time.monotonic()
            while True:
                try:
                    row = self.sample(previous)
                except (OSError, ValueError, KeyError, http.client.HTTPException) as e:
                    self.error("sample failed", error=repr(e))
                    row = None
                if row:
                    public = {k: v for k, v in row.items() if not k.startswith("_")}
                    if writer is None:
                        fields = list(public)
                        writer = csv.DictWriter(f, fieldnames=fields)
                        writer.writeheader()
                    writer.writerow(public)
                    f.flush()
                    rows.append(public)
                    previous = row
                    log(" ".join(f"{k}={public[k]}" for k in ("elapsed_s", "rss_kb", "fds", "threads", "l7_flows",
                                                                  "fqdn_mirror", "conntrack", "probes", "ambiguous",
                                                                  "wrong_allow", "wrong_deny", "stalls", "errors")))
                if self.stop.is_set():
                    break
                next_at += self.args.sample_every
                self.stop.wait(max(0, next_at - time.monotonic()))
        self.rows = rows

    # main

    def run(self):
        thread_in(self.args.dns_ns, self.dns.serve, name="dns")
        # Version A is what the agent started with (soak.sh wrote it).
        clients = [thread_in(self.args.client_ns, self.client, i, name=f"client{i}")
                   for i in range(self.args.clients)]
        flipper = threading.Thread(target=self.flipper, name="flipper", daemon=True)
        flipper.start()
        sampler = thread_in(self.args.node_ns, self.sampler, name="sampler")
        try:
            while time.monotonic() < self.deadline and not self.stop.is_set():
                time.sleep(0.5)
                if not os.path.exists(f"/proc/{self.args.agent_pid}"):
                    self.error("agent exited")
                    break
        except KeyboardInterrupt:
            log("interrupted")
            self.interrupted = True
        self.stop.set()
        for t in clients:
            t.join(ALLOW_WAIT * 3)
        flipper.join(35)
        sampler.join(30)
        return self.summary()

    def summary(self):
        rows = getattr(self, "rows", [])
        out = []
        verdict = True
        c = self.counts
        out.append(f"duration {round(time.time() - self.started)} s, clients {self.args.clients}, "
                   f"policy flips {c['flips']}, DNS answers {self.dns.answered}")
        if self.flip_latency:
            lat = sorted(self.flip_latency)
            out.append(f"policy write -> generation applied: median {lat[len(lat) // 2]:.2f} s, "
                       f"max {lat[-1]:.2f} s")
        out.append("probes by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items())))
        out.append(f"probes {c['probes']}  ok {c['ok']}  ambiguous {c['ambiguous']}  wrong allows "
                   f"{c['wrong_allow']}  wrong denies {c['wrong_deny']}  wrong kind {c['wrong_kind']}  "
                   f"stalls {c['stalls']}  errors {c['errors']}")
        for key in ("wrong_allow", "wrong_deny", "wrong_kind", "stalls", "errors"):
            if c[key]:
                verdict = False
        if getattr(self, "interrupted", False):
            verdict = False
            out.append("FAIL: interrupted before the end")
        if c["probes"] == 0:
            verdict = False
            out.append("FAIL: no probe ran")
        if not rows:
            out.append("FAIL: no sample")
            return False, out
        # Flatness: mean of the last 3 samples against the mean of the 3
        # samples after warm-up.
        warm_index = next((i for i, r in enumerate(rows) if r["elapsed_s"] >= self.args.warmup), len(rows) - 1)
        warm_rows = rows[warm_index : warm_index + 3]
        end_rows = rows[-3:]
        mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
        checks = [
            # metric, allowed growth from warm-up: (absolute, relative)
            ("rss_kb", 4096, 0.10),
            ("rss_anon_kb", 2048, 0.10),
            ("fds", 4, 0.0),
            ("threads", 1, 0.0),
            ("l7_flows", 50, 0.5),
            ("fqdn_mirror", 100, 0.5),
            ("fqdn_kernel", 100, 0.5),
            ("conntrack", 200, 0.5),
            ("queue_waiting", 50, 0.0),
        ]
        # Conntrack keeps closed connections for TIME_WAIT (120 s): before
        # that every table is still filling up.
        judged = self.args.warmup >= MIN_WARMUP and len(rows) - warm_index >= 6
        out.append(f"flat = mean of the last 3 samples <= mean of the 3 samples from {rows[warm_index]['elapsed_s']} s "
                   "(after warm-up) + max(absolute, relative) tolerance")
        if not judged:
            out.append(f"flatness NOT JUDGED: needs a warm-up of at least {MIN_WARMUP} s and 6 samples after it "
                       "(DURATION of 8m or more)")
        out.append(f"{'metric':<14}{'start':>10}{'warm-up':>10}{'end':>10}{'peak':>10}  tolerance      flat")
        for key, absolute, relative in checks:
            warm, end = mean(warm_rows, key), mean(end_rows, key)
            peak = max(r[key] for r in rows)
            limit = warm + max(absolute, warm * relative)
            ok = end <= limit
            if judged:
                verdict &= ok
            tol = f"+{absolute}" + (f"/+{int(relative * 100)}%" if relative else "")
            out.append(f"{key:<14}{rows[0][key]:>10}{warm:>10.0f}{end:>10.0f}{peak:>10}  {tol:<14} "
                       f"{'yes' if ok else 'NO'}")
        for key in ("kernel_dropped", "overflows", "audit_written", "audit_skipped", "audit_files_kb"):
            out.append(f"{key:<14}{rows[0][key]:>10}{'':>10}{rows[-1][key]:>10}")
        return verdict, out


def audit_files_kb(path):
    """Size of the audit log and its rotated copies."""
    directory, base = os.path.split(path)
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f == base or f.startswith(base + ".")) // 1024


def fqdn_kernel_entries():
    """Entries in the FQDN ipsets of the calling thread's namespace."""
    text = subprocess.run(["ipset", "list", "-t"], capture_output=True, text=True, check=True).stdout
    total, name = 0, ""
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Number of entries:") and name.startswith("tollgate-fqdn-"):
            total += int(line.split(":", 1)[1])
    return total


def parse_duration(text):
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("ports", type=int, nargs="+")
    drive = sub.add_parser("drive")
    drive.add_argument("--duration", type=parse_duration, required=True)
    drive.add_argument("--warmup", type=parse_duration, required=True)
    drive.add_argument("--client-ns", required=True)
    drive.add_argument("--node-ns", required=True)
    drive.add_argument("--dns-ns", required=True)
    drive.add_argument("--agent-pid", type=int, required=True)
    drive.add_argument("--status-socket", required=True)
    drive.add_argument("--metrics-port", type=int, required=True)
    drive.add_argument("--policies", required=True)
    drive.add_argument("--audit-log", required=True)
    drive.add_argument("--out", required=True)
    drive.add_argument("--clients", type=int, default=4)
    drive.add_argument("--pace", type=float, default=0.0, help="seconds each client sleeps between probes")
    drive.add_argument("--sample-every", type=float, default=10.0)
    policy = sub.add_parser("policy", help="print a version of policies/flip.yaml")
    policy.add_argument("version", choices=sorted(VERSIONS))
    args = parser.parse_args()
    if args.command == "policy":
        sys.stdout.write(VERSIONS[args.version])
        return 0
    if args.command == "serve":
        asyncio.run(serve_echo(args.ports))
        return 0
    soak = Soak(args)
    ok, lines = soak.run()
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
