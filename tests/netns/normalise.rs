//! Stream normalisation on L7 connections (issue 27, finding 1), on the
//! wire against nginx and a raw TLS listener behind `tollgate run`, IPv4
//! and IPv6, with segments crafted by scapy from the client namespace:
//!
//! - the first part of an allowed request head (or ClientHello) in a
//!   segment the server's TCP throws away — a timestamp older than the
//!   SYN's (PAWS), an acknowledgment far below what the server sent, a TCP
//!   MD5 option the server has no key for, an IPv6 Destination option of a
//!   type that says "discard" — then, at the same sequence number, other
//!   bytes of the same length plus the rest of the head (or, after a
//!   stall, the other bytes alone and then the rest). tollgate drops the
//!   discarded segment unread, so the rewrite is judged as what it is;
//! - the same with a segment the server discards for a reason tollgate
//!   cannot see (its timestamp is newer than the SYN's but older than the
//!   handshake's pure ACK, which the kernel keeps from tollgate): the
//!   rewrite does not repeat the withheld bytes, and the connection is
//!   reset.
//!
//! Addresses: 10.79.24-25.0/24 and fd79:24-25::/64 (links of
//! [`crate::smuggle::setup`]). The client's kernel does not know scapy's
//! connections: its RSTs are dropped in the client namespace.

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::forgery::scapy_python;
use crate::harness::{poll_until, wait_until, Lab};
use crate::l7::{access_log, wait_logged};
use crate::smuggle::{l7_count, setup, web};

/// Runs the cases given as JSON (argv 2) from the client, on interface
/// argv 1: for each, a handshake whose SYN carries a timestamp (and
/// whose pure ACK carries a much newer one when `unseen` is set), then
/// the segments, each at `at` bytes after the client's first sequence
/// number, with `trick` making the server discard it, optionally after a
/// stall; then (`wait`) the first answer: an HTTP status or a RST.
/// Prints `<name> <status or -> <reset 0/1>` per case.
const CLIENT: &str = r#"
import json, sys, threading, time
from scapy.all import (IP, IPv6, TCP, IPv6ExtHdrDestOpt, HBHOptUnknown, AsyncSniffer,
                       L3RawSocket, L3RawSocket6, conf)
conf.verb = 0
iface, cases = sys.argv[1], json.loads(sys.argv[2])
got, ready = [], threading.Event()
sniffer = AsyncSniffer(iface=iface, store=False, prn=got.append, started_callback=ready.set,
                       lfilter=lambda p: TCP in p and p[TCP].sport in (80, 8443))
sniffer.start()
ready.wait(5)
sockets = {False: L3RawSocket(), True: L3RawSocket6()}

def first(test, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in list(got):
            if test(p):
                return p
        time.sleep(0.01)
    return None

for case in cases:
    six = ":" in case["dst"]
    ip = IPv6(src=case["src"], dst=case["dst"]) if six else IP(src=case["src"], dst=case["dst"])
    send = sockets[six].send
    sport, dport = case["sport"], case["dport"]
    ours = lambda p: p[TCP].dport == sport
    isn, ts, window = 1000000 + 7919 * sport, 500000, 8192
    send(ip / TCP(sport=sport, dport=dport, flags="S", seq=isn, window=window,
                  options=[("MSS", 1400), ("Timestamp", (ts, 0))]))
    syn_ack = first(lambda p: ours(p) and p[TCP].flags & 0x12 == 0x12, 3)
    if syn_ack is None:
        print(case["name"], "no-syn-ack", 0, flush=True)
        continue
    server = (syn_ack[TCP].seq + 1) % 2**32
    echo = dict(syn_ack[TCP].options).get("Timestamp", (0, 0))[0]
    # The handshake's pure ACK stays in the kernel: tollgate never sees it.
    newest = ts + 100000 if case["unseen"] else ts + 1
    send(ip / TCP(sport=sport, dport=dport, flags="A", seq=isn + 1, ack=server, window=window,
                  options=[("Timestamp", (newest, echo))]))
    for seg in case["segments"]:
        if seg["stall"]:
            # Longer than tollgate's STALL (150 ms): what a retransmission
            # timeout looks like to it. A stimulus, not a wait.
            time.sleep(0.3)
        newest += 1
        trick, tsval, ack, options = seg["trick"], newest, server, []
        if trick == "paws":
            tsval = ts - 1000
        elif trick == "unseen_paws":
            tsval = ts + 10
        elif trick == "old_ack":
            ack = (server - 10000) % 2**32
        elif trick == "md5":
            options = [("MD5", b"\x5a" * 16)]
        tcp = TCP(sport=sport, dport=dport, flags="PA", seq=(isn + 1 + seg["at"]) % 2**32, ack=ack,
                  window=window, options=[("Timestamp", (tsval, echo))] + options)
        if trick == "dstopt":
            tcp = IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x7e, optdata=b"\0\0")]) / tcp
        send(ip / tcp / bytes.fromhex(seg["data"]))
    status, reset = "-", 0
    if case["wait"]:
        def answer(p):
            data = bytes(p[TCP].payload)
            return ours(p) and (data.startswith(b"HTTP/1.1 ") or p[TCP].flags & 0x04)
        p = first(answer, 3)
        if p is not None:
            data = bytes(p[TCP].payload)
            status = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "-"
            reset = int(bool(p[TCP].flags & 0x04) and not data)
    print(case["name"], status, reset, flush=True)
