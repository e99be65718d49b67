//! Smuggling past L7 rules with bytes the server reads differently from
//! tollgate (issue 13, items 1 and 5), on the wire against nginx behind
//! `tollgate run`, IPv4 and IPv6:
//!
//! - TCP urgent data (`MSG_OOB`): Linux takes the urgent byte out of what a
//!   server without `SO_OOBINLINE` reads. One urgent byte inside
//!   `Content-Length` would hide `DELETE /admin/secret` in what tollgate
//!   takes for a body; one before `../../admin` would turn an allowed path
//!   into `/admin`; one inside a ClientHello would make the server read
//!   another handshake than the one inspected. By default the connection is
//!   reset; with `--l7-urgent-data strip` URG is cleared and the server
//!   reads exactly the bytes tollgate inspected (nginx's access log and a
//!   raw TLS server's bytes show it).
//! - Strict framing: a GET whose body is a request, obsolete line folding,
//!   bare LF and duplicate Content-Length are answered 403 naming the
//!   reason, which the audit line carries too.
//!
//! Addresses: 10.79.20-23.0/24 and fd79:20-23::/64.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use socket2::Socket;

use crate::harness::metrics::{family_sum, scrape};
use crate::harness::{poll_until, wait_until, Agent, Lab, Netns};
use crate::l7::{access_log, l7_lab, link, raw_exchange, start_agent, wait_logged, Seen};

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-l7}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{nodeSelector: {matchLabels: {role: web}}}]
  ingress:
  - name: allow-api
    action: Allow
    enableLogging: true
    from: [{ipBlock: {cidr: 10.79.0.0/16}}, {ipBlock: {cidr: 'fd79::/16'}}]
    ports: [{protocol: TCP, port: 80}]
    l7Protocols:
    - http: {method: GET, path: /api/v2/*}
    - http: {host: '*.bar.com'}
  - name: allow-tls
    action: Allow
    from: [{ipBlock: {cidr: 10.79.0.0/16}}, {ipBlock: {cidr: 'fd79::/16'}}]
    ports: [{protocol: TCP, port: 8443}]
    l7Protocols:
    - tls: {sni: '*.bar.com'}
";

/// The request the urgent byte hides from tollgate in the old code.
const HIDDEN: &str = "DELETE /admin/secret HTTP/1.1\r\nHost: evil.example\r\n\r\n";

/// nginx on port 80 of the node (IPv4 and IPv6), logging
/// `$host $request $uri $status`: the request line as received and the
/// path nginx resolved.
fn nginx(lab: &Lab) {
    let d = lab.dir().display();
    let config = format!(
        "daemon off; master_process off; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  log_format tg '$host $request $uri $status';
  access_log {d}/access.log tg;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{
    listen 80; listen [::]:80;
    location / {{ return 200 \"ok $uri\\n\"; }}
  }}
}}
"
    );
    let path = lab.dir().join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let prefix = lab.dir().to_str().unwrap();
    lab.spawn(
        "node",
        &["nginx", "-c", path.to_str().unwrap(), "-p", prefix],
    );
    let node = lab.node();
    wait_until("nginx listening", Duration::from_secs(10), || {
        let listening = node.ok("ss -Htln");
        listening.contains("0.0.0.0:80 ") && listening.contains("[::]:80 ")
    });
}

/// One lab: the node (nginx, a raw TLS listener on 8443 per family, the
/// agent with `args` and an audit log) and a client on link `n`.
pub(crate) struct Setup {
    /// Stopped before the lab is torn down.
    _agent: Agent,
    pub(crate) lab: Lab,
    pub(crate) v4: (SocketAddr, TcpListener),
    pub(crate) v6: (SocketAddr, TcpListener),
}

pub(crate) fn setup(test: &'static str, n: u8, args: &[&str]) -> Option<Setup> {
    let lab = l7_lab(test, "client", &[], &[])?;
    link(lab.node(), lab.ns("client"), n);
    nginx(&lab);
    let tls_v4: SocketAddr = format!("10.79.{n}.1:8443").parse().unwrap();
    let tls_v6: SocketAddr = format!("[fd79:{n}::1]:8443").parse().unwrap();
    let listeners = lab.node().enter(|| {
        (
            TcpListener::bind(tls_v4).unwrap(),
            TcpListener::bind(tls_v6).unwrap(),
        )
    });
    lab.write_policy("policy.yaml", POLICY);
    let audit = lab.dir().join("np.log");
    let mut all = vec![
        "--audit-log",
        audit.to_str().unwrap(),
        "--metrics-address",
        METRICS,
    ];
    all.extend(args);
    let agent = start_agent(&lab, &[("role", "web")], &all);
    Some(Setup {
        _agent: agent,
        lab,
        v4: (tls_v4, listeners.0),
        v6: (tls_v6, listeners.1),
    })
}

/// The agent's metrics endpoint, in the node's namespace.
const METRICS: &str = "127.0.0.1:9470";

/// The L7 urgent-data counters, `(reset, stripped)`, summed over the
/// queues. A series appears at its first increment (0 before), but the
/// family must be exported and at least one of the two must have been
/// counted: a renamed family or label panics or fails the exact counts
/// instead of reading 0 (audit 3, L6).
fn urgent_counts(lab: &Lab) -> (f64, f64) {
    let samples = scrape(lab.node(), METRICS);
    let family = "tollgate_l7_urgent_data_total";
    family_sum(&samples, family);
    let count = |action: &str| -> f64 {
        let label = format!("action=\"{action}\"");
        samples
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{family}{{")) && k.contains(&label))
            .map(|(_, v)| *v)
            .sum()
    };
    (count("reset"), count("stripped"))
}

/// The sum over queues of the agent's counter `name` whose series carry
/// `label` (0 before its first increment).
pub(crate) fn l7_count(lab: &Lab, name: &str, label: &str) -> f64 {
    let text = lab
        .node()
        .ok(&format!("curl -sf --max-time 5 http://{METRICS}/metrics"));
    text.lines()
        .filter(|l| l.contains(name) && l.contains(label) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The HTTP servers of link `n`.
pub(crate) fn web(n: u8) -> [(&'static str, SocketAddr); 2] {
    [
        ("v4", format!("10.79.{n}.1:80").parse().unwrap()),
        ("v6", format!("[fd79:{n}::1]:80").parse().unwrap()),
    ]
}

/// A connection from `client` sending `before`, then `urgent` as TCP urgent
/// data (`MSG_OOB`), then `after`, each as its own segment; and whether a
/// send found the connection reset.
fn send_with_urgent(
    client: &Netns,
    to: SocketAddr,
    before: &[u8],
    urgent: u8,
    after: &[u8],
) -> (TcpStream, bool) {
    let stream = client.enter(|| TcpStream::connect_timeout(&to, Duration::from_secs(3)).unwrap());
    stream.set_nodelay(true).unwrap();
    let socket = Socket::from(stream);
    // Each write leaves at once (no delay, an open window); the short gaps
    // keep the kernel from merging them when the path is busy.
    let mut sent = vec![socket.send(before)];
    std::thread::sleep(Duration::from_millis(5));
    sent.push(socket.send_out_of_band(&[urgent]));
    std::thread::sleep(Duration::from_millis(5));
    if !after.is_empty() {
        sent.push(socket.send(after));
    }
    let reset = sent.iter().any(|r| {
        r.as_ref()
            .is_err_and(|e| matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe))
    });
    (socket.into(), reset)
}

/// Reads up to `want` responses after an urgent send (until they came,
/// the connection ended, or 5 s passed); a reset seen while sending counts
/// as one seen while reading.
fn responses((mut stream, reset): (TcpStream, bool), want: usize) -> Seen {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut seen = Seen {
        reset,
        ..Seen::default()
    };
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.statuses.len() < want {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                seen.reset |= e.kind() == ErrorKind::ConnectionReset;
                break;
            }
        }
        seen.statuses = String::from_utf8_lossy(&data)
            .match_indices("HTTP/1.1 ")
            .filter_map(|(at, _)| data.get(at + 9..at + 12))
            .filter_map(|code| std::str::from_utf8(code).ok()?.parse().ok())
            .collect();
    }
    seen
}

/// `Content-Length` digits splitting [`HIDDEN`] from the body: the server
/// reads `d` (the urgent byte `u` taken out), the old tollgate `du`, which
/// covers `d` body bytes plus the hidden request exactly.
fn length_digits() -> (u8, u8) {
    let len = HIDDEN.len();
    let d = (1..=9)
        .find(|d| (0..=9).contains(&(len as i64 - 9 * d)))
        .unwrap();
    (d as u8, (len as i64 - 9 * d) as u8)
}

/// The case (a) on one connection: `GET /api/v2/<marker>` with the
/// urgent byte inside its Content-Length, then [`HIDDEN`].
fn hidden_delete(client: &Netns, to: SocketAddr, marker: &str) -> (TcpStream, bool) {
    let (d, u) = length_digits();
    let before = format!("GET /api/v2/{marker} HTTP/1.1\r\nHost: x\r\nContent-Length: {d}");
    let body = "b".repeat(usize::from(d));
    let after = format!("\r\n\r\n{body}{HIDDEN}");
    send_with_urgent(client, to, before.as_bytes(), b'0' + u, after.as_bytes())
}

/// Case (b): `GET /api/v2/` + urgent `x` + `../../admin-<marker>`. The old
/// tollgate read `/api/v2/x../../admin-…` (= `/api/v2/admin-…`, allowed),
/// nginx `/api/v2/../../admin-…` (= `/admin-…`).
fn dot_dot(client: &Netns, to: SocketAddr, marker: &str) -> (TcpStream, bool) {
    let after = format!("../../admin-{marker} HTTP/1.1\r\nHost: x\r\n\r\n");
    send_with_urgent(client, to, b"GET /api/v2/", b'x', after.as_bytes())
}

/// A TLS record holding a ClientHello for `name` (TLS 1.2 shape, one
/// cipher suite, the server_name extension only).
fn client_hello(name: &str) -> Vec<u8> {
    let vec16 = |bytes: &[u8]| {
        let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(bytes);
        out
    };
    let mut names = vec![0];
    names.extend(vec16(name.as_bytes()));
    let mut sni = vec![0, 0];
    sni.extend(vec16(&vec16(&names)));
    let mut body = vec![3, 3];
    body.extend([0x5a; 32]);
    body.push(0);
    body.extend(vec16(&[0x13, 0x01]));
    body.extend([1, 0]);
    body.extend(vec16(&sni));
    let mut message = vec![1];
    message.extend(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    let mut record = vec![22, 3, 1];
    record.extend(vec16(&message));
    record
}

/// Reads what a connection accepted on `listener` delivers until it ends
/// (EOF, reset, or 3 s of silence).
fn received(listener: &TcpListener) -> Vec<u8> {
    listener.set_nonblocking(true).unwrap();
    let Some((mut stream, _)) = poll_until(Duration::from_secs(5), || listener.accept().ok())
    else {
        panic!("no connection reached the TLS server");
    };
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    data
}

/// Case (c): a ClientHello for an allowed name with one of its bytes sent
/// as urgent data; returns what the server read.
fn hello_with_urgent(client: &Netns, (to, listener): &(SocketAddr, TcpListener)) -> Vec<u8> {
    let hello = client_hello("api.bar.com");
    let (before, rest) = hello.split_at(20);
    let reader = std::thread::scope(|scope| {
        let reader = scope.spawn(|| received(listener));
        let (stream, _) = send_with_urgent(client, *to, before, rest[0], &rest[1..]);
        std::thread::sleep(Duration::from_millis(200));
        drop(stream);
        reader.join().unwrap()
    });
    reader
}

fn audit_lines(lab: &Lab) -> String {
    std::fs::read_to_string(lab.dir().join("np.log")).unwrap_or_default()
}

fn wait_audit(lab: &Lab, reason: &str) {
    wait_until(reason, Duration::from_secs(5), || {
        audit_lines(lab).lines().any(|l| {
            l.contains("AntreaClusterNetworkPolicy:web-l7 allow-api") && l.contains(reason)
        })
    });
}

/// Urgent data on an L7 connection resets it by default: the hidden
/// DELETE, the `../../admin` path and the altered ClientHello never reach a
/// server, IPv4 and IPv6, and the audit log says why.
#[test]
fn urgent_data_resets_l7_connections() {
    let Some(setup) = setup("urgent_data_resets_l7_connections", 20, &[]) else {
        return;
    };
    let (lab, client) = (&setup.lab, setup.lab.ns("client"));
    for (family, server) in web(20) {
        let seen = responses(hidden_delete(client, server, &format!("a1-{family}")), 2);
        assert!(
            seen.statuses.is_empty() && seen.reset,
            "{family}: hidden DELETE: {seen:?}"
        );
        let seen = responses(dot_dot(client, server, &format!("b1-{family}")), 1);
        assert!(
            seen.statuses.is_empty() && seen.reset,
            "{family}: ../../admin: {seen:?}"
        );
    }
    for (family, tls) in [("v4", &setup.v4), ("v6", &setup.v6)] {
        let got = hello_with_urgent(client, tls);
        assert!(got.is_empty(), "{family}: the server read {got:?}");
    }
    // Allowed requests still pass (the connection setup works), and
    // nothing of the urgent connections reached nginx.
    for (family, server) in web(20) {
        let mut stream =
            client.enter(|| TcpStream::connect_timeout(&server, Duration::from_secs(3)).unwrap());
        let get = format!("GET /api/v2/ok-{family} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(raw_exchange(&mut stream, get.as_bytes(), 1).statuses, [200]);
    }
    wait_logged(lab.dir(), "GET /api/v2/ok-v6 HTTP/1.1");
    let log = access_log(lab.dir());
    for absent in ["DELETE", "admin", "a1-", "b1-"] {
        assert!(!log.contains(absent), "{absent} reached nginx:\n{log}");
    }
    wait_audit(lab, "reason=\"urgent data: reset\"");
    // Six connections with urgent data (two HTTP cases and a ClientHello,
    // two families), each reset at its first urgent segment.
    assert_eq!(urgent_counts(lab), (6.0, 0.0));
}

/// With `--l7-urgent-data strip` (and strict framing off, so the hidden
/// request is judged by framing alone) the server reads the urgent byte
/// in-band, as tollgate inspected it: the GET's body is the hidden DELETE
/// for nginx too, the path nginx resolves is the one tollgate allowed, and
/// the ClientHello arrives byte for byte.
#[test]
fn stripped_urgent_data_reaches_the_server_in_band() {
    let Some(setup) = setup(
        "stripped_urgent_data_reaches_the_server_in_band",
        21,
        &[
            "--l7-urgent-data",
            "strip",
            "--set",
            "l7.strictFraming=false",
        ],
    ) else {
        return;
    };
    let (lab, client) = (&setup.lab, setup.lab.ns("client"));
    for (family, server) in web(21) {
        let (mut stream, _) = hidden_delete(client, server, &format!("a2-{family}"));
        let first = raw_exchange(&mut stream, b"", 1);
        assert_eq!(first.statuses, [200], "{family}: GET with a body");
        // Everything before this request on the connection was read.
        let next = format!("GET /api/v2/after-{family} HTTP/1.1\r\nHost: x\r\n\r\n");
        let second = raw_exchange(&mut stream, next.as_bytes(), 1);
        assert_eq!(second.statuses, [200], "{family}: the next request");

        let seen = responses(dot_dot(client, server, &format!("b2-{family}")), 1);
        assert_eq!(seen.statuses, [200]);
        wait_logged(
            lab.dir(),
            &format!("GET /api/v2/x../../admin-b2-{family} HTTP/1.1 /api/v2/admin-b2-{family} 200"),
        );
    }
    for (family, tls) in [("v4", &setup.v4), ("v6", &setup.v6)] {
        let got = hello_with_urgent(client, tls);
        assert_eq!(got, client_hello("api.bar.com"), "{family}");
    }
    wait_logged(lab.dir(), "GET /api/v2/after-v6 HTTP/1.1");
    let log = access_log(lab.dir());
    eprintln!("access log:\n{log}");
    for family in ["v4", "v6"] {
        assert!(
            log.contains(&format!(
                "GET /api/v2/a2-{family} HTTP/1.1 /api/v2/a2-{family} 200"
            )),
            "{log}"
        );
    }
    for absent in ["DELETE", "evil.example", " /admin"] {
        assert!(!log.contains(absent), "{absent} reached nginx:\n{log}");
    }
    wait_audit(lab, "reason=\"urgent data: URG cleared\"");
    // One urgent segment each: six.
    assert_eq!(urgent_counts(lab), (0.0, 6.0));
}

/// What a client read after writing raw bytes: the whole response, until
/// the server closed (or reset, or 5 s passed).
fn raw_response(client: &Netns, to: SocketAddr, request: &[u8]) -> (String, bool) {
    let mut stream =
        client.enter(|| TcpStream::connect_timeout(&to, Duration::from_secs(3)).unwrap());
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut reset = stream.write_all(request).is_err();
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => {
                reset |= e.kind() == ErrorKind::ConnectionReset;
                break;
            }
        }
    }
    (String::from_utf8_lossy(&data).into_owned(), reset)
}

/// Strict framing (the default): each request backends commonly frame
/// differently is answered 403 with the reason, which the audit log
/// carries, and never reaches nginx; IPv4 and IPv6. With the urgent byte
/// stripped, the case is such a request: a GET with a body.
#[test]
fn strict_framing_denies_with_the_reason() {
    let Some(setup) = setup(
        "strict_framing_denies_with_the_reason",
        22,
        &["--l7-urgent-data", "strip"],
    ) else {
        return;
    };
    let (lab, client) = (&setup.lab, setup.lab.ns("client"));
    let cases = |marker: &str| {
        [
            (
                format!(
                    "GET /api/v2/d1-{marker} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{HIDDEN}",
                    HIDDEN.len()
                ),
                "strict framing: body on GET",
            ),
            (
                format!("GET /api/v2/d2-{marker} HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
                "strict framing: obsolete line folding",
            ),
            (
                format!("GET /api/v2/d3-{marker} HTTP/1.1\nHost: x\n\n"),
                "strict framing: bare LF",
            ),
            (
                format!(
                    "GET /api/v2/d4-{marker} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
                ),
                "strict framing: duplicate Content-Length",
            ),
        ]
    };
    for (family, server) in web(22) {
        for (request, reason) in cases(family) {
            let (response, _) = raw_response(client, server, request.as_bytes());
            assert!(
                response.starts_with("HTTP/1.1 403 Forbidden\r\n"),
                "{family} {reason}: {response:?}"
            );
            let body = format!(
                "Access denied: {reason} (by AntreaClusterNetworkPolicy:web-l7 rule allow-api)\n"
            );
            assert!(response.ends_with(&body), "{family}: {response:?}");
            wait_audit(lab, &format!("reason=\"{reason}\""));
        }
        // The case with the urgent byte stripped: nginx would read
        // the same GET with a body, which strict framing denies.
        let seen = responses(hidden_delete(client, server, &format!("a3-{family}")), 2);
        assert_eq!(seen.statuses, [403], "{family}: {seen:?}");
        // A plain GET passes.
        let get =
            format!("GET /api/v2/p-{family} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        let (response, _) = raw_response(client, server, get.as_bytes());
        assert!(response.starts_with("HTTP/1.1 200"), "{response:?}");
    }
    wait_logged(lab.dir(), "GET /api/v2/p-v6 HTTP/1.1");
    let log = access_log(lab.dir());
    for absent in ["d1-", "d2-", "d3-", "d4-", "a3-", "DELETE"] {
        assert!(!log.contains(absent), "{absent} reached nginx:\n{log}");
    }
    let audit = audit_lines(lab);
    assert!(
        audit
            .lines()
            .any(|l| l.contains(" Reject ") && l.contains("reason=\"strict framing: body on GET\"")),
        "{audit}"
    );
}