sniffer.stop()
"#;

/// Prints, as hex, the ClientHello python's `ssl` (OpenSSL) sends for each
/// server name in argv.
const HELLOS: &str = r#"
import ssl, sys
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
for name in sys.argv[1:]:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    print(outgoing.read().hex())
"#;

/// How a segment makes the server throw it away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trick {
    None,
    /// A timestamp older than the SYN's (which the SYN-ACK echoes).
    Paws,
    /// An acknowledgment 10,000 bytes below the server's first byte (its
    /// window is 8,192: the server drops it, conntrack does not).
    OldAck,
    /// A TCP MD5 signature option; the server has no key.
    Md5,
    /// An IPv6 Destination option of type 0x7e (high bits 01: discard).
    DstOpt,
    /// A timestamp newer than the SYN's but older than the handshake's
    /// pure ACK's: only the server knows it is old.
    UnseenPaws,
}

impl Trick {
    fn word(self) -> &'static str {
        match self {
            Trick::None => "none",
            Trick::Paws => "paws",
            Trick::OldAck => "old_ack",
            Trick::Md5 => "md5",
            Trick::DstOpt => "dstopt",
            Trick::UnseenPaws => "unseen_paws",
        }
    }
}

/// One crafted segment: `data` at `at` bytes into the client's stream.
struct Seg {
    at: usize,
    data: Vec<u8>,
    trick: Trick,
    stall: bool,
}

fn seg(at: usize, data: &[u8], trick: Trick, stall: bool) -> Seg {
    Seg {
        at,
        data: data.to_vec(),
        trick,
        stall,
    }
}

/// One crafted connection.
struct Case {
    name: String,
    /// Client and server addresses.
    from: SocketAddr,
    to: SocketAddr,
    segments: Vec<Seg>,
    /// The handshake's ACK carries a timestamp far newer than the SYN's.
    unseen: bool,
    /// Wait for the first answer (an HTTP status or a RST).
    wait: bool,
}

impl Case {
    fn json(&self) -> String {
        let segments: Vec<String> = self
            .segments
            .iter()
            .map(|s| {
                let hex: String = s.data.iter().map(|b| format!("{b:02x}")).collect();
                format!(
                    r#"{{"at": {}, "data": "{hex}", "trick": "{}", "stall": {}}}"#,
                    s.at,
                    s.trick.word(),
                    s.stall
                )
            })
            .collect();
        format!(
            r#"{{"name": "{}", "src": "{}", "dst": "{}", "sport": {}, "dport": {}, "unseen": {}, "wait": {}, "segments": [{}]}}"#,
            self.name,
            self.from.ip(),
            self.to.ip(),
            self.from.port(),
            self.to.port(),
            self.unseen,
            self.wait,
            segments.join(", ")
        )
    }
}

/// What the client saw: the HTTP status of the first answer, or a reset.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Status(u16),
    Reset,
    Nothing,
}

/// Runs `cases` from the lab's client; the answer of each,
/// by name. The client's kernel RSTs (it knows none of scapy's
/// connections) are dropped in its namespace.
fn run_cases(lab: &Lab, python: &str, cases: &[Case]) -> HashMap<String, Answer> {
    let client = lab.ns("client");
    client.ok(
        "iptables -w -C OUTPUT -p tcp --tcp-flags RST RST -j DROP 2>/dev/null || \
         { iptables -w -A OUTPUT -p tcp --tcp-flags RST RST -j DROP && \
           ip6tables -w -A OUTPUT -p tcp --tcp-flags RST RST -j DROP; }",
    );
    let json = format!(
        "[{}]",
        cases.iter().map(Case::json).collect::<Vec<_>>().join(", ")
    );
    let out = client
        .exec(
            &[python, "-c", CLIENT, "l7b", &json],
            Duration::from_secs(120),
        )
        .expect_success("scapy client");
    out.stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, status, reset] = fields[..] else {
                panic!("scapy client printed {line:?}");
            };
            let answer = match (status.parse(), reset) {
                (Ok(status), _) => Answer::Status(status),
                (Err(_), "1") => Answer::Reset,
                (Err(_), _) if status == "no-syn-ack" => panic!("{name}: no SYN-ACK"),
                _ => Answer::Nothing,
            };
            (name.to_string(), answer)
        })
        .collect()
}

/// The client's address on link `n` for the family of `server`, at `port`.
fn client_addr(n: u8, server: SocketAddr, port: u16) -> SocketAddr {
    let ip = if server.is_ipv4() {
        format!("10.79.{n}.2")
    } else {
        format!("fd79:{n}::2")
    };
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// An allowed request for `marker` (3 characters) and a denied one of the
/// same length, and where the first segment ends: inside the Host header,
/// so the request line is in the first part.
fn requests(marker: &str) -> (Vec<u8>, Vec<u8>, usize) {
    let allowed = format!("GET /api/v2/{marker} HTTP/1.1\r\nHost: x\r\n\r\n");
    let hidden = format!("GET /admin/{marker}x HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(allowed.len(), hidden.len());
    let cut = allowed.find("\r\nHost").unwrap() + 4;
    (allowed.into_bytes(), hidden.into_bytes(), cut)
}

/// The attack's segments: the first part of `allowed` with `trick`, then
/// `hidden`'s first part and `allowed`'s rest at the same sequence
/// number, in one segment or (`stall`) in two after a stall.
fn attack(allowed: &[u8], hidden: &[u8], cut: usize, trick: Trick, stall: bool) -> Vec<Seg> {
    let mut rewrite = hidden[..cut].to_vec();
    if stall {
        vec![
            seg(0, &allowed[..cut], trick, false),
            seg(0, &rewrite, Trick::None, true),
            seg(cut, &allowed[cut..], Trick::None, false),
        ]
    } else {
        rewrite.extend_from_slice(&allowed[cut..]);
        vec![
            seg(0, &allowed[..cut], trick, false),
            seg(0, &rewrite, Trick::None, false),
        ]
    }
}

/// The discard tricks tollgate recognises, per family.
fn tricks(v6: bool) -> Vec<Trick> {
    let mut tricks = vec![Trick::Paws, Trick::OldAck, Trick::Md5];
    if v6 {
        tricks.push(Trick::DstOpt);
    }
    tricks
}

/// Each discard trick, then a rewrite of the withheld bytes, IPv4 and IPv6,
/// with and without a stall: the discarded segment is dropped unread, the
/// rewrite is judged as what it is (403), nginx never logs the hidden
/// path; a segment only the server knows is stale (PAWS against a pure
/// ACK) is judged, so its rewrite resets the connection. Positive
/// controls: the allowed request in one segment, split in two, with a
/// faithful copy of the withheld part (at once and after a stall), and
/// after the unseen pure ACK: 200 and in nginx's log.
///
/// Mutation: restore the overlap check that stops at the withheld range
/// (`passed_end = state.deferred.map_or(state.next_seq, |(from, _, _)|
/// from)` in `Inspector::follow`) → the unseen-PAWS cases get 200 and
/// nginx logs `GET /admin/…`. Mutation: ignore `Segment::discard` and
/// `FlowState::stale` in `Inspector::inspect` → the discard cases are
/// reset instead of answered 403 and the discard counters stay 0; with
/// both mutations nginx logs every hidden path.
#[test]
fn segments_the_server_discards_cannot_rewrite_an_l7_request() {
    let test = "segments_the_server_discards_cannot_rewrite_an_l7_request";
    let Some(setup) = setup(test, 24, &[]) else {
        return;
    };
    let lab = &setup.lab;
    let Some(python) = scapy_python(lab, test) else {
        return;
    };
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    let mut port = 30000;
    for (family, server) in web(24) {
        let v6 = server.is_ipv6();
        let mut case = |name: String, segments: Vec<Seg>, unseen: bool, want: Answer| {
            port += 1;
            cases.push(Case {
                name: name.clone(),
                from: client_addr(24, server, port),
                to: server,
                segments,
                unseen,
                wait: true,
            });
            expected.push((name, want));
        };
        let mut marker = 0;
        let mut next = |tag: char| {
            marker += 1;
            format!("{tag}{}{marker:02}", &family[1..])
        };
        // Positive controls.
        let m = next('p');
        let (allowed, _, cut) = requests(&m);
        case(
            format!("whole-{m}"),
            vec![seg(0, &allowed, Trick::None, false)],
            false,
            Answer::Status(200),
        );
        let m = next('p');
        let (allowed, _, cut2) = requests(&m);
        assert_eq!(cut, cut2);
        case(
            format!("split-{m}"),
            vec![
                seg(0, &allowed[..cut], Trick::None, false),
                seg(cut, &allowed[cut..], Trick::None, false),
            ],
            false,
            Answer::Status(200),
        );
        for stall in [false, true] {
            let m = next('p');
            let (allowed, _, cut) = requests(&m);
            case(
                format!("copy-{m}"),
                attack(&allowed, &allowed, cut, Trick::None, stall),
                false,
                Answer::Status(200),
            );
        }
        let m = next('p');
        let (allowed, _, _) = requests(&m);
        case(
            format!("unseen-ack-{m}"),
            vec![seg(0, &allowed, Trick::None, false)],
            true,
            Answer::Status(200),
        );
        // The attacks.
        for stall in [false, true] {
            for trick in tricks(v6) {
                let m = next('d');
                let (allowed, hidden, cut) = requests(&m);
                case(
                    format!("{}-{m}", trick.word()),
                    attack(&allowed, &hidden, cut, trick, stall),
                    false,
                    Answer::Status(403),
                );
            }
            let m = next('d');
            let (allowed, hidden, cut) = requests(&m);
            case(
                format!("unseen_paws-{m}"),
                attack(&allowed, &hidden, cut, Trick::UnseenPaws, stall),
                true,
                Answer::Reset,
            );
        }
    }
    let answers = run_cases(lab, python, &cases);
    for (name, want) in &expected {
        assert_eq!(answers.get(name), Some(want), "{name}: {answers:?}");
    }
    let controls: Vec<&String> = expected
        .iter()
        .filter(|(_, want)| *want == Answer::Status(200))
        .map(|(name, _)| name)
        .collect();
    for name in &controls {
        let marker = name.rsplit('-').next().unwrap();
        wait_logged(
            lab.dir(),
            &format!("GET /api/v2/{marker} HTTP/1.1 /api/v2/{marker} 200"),
        );
    }
    let log = access_log(lab.dir());
    assert!(
        !log.contains("admin"),
        "a hidden path reached nginx:\n{log}"
    );
    for (name, want) in &expected {
        if *want != Answer::Status(200) {
            let marker = name.rsplit('-').next().unwrap();
            assert!(!log.contains(marker), "{name} reached nginx:\n{log}");
        }
    }
    // Each discard trick twice per family (with and without a stall).
    let discarded = |reason: &str| {
        l7_count(
            lab,
            "tollgate_l7_discarded_total",
            &format!("reason=\"{reason}\""),
        )
    };
    for (reason, at_least) in [
        ("paws", 4.0),
        ("stale_ack", 4.0),
        ("tcp_option", 4.0),
        ("ip_extension", 2.0),
    ] {
        assert!(
            discarded(reason) >= at_least,
            "{reason}: {}",
            discarded(reason)
        );
    }
    assert_eq!(discarded("checksum"), 0.0);
    assert!(l7_count(lab, "tollgate_l7_resets_total", "") >= 4.0);
}

/// What each connection accepted on `listener` delivered until it ended
/// (EOF, reset, or 1.5 s of silence), by the client's port, for `count`
/// connections (or whatever came within 30 s).
fn delivered(
    listener: &TcpListener,
    count: usize,
) -> std::thread::JoinHandle<HashMap<u16, Vec<u8>>> {
    let listener = listener.try_clone().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut readers = Vec::new();
        while readers.len() < count && Instant::now() < deadline {
            let Some((mut stream, peer)) =
                poll_until(Duration::from_millis(200), || listener.accept().ok())
            else {
                continue;
            };
            readers.push(std::thread::spawn(move || {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_millis(1500)))
                    .unwrap();
                let (mut data, mut buf) = (Vec::new(), [0u8; 4096]);
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                (peer.port(), data)
            }));
        }
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// A ClientHello (OpenSSL's, from python's `ssl`) for an allowed name,
/// withheld while incomplete, then a rewrite naming a denied one of the
/// same length, IPv4 and IPv6, with and without a stall: after a TCP MD5
/// option (the first part dropped unread, the rewrite judged and reset) and
/// after a timestamp only the server knows is stale (the rewrite does not
/// repeat the withheld bytes: reset). The TLS server never reads a byte of
/// the denied ClientHello. Positive control: the allowed ClientHello split
/// in two reaches the server byte for byte.
///
/// Mutation: restore the overlap check that stops at the withheld range
/// (`Inspector::follow`) → the server reads the ClientHello naming
/// `api.baz.com` in the unseen-PAWS cases.
#[test]
fn a_withheld_client_hello_cannot_be_rewritten_to_a_denied_name() {
    let test = "a_withheld_client_hello_cannot_be_rewritten_to_a_denied_name";
    let Some(setup) = setup(test, 25, &[]) else {
        return;
    };
    let lab = &setup.lab;
    let Some(python) = scapy_python(lab, test) else {
        return;
    };
    let hellos = lab
        .node()
        .exec(
            &[python, "-c", HELLOS, "api.bar.com", "api.baz.com"],
            Duration::from_secs(10),
        )
        .expect_success("ClientHellos")
        .stdout;
    let [allowed, denied]: [Vec<u8>; 2] = hellos
        .lines()
        .map(|hex| {
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    assert_eq!(allowed.len(), denied.len());
    let name_at = allowed
        .windows(11)
        .position(|w| w == b"api.bar.com")
        .expect("the server name in the ClientHello");
    // The first part ends after the server name: the name is withheld.
    // (The two differ before it too, in their random and session id; the
    // old tollgate read the first part of one and the rest of the other,
    // whose lengths all agree.)
    let cut = name_at + 11 + 1;

    let mut port = 31000;
    for (family, (server, listener)) in [("v4", &setup.v4), ("v6", &setup.v6)] {
        let mut case = |name: String, segments: Vec<Seg>, unseen: bool| {
            port += 1;
            Case {
                name,
                from: client_addr(25, *server, port),
                to: *server,
                segments,
                unseen,
                wait: false,
            }
        };
        let mut cases = vec![case(
            format!("control-{family}"),
            vec![
                seg(0, &allowed[..cut], Trick::None, false),
                seg(cut, &allowed[cut..], Trick::None, false),
            ],
            false,
        )];
        for stall in [false, true] {
            for (trick, unseen) in [(Trick::Md5, false), (Trick::UnseenPaws, true)] {
                cases.push(case(
                    format!("{}-{family}-{stall}", trick.word()),
                    attack(&allowed, &denied, cut, trick, stall),
                    unseen,
                ));
            }
        }
        let reader = delivered(listener, cases.len());
        let answers = run_cases(lab, python, &cases);
        assert_eq!(answers.len(), cases.len(), "{answers:?}");
        let got = reader.join().unwrap();
        for Case { name, from, .. } in &cases {
            let bytes = got.get(&from.port()).map(Vec::as_slice).unwrap_or_default();
            if name.starts_with("control") {
                assert_eq!(bytes, allowed, "{name}: the allowed ClientHello");
            } else {
                assert!(
                    !bytes.windows(11).any(|w| w == b"api.baz.com"),
                    "{name}: the server read the denied ClientHello"
                );
                assert!(bytes.is_empty(), "{name}: the server read {bytes:?}");
            }
        }
    }
    // The MD5 cases: the first part dropped unread (twice per family).
    wait_until("MD5 segments counted", Duration::from_secs(5), || {
        l7_count(lab, "tollgate_l7_discarded_total", "reason=\"tcp_option\"") >= 4.0
    });
}
