//! L7 HTTP and TLS rules on the wire: `tollgate run` in the node
//! namespace, real nginx and curl across a veth pair; every request on
//! every connection is judged, denied ones never reach nginx (checked in its
//! access log), and raw byte streams cannot bypass the rules.
//!
//! Ingress: allowed and denied requests (403 with the reason), host globs,
//! IPv6, keep-alive with an allowed then a denied request, a head split over
//! many segments, an upload larger than the head buffer, non-HTTP bytes and
//! a 20 KiB header (reset); the `reset` response and the audit lines of a
//! logged L7 rule; a Pod routed through the Node (FORWARD); the spec's
//! egress example (allow DNS, HTTP only to `*.bar.com`); bypass attempts:
//! path tricks, ambiguous heads, a missing Host header, smuggled and
//! pipelined requests, IPv6 extension headers and addresses the Node gains
//! later; connections leaving the flow table. Addresses: 10.79.0.0/16 and
//! fd79::/16.

use crate::harness::probe::queue_counters;
use crate::harness::{wait_until, Agent, Lab, Netns, PingOutcome, ALLOW_WAIT, DENY_WAIT};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use tollgate::l7::CLOSE_GRACE;

use sha1::{Digest, Sha1};

/// Builds `test`'s lab: the node and `peer` (plus the `more` namespaces),
/// all unlinked, with nginx, curl and `tools` required.
pub(crate) fn l7_lab(
    test: &'static str,
    peer: &str,
    more: &[&str],
    tools: &[&'static str],
) -> Option<Lab> {
    let mut builder = Lab::builder(test)
        .unlinked(peer)
        .require(&["nginx", "curl"])
        .require(tools);
    for role in more {
        builder = builder.unlinked(role);
    }
    builder.build()
}

/// Joins namespaces `a` and `b` by a veth pair: `a` holds `10.79.<n>.1`
/// and `fd79:<n>::1` on `l7a`, `b` holds `.2` on `l7b`.
pub(crate) fn link(a: &Netns, b: &Netns, n: u8) {
    a.ok(&format!(
        "ip link add l7a type veth peer name l7b netns {} && \
         ip addr add 10.79.{n}.1/24 dev l7a && ip addr add fd79:{n}::1/64 dev l7a nodad && \
         ip link set l7a up",
        b.name()
    ));
    b.ok(&format!(
        "ip addr add 10.79.{n}.2/24 dev l7b && \
         ip addr add fd79:{n}::2/64 dev l7b nodad && ip link set l7b up"
    ));
}

/// Starts the agent (node `l7` with `labels`, one queue, `extra`
/// arguments) on the lab's policy and waits for its first ruleset.
pub(crate) fn start_agent(lab: &Lab, labels: &[(&str, &str)], extra: &[&str]) -> Agent {
    let options = lab
        .agent_options()
        .node_name("l7")
        .labels(labels)
        .queues(1)
        .args(extra);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    agent
}

/// nginx in `role`'s namespace answering `ok <uri>` to everything on port
/// 80 (IPv4 and IPv6), logging `$host $request $status` to `access.log` in
/// the lab directory.
pub(crate) fn nginx(lab: &Lab, role: &str) {
    let d = lab.dir().display();
    let config = format!(
        "daemon off; master_process off; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
  log_format tg '$host $request $status';
  access_log {d}/access.log tg;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  keepalive_requests 1000000; large_client_header_buffers 4 64k;
  server {{
    listen 80; listen [::]:80;
    location / {{ return 200 \"ok $request_uri\\n\"; }}
  }}
}}
"
    );
    let path = lab.dir().join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    lab.spawn(
        role,
        &[
            "nginx",
            "-c",
            path.to_str().unwrap(),
            "-p",
            lab.dir().to_str().unwrap(),
        ],
    );
    let ns = lab.ns(role);
    wait_until("nginx listening", Duration::from_secs(10), || {
        let listening = ns.ok("ss -Htln");
        listening.contains("0.0.0.0:80 ") && listening.contains("[::]:80 ")
    });
}

/// The L7 queues of an agent run with `--queues 1` (the default two):
/// after the connection queue 100 and the DNS queue 101.
const L7_QUEUES: std::ops::RangeInclusive<u32> = 102..=103;

pub(crate) fn access_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("access.log")).unwrap_or_default()
}

/// Waits until nginx has logged `line` (it logs after the response).
pub(crate) fn wait_logged(dir: &Path, line: &str) {
    wait_until(line, Duration::from_secs(5), || {
        access_log(dir).contains(line)
    });
}

/// Runs curl; returns (exit status, stdout).
fn curl(ns: &Netns, args: &str) -> (i32, String) {
    let out = ns.sh(&format!("curl -sS -g --max-time 5 {args}"));
    (out.code().unwrap_or(-1), out.stdout)
}

/// Sends `request` in `piece`-byte writes (TCP_NODELAY, paced so each
/// write leaves as its own segment) and reads until the server closes or
/// a response with `Connection: close`/complete body arrives.
fn send_in_pieces(addr: SocketAddr, request: &[u8], piece: usize) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    for chunk in request.chunks(piece) {
        stream.write_all(chunk)?;
        std::thread::sleep(Duration::from_millis(3));
    }
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// Accepts `n` connections one after the other and returns, for each,
/// the first bytes read (empty when the connection was closed or reset
/// before any arrived).
fn first_bytes_server(listener: TcpListener, n: usize) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        (0..n)
            .map(|_| {
                let (mut stream, _) = listener.accept().unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).unwrap_or(0);
                buf[..n].to_vec()
            })
            .collect()
    })
}

/// A one-connection upload server: reads a request with a Content-Length
/// body and answers with the body's SHA-1.
fn upload_server(listener: TcpListener) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut data = Vec::new();
        let mut buf = [0u8; 65536];
        let (head_len, length) = loop {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "closed before the head");
            data.extend_from_slice(&buf[..n]);
            if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse::<usize>().unwrap())
                    .unwrap();
                break (end + 4, length);
            }
        };
        while data.len() < head_len + length {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "closed in the body");
            data.extend_from_slice(&buf[..n]);
        }
        let digest = hex(&Sha1::digest(&data[head_len..head_len + length]));
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{digest}",
            digest.len()
        );
        stream.write_all(response.as_bytes()).unwrap();
        digest
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const INGRESS_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-l7}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{nodeSelector: {matchLabels: {role: web}}}]
  ingress:
  - name: allow-api
    action: Allow
    from: [{ipBlock: {cidr: 10.79.0.0/16}}, {ipBlock: {cidr: 'fd79::/16'}}]
    ports: [{protocol: TCP, port: 80}, {protocol: TCP, port: 8080}]
    l7Protocols:
    - http: {method: GET, path: /api/v2/*}
    - http: {host: '*.bar.com'}
  - name: allow-tls
    action: Allow
    from: [{ipBlock: {cidr: 10.79.0.0/16}}]
    ports: [{protocol: TCP, port: 8443}]
    l7Protocols:
    - tls: {sni: '*.bar.com'}
";

#[test]
fn ingress_requests_are_matched_one_by_one() {
    let Some(lab) = l7_lab(
        "ingress_requests_are_matched_one_by_one",
        "client",
        &[],
        &[],
    ) else {
        return;
    };
    let (node, client) = (lab.node(), lab.ns("client"));
    link(node, client, 0);
    nginx(&lab, "node");
    let uploads = node.enter(|| TcpListener::bind("10.79.0.1:8080").unwrap());
    let tls = node.enter(|| TcpListener::bind("10.79.0.1:8443").unwrap());
    lab.write_policy("policy.yaml", INGRESS_POLICY);
    let agent = start_agent(&lab, &[("role", "web")], &[]);
    let log = lab.dir();

    // Allowed, and denied with a 403 naming the rule.
    let (code, body) = curl(client, "-w ' %{http_code}' http://10.79.0.1/api/v2/x");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/x\n 200"));
    for args in [
        "-X POST http://10.79.0.1/api/v2/x",
        "http://10.79.0.1/admin",
    ] {
        let (code, body) = curl(client, &format!("-i {args}"));
        assert_eq!(code, 0, "{args}: {body}");
        assert!(body.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{body}");
        let reason = " request not allowed by \
                      AntreaClusterNetworkPolicy:web-l7 rule allow-api\n";
        assert!(body.ends_with(reason), "{body}");
        assert!(body.contains("\r\n\r\nAccess denied: "), "{body}");
        assert!(body.contains("\r\nConnection: close\r\n"), "{body}");
    }
    // Host glob: any method for *.bar.com, not for foo.baz.com.
    let (_, body) = curl(
        client,
        "-X DELETE -H 'Host: foo.bar.com' -w ' %{http_code}' http://10.79.0.1/anything",
    );
    assert_eq!(body, "ok /anything\n 200");
    let (_, body) = curl(
        client,
        "-X DELETE -H 'Host: foo.baz.com' -w ' %{http_code}' -o /dev/null http://10.79.0.1/anything",
    );
    assert_eq!(body, " 403");
    // IPv6.
    let (_, body) = curl(client, "-w ' %{http_code}' http://[fd79:0::1]/api/v2/six");
    assert_eq!(body, "ok /api/v2/six\n 200");
    let (_, body) = curl(
        client,
        "-w ' %{http_code}' -o /dev/null http://[fd79:0::1]/admin6",
    );
    assert_eq!(body, " 403");

    // Keep-alive: one connection, an allowed then a denied request.
    let (code, body) = curl(
        client,
        "-w '%{http_code} %{num_connects}\\n' -o /dev/null http://10.79.0.1/api/v2/ka \
         -o /dev/null http://10.79.0.1/admin/ka",
    );
    assert_eq!((code, body.as_str()), (0, "200 1\n403 0\n"));

    // A head split over many segments is matched once complete. The L7
    // queue's packet counter shows the head really left as one segment per
    // piece (6 pieces of 10 bytes or less).
    let server: SocketAddr = "10.79.0.1:80".parse().unwrap();
    let l7_queued = || {
        queue_counters(node)
            .iter()
            .filter(|c| L7_QUEUES.contains(&c.queue))
            .map(|c| c.id_sequence)
            .sum::<u64>()
    };
    for (head, status) in [
        (
            &b"GET /api/v2/split HTTP/1.1\r\nHost: x\r\nX-Pad: 1234567890\r\n\r\n"[..],
            "HTTP/1.1 200",
        ),
        (
            &b"GET /admin/split HTTP/1.1\r\nHost: x\r\nX-Pad: 1234567890\r\n\r\n"[..],
            "HTTP/1.1 403 Forbidden",
        ),
    ] {
        let before = l7_queued();
        let answer = client.enter(|| send_in_pieces(server, head, 10)).unwrap();
        assert!(answer.starts_with(status), "{answer}");
        let queued = l7_queued() - before;
        let pieces = head.len().div_ceil(10) as u64;
        assert!(
            queued >= pieces,
            "{queued} segments queued for {pieces} pieces"
        );
    }

    // An upload larger than the head buffer passes intact.
    let upload = upload_server(uploads);
    let file = lab.dir().join("upload.bin");
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let (code, body) = curl(
        client,
        &format!(
            "-H 'Host: up.bar.com' -H 'Expect:' --data-binary @{} http://10.79.0.1:8080/upload",
            file.display()
        ),
    );
    let expected = hex(&Sha1::digest(&data));
    assert_eq!((code, body.as_str()), (0, expected.as_str()));
    assert_eq!(upload.join().unwrap(), expected);

    // Non-HTTP bytes: reset, no answer.
    let garbage = client.enter(|| send_in_pieces(server, b"SSH-2.0-OpenSSH_9.6\r\n", 100));
    let error = garbage.expect_err("non-HTTP bytes were answered");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    // A 20 KiB header: reset. (The head outgrows the client's initial
    // window, so its first part reaches the server before the reset: the
    // server logs an incomplete request with status 400 and never
    // processes it.)
    let big = "a".repeat(20 * 1024);
    let (code, _) = curl(
        client,
        &format!("-H 'X-Big: {big}' http://10.79.0.1/api/v2/big"),
    );
    assert_eq!(code, 56, "curl should see a reset");

    // TLS: the ClientHello's server name decides (the test server speaks
    // no TLS, so curl fails either way; what matters is what it received).
    let hellos = first_bytes_server(tls, 2);
    let (code, _) = curl(
        client,
        "-k --resolve api.bar.com:8443:10.79.0.1 https://api.bar.com:8443/",
    );
    assert_ne!(code, 0);
    let (code, _) = curl(
        client,
        "-k --resolve api.baz.com:8443:10.79.0.1 https://api.baz.com:8443/",
    );
    assert_eq!(code, 35, "curl should see a reset during the handshake");
    let hellos = hellos.join().unwrap();
    assert_eq!(
        hellos[0].first(),
        Some(&22),
        "allowed ClientHello reached the server"
    );
    assert!(
        hellos[1].is_empty(),
        "denied ClientHello reached the server: {:?}",
        hellos[1]
    );

    // The server saw exactly the allowed requests.
    wait_logged(log, "GET /api/v2/split HTTP/1.1 200");
    let seen = access_log(log);
    for line in [
        "GET /api/v2/x HTTP/1.1 200",
        "foo.bar.com DELETE /anything HTTP/1.1 200",
        "GET /api/v2/six HTTP/1.1 200",
        "GET /api/v2/ka HTTP/1.1 200",
    ] {
        assert!(seen.contains(line), "{line} missing from:\n{seen}");
    }
    for absent in [
        "POST",
        "admin",
        "foo.baz.com",
        "/api/v2/big HTTP/1.1 200",
        "SSH",
    ] {
        assert!(
            !seen.contains(absent),
            "{absent} reached the server:\n{seen}"
        );
    }
    drop(agent);
}

#[test]
fn reset_response_fails_fast() {
    let Some(lab) = l7_lab("reset_response_fails_fast", "client", &[], &[]) else {
        return;
    };
    let (node, client) = (lab.node(), lab.ns("client"));
    link(node, client, 2);
    nginx(&lab, "node");
    // With enableLogging, every request decision is an audit line.
    let policy = INGRESS_POLICY.replace(
        "  - name: allow-api\n    action: Allow\n",
        "  - name: allow-api\n    action: Allow\n    enableLogging: true\n",
    );
    let audit = lab.dir().join("np.log");
    lab.write_policy("policy.yaml", &policy);
    let _agent = start_agent(
        &lab,
        &[("role", "web")],
        &[
            "--l7-deny-response",
            "reset",
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    let (code, body) = curl(client, "http://10.79.2.1/api/v2/r");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/r\n"));
    let started = Instant::now();
    let (code, _) = curl(client, "http://10.79.2.1/admin/r");
    let took = started.elapsed();
    // 56: "failure in receiving network data" (the reset), not 28 (timeout).
    assert_eq!(code, 56, "curl should see a reset");
    // Fast: the reset comes with the verdict, far inside curl's 5 s limit.
    assert!(
        took < Duration::from_secs(2),
        "denied request took {took:?}"
    );
    wait_logged(lab.dir(), "GET /api/v2/r HTTP/1.1 200");
    assert!(!access_log(lab.dir()).contains("admin"));
    let line_with = |verdict: &str| {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.contains("AntreaClusterNetworkPolicy:web-l7 allow-api") && l.contains(verdict)
            })
    };
    wait_until("audit lines", Duration::from_secs(5), || {
        line_with(" Allow ") && line_with(" Reject ")
    });
}

/// The spec's egress example, applied to the node.
const EGRESS_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: allow-web-access-to-internal-domain
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          egress-restriction: internal-domain-only
  egress:
    - name: allow-dns
      action: Allow
      ports:
        - protocol: TCP
          port: 53
        - protocol: UDP
          port: 53
    - name: allow-http-only
      action: Allow
      l7Protocols:
        - http:
            host: \"*.bar.com\"
";

#[test]
fn spec_egress_example_allows_dns_and_http_to_bar_com_only() {
    let Some(lab) = l7_lab(
        "spec_egress_example_allows_dns_and_http_to_bar_com_only",
        "server",
        &[],
        &["dnsmasq", "dig", "ping"],
    ) else {
        return;
    };
    let (server, node) = (lab.ns("server"), lab.node());
    link(server, node, 1);
    nginx(&lab, "server");
    lab.spawn(
        "server",
        &[
            "dnsmasq",
            "--no-daemon",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=10.79.1.1",
            "--address=/bar.com/10.79.1.1",
            "--address=/baz.com/10.79.1.1",
            &format!("--pid-file={}/dnsmasq.pid", lab.dir().display()),
        ],
    );
    wait_until("dnsmasq listening", Duration::from_secs(10), || {
        server.ok("ss -Hluan").contains("10.79.1.1:53 ")
    });
    // Before the agent, the server answers pings.
    let server_ip: IpAddr = "10.79.1.1".parse().unwrap();
    assert_eq!(lab.ping("node", server_ip, ALLOW_WAIT), PingOutcome::Reply);
    lab.write_policy("policy.yaml", EGRESS_POLICY);
    let _agent = start_agent(&lab, &[("egress-restriction", "internal-domain-only")], &[]);
    // DNS is allowed.
    let answer = node.ok("dig +short +time=2 +tries=1 @10.79.1.1 foo.bar.com");
    assert_eq!(answer.trim(), "10.79.1.1");
    // HTTP to *.bar.com passes, to foo.baz.com gets the 403.
    let (_, body) = curl(
        node,
        "--resolve foo.bar.com:80:10.79.1.1 -w ' %{http_code}' http://foo.bar.com/any/path",
    );
    assert_eq!(body, "ok /any/path\n 200");
    let (_, body) = curl(
        node,
        "--resolve foo.baz.com:80:10.79.1.1 -w ' %{http_code}' -o /dev/null http://foo.baz.com/x",
    );
    assert_eq!(body, " 403");
    // Non-HTTP traffic under the L7 rule: TCP is reset, ICMP dropped.
    let server_addr: SocketAddr = "10.79.1.1:80".parse().unwrap();
    let garbage = node.enter(|| send_in_pieces(server_addr, b"\x16\x03\x01\x00\x05hello", 100));
    assert_eq!(garbage.unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert_eq!(lab.ping("node", server_ip, DENY_WAIT), PingOutcome::NoReply);

    wait_logged(lab.dir(), "foo.bar.com GET /any/path HTTP/1.1 200");
    assert!(!access_log(lab.dir()).contains("baz"));
}

/// A "Pod" behind the Node: the Node routes between a client namespace
/// and the Pod's namespace, and the policy applies to the Pod.
const POD_POLICY: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {env: prod}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: l7}
status: {podIP: 10.79.4.2}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: web-api, namespace: shop}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - name: api-get
    action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {method: GET, path: /api/v2/*}}]
";

#[test]
fn pod_behind_the_node_is_inspected_in_forward() {
    let Some(lab) = l7_lab(
        "pod_behind_the_node_is_inspected_in_forward",
        "client",
        &["pod"],
        &[],
    ) else {
        return;
    };
    let (node, client, pod) = (lab.node(), lab.ns("client"), lab.ns("pod"));
    link(node, client, 3);
    node.ok(&format!(
        "sysctl -qw net.ipv4.ip_forward=1 && ip link add l7p type veth peer name l7q netns {} && \
         ip addr add 10.79.4.1/24 dev l7p && ip link set l7p up",
        pod.name()
    ));
    pod.ok("ip addr add 10.79.4.2/24 dev l7q && ip link set l7q up && \
            ip route add default via 10.79.4.1");
    client.ok("ip route add 10.79.4.0/24 via 10.79.3.1");
    nginx(&lab, "pod");
    lab.write_policy("policy.yaml", POD_POLICY);
    let _agent = start_agent(&lab, &[("role", "node")], &[]);

    let (code, body) = curl(client, "-w ' %{http_code}' http://10.79.4.2/api/v2/pod");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/pod\n 200"));
    let (code, body) = curl(client, "-i http://10.79.4.2/admin");
    assert_eq!(code, 0);
    assert!(body.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{body}");
    assert!(body.ends_with("rule api-get\n"), "{body}");
    let (code, body) = curl(
        client,
        "-w '%{http_code} %{num_connects}\\n' -o /dev/null http://10.79.4.2/api/v2/a \
         --next -w '%{http_code} %{num_connects}\\n' -o /dev/null -X POST \
         http://10.79.4.2/api/v2/b",
    );
    assert_eq!((code, body.as_str()), (0, "200 1\n403 0\n"));
    wait_logged(lab.dir(), "GET /api/v2/a HTTP/1.1 200");
    let seen = access_log(lab.dir());
    assert!(!seen.contains("admin") && !seen.contains("POST"), "{seen}");
}

/// What a client saw after writing raw request bytes: the status of each
/// complete response, in order, and whether the connection was reset.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) statuses: Vec<u16>,
    pub(crate) reset: bool,
}

impl Seen {
    /// Denied: answered 403 (and nothing else) or reset without an answer.
    pub(crate) fn denied(&self) -> bool {
        self.statuses == [403] || (self.statuses.is_empty() && self.reset)
    }
}

/// Writes `request` on `stream` exactly as given (one write, TCP_NODELAY)
/// and reads until `want` complete responses arrived, the connection
/// ended, or 5 s passed.
pub(crate) fn raw_exchange(stream: &mut TcpStream, request: &[u8], want: usize) -> Seen {
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut seen = Seen::default();
    if let Err(e) = stream.write_all(request) {
        seen.reset = e.kind() == ErrorKind::ConnectionReset;
        return seen;
    }
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.statuses.len() < want {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => {
                seen.reset = e.kind() == ErrorKind::ConnectionReset;
                break;
            }
        }
        // Take every complete response off the front.
        while let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if data.len() < end + 4 + length {
                break;
            }
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            seen.statuses.push(status);
            data.drain(..end + 4 + length);
        }
    }
    seen
}

/// Opens a connection from `client` to `addr`, sends `request` on it and
/// returns what came back (see [`raw_exchange`]).
fn raw_request(client: &Netns, addr: SocketAddr, request: &str, want: usize) -> Seen {
    let mut stream =
        client.enter(|| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).unwrap());
    raw_exchange(&mut stream, request.as_bytes(), want)
}

const BYPASS_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web-l7}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{nodeSelector: {matchLabels: {role: web}}}]
  ingress:
  - name: allow-api
    action: Allow
    from: [{ipBlock: {cidr: 10.79.0.0/16}}, {ipBlock: {cidr: 'fd79::/16'}}]
    ports: [{protocol: TCP, port: 80}]
    l7Protocols:
    - http: {method: GET, path: /api/v2/*}
    - http: {method: POST, path: /submit/*}
    - http: {path: /nohost/*}
    - http: {host: h.bar.com, path: /hosted/*}
";

/// Path tricks under a `GET /api/v2/*` rule, ambiguous heads, a missing
/// Host header and request smuggling, each as raw bytes against nginx.
/// Every path carries a marker so the access-log assertions are exact:
/// `dNN` must never reach nginx, `pNN` must be served and logged.
#[test]
fn raw_requests_cannot_bypass_l7_rules() {
    let Some(lab) = l7_lab("raw_requests_cannot_bypass_l7_rules", "client", &[], &[]) else {
        return;
    };
    let (node, client) = (lab.node(), lab.ns("client"));
    link(node, client, 5);
    nginx(&lab, "node");
    lab.write_policy("policy.yaml", BYPASS_POLICY);
    let _agent = start_agent(&lab, &[("role", "web")], &[]);
    let server: SocketAddr = "10.79.5.1:80".parse().unwrap();
    let get = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");

    // Paths a server resolves outside /api/v2/: denied.
    let mut denied: Vec<(&str, String)> = [
        "/api/v2/../admin-d01",
        "/api/v2/%2e%2e/admin-d02",
        "/api/v2/%2E%2e/admin-d03",
        "//admin-d04",
        "/api/v2/..%2fadmin-d05",
        "/api/v2/x/../../admin-d06",
        "/./admin-d07",
        "/api/v2/..%2Fadmin-d08",
        "/api/v2/..%5cadmin-d09",
        "/api/v2/..\\admin-d10",
        "/api%2fv2/admin-d11",
        "/api/v2/%2e%2e%2fadmin-d12",
        "/api/v2/%u002e%u002e/admin-d13",
        "/api/v2/x/..;/../../admin-d14",
        "/api/v2/.%2e/admin-d15",
        // `..;` is a name to nginx but `..` to servlet containers: refused.
        "/api/v2/..;/admin-d16",
    ]
    .into_iter()
    .map(|target| (target, get(target)))
    .collect();
    // Ambiguous heads naming an allowed path: denied for the ambiguity.
    denied.extend([
        (
            "CL and TE",
            "GET /api/v2/d20 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_string(),
        ),
        (
            "two Content-Lengths",
            "GET /api/v2/d21 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\
             Content-Length: 5\r\n\r\n"
                .to_string(),
        ),
        (
            "obs-fold (space)",
            "GET /api/v2/d22 HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n".to_string(),
        ),
        (
            "obs-fold (tab)",
            "GET /api/v2/d23 HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n".to_string(),
        ),
        (
            "bare LF",
            "GET /api/v2/d24 HTTP/1.1\nHost: x\n\n".to_string(),
        ),
        (
            "bare LF at the end only",
            "GET /api/v2/d25 HTTP/1.1\r\nHost: x\r\n\n".to_string(),
        ),
        (
            "absolute-form host differs from Host",
            "GET http://other.example/api/v2/d26 HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        ),
        (
            "two Host headers",
            "GET /api/v2/d27 HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n".to_string(),
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            "GET /api/v2/d28 HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_string(),
        ),
        (
            "space before the colon",
            "GET /api/v2/d29 HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\n".to_string(),
        ),
        ("HTTP/0.9 simple request", "GET /admin-d30\r\n".to_string()),
        // Missing Host: only rules without a host pattern can match.
        (
            "no Host, rule with a host pattern",
            "GET /hosted/d31 HTTP/1.0\r\n\r\n".to_string(),
        ),
        (
            "empty Host, rule with a host pattern",
            "GET /hosted/d32 HTTP/1.1\r\nHost: \r\n\r\n".to_string(),
        ),
    ]);
    let allowed: Vec<(&str, String)> = vec![
        ("/api/v2/./x-p01", get("/api/v2/./x-p01")),
        ("/api/v2//x-p02", get("/api/v2//x-p02")),
        ("/api/v2/%78-p03", get("/api/v2/%78-p03")),
        (
            "no Host, rule without a host pattern",
            "GET /nohost/p04 HTTP/1.0\r\n\r\n".to_string(),
        ),
        (
            "Host matching the rule's host pattern",
            "GET /hosted/p05 HTTP/1.0\r\nHost: h.bar.com\r\n\r\n".to_string(),
        ),
        (
            "absolute-form agreeing with Host",
            "GET http://x/api/v2/p06 HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        ),
    ];
    let mut report = String::new();
    let mut wrong = Vec::new();
    for (name, request) in &denied {
        let seen = raw_request(client, server, request, 1);
        report.push_str(&format!("denied?  {name:<40} {seen:?}\n"));
        if !seen.denied() {
            wrong.push(*name);
        }
    }
    for (name, request) in &allowed {
        let seen = raw_request(client, server, request, 1);
        report.push_str(&format!("allowed? {name:<40} {seen:?}\n"));
        if seen.statuses != [200] {
            wrong.push(*name);
        }
    }
    eprintln!("{report}");
    assert!(wrong.is_empty(), "wrong outcomes for {wrong:?}:\n{report}");

    // Smuggling. One keep-alive connection: an allowed POST whose body is
    // a request, answered; then a real request on the same connection,
    // judged on its own.
    let smuggled = "GET /admin-d40 HTTP/1.1\r\nHost: x\r\n\r\n";
    let post = |marker: &str| {
        format!(
            "POST /submit/{marker} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        )
    };
    let mut stream =
        client.enter(|| TcpStream::connect_timeout(&server, Duration::from_secs(3)).unwrap());
    let first = raw_exchange(&mut stream, post("p41").as_bytes(), 1);
    assert_eq!(first.statuses, [200], "POST with a request as body");
    let second = raw_exchange(&mut stream, get("/admin-d42").as_bytes(), 1);
    assert!(second.denied(), "pipelined GET /admin: {second:?}");
    // Pipelined in one write: the body is skipped, the request after it
    // decided on its own (allowed here).
    let both = format!("{}{}", post("p43"), get("/api/v2/p44"));
    let seen = raw_request(client, server, &both, 2);
    assert_eq!(seen.statuses, [200, 200], "POST + pipelined allowed GET");
    // Pipelined in one write with a denied request after the body.
    let both = format!("{}{}", post("s45"), get("/admin-d46"));
    // Either the segment holding both is denied as a whole (the POST
    // never reaches nginx), or the POST is served and the GET denied.
    let seen = raw_request(client, server, &both, 2);
    let s45_served = seen.statuses == [200, 403];
    assert!(
        seen.denied() || s45_served,
        "POST + pipelined denied GET: {seen:?}"
    );
    // Chunked body holding a request, then a denied request.
    let chunked = format!(
        "POST /submit/p47 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{smuggled}\r\n0\r\n\r\n",
        smuggled.len()
    );
    let mut stream =
        client.enter(|| TcpStream::connect_timeout(&server, Duration::from_secs(3)).unwrap());
    let first = raw_exchange(&mut stream, chunked.as_bytes(), 1);
    assert_eq!(first.statuses, [200], "chunked POST with a request as body");
    let second = raw_exchange(&mut stream, get("/admin-d48").as_bytes(), 1);
    assert!(
        second.denied(),
        "GET /admin after a chunked body: {second:?}"
    );

    // IPv6 segments carrying a Destination Options header: the request
    // behind the header chain is still read and judged.
    let server6: SocketAddr = "[fd79:5::1]:80".parse().unwrap();
    let mut stream = connect_with_dstopts(client, server6);
    let first = raw_exchange(&mut stream, get("/api/v2/p07").as_bytes(), 1);
    assert_eq!(first.statuses, [200], "allowed request with IPv6 options");
    let second = raw_exchange(&mut stream, get("/admin-d49").as_bytes(), 1);
    assert!(
        second.denied(),
        "denied request with IPv6 options: {second:?}"
    );
    let mut stream = connect_with_dstopts(client, server6);
    let seen = raw_exchange(&mut stream, get("/api/v2/..;/admin-d50").as_bytes(), 1);
    assert!(seen.denied(), "ambiguous path with IPv6 options: {seen:?}");

    // Addresses the Node gains after the agent started are the Node's:
    // its L7 rule applies to them at once.
    node.ok("ip addr add 10.79.5.99/24 dev l7a && ip addr add fd79:5::99/64 dev l7a nodad");
    for (address, allowed, denied) in [
        ("10.79.5.99:80", "/api/v2/p08", "/admin-d51"),
        ("[fd79:5::99]:80", "/api/v2/p09", "/admin-d52"),
    ] {
        let address: SocketAddr = address.parse().unwrap();
        let seen = raw_request(client, address, &get(allowed), 1);
        assert_eq!(seen.statuses, [200], "{allowed} via {address}");
        let seen = raw_request(client, address, &get(denied), 1);
        assert_eq!(seen.statuses, [403], "{denied} via {address}");
    }

    // nginx saw exactly the allowed requests, as sent.
    wait_logged(lab.dir(), "POST /submit/p47 HTTP/1.1 200");
    let seen = access_log(lab.dir());
    eprintln!("access log:\n{seen}");
    for n in 1..=9 {
        let marker = format!("p{n:02}");
        let line = seen
            .lines()
            .find(|l| l.contains(&marker))
            .unwrap_or_else(|| panic!("{marker} missing from:\n{seen}"));
        assert!(line.ends_with(" 200"), "{line}");
    }
    for line in [
        "GET /api/v2/./x-p01 ",
        "GET /api/v2//x-p02 ",
        "GET /api/v2/%78-p03 ",
    ] {
        assert!(seen.contains(line), "{line} missing from:\n{seen}");
    }
    for marker in ["p41", "p43", "p44", "p47"] {
        assert!(seen.contains(marker), "{marker} missing from:\n{seen}");
    }
    assert_eq!(
        seen.contains("POST /submit/s45 HTTP/1.1 200"),
        s45_served,
        "s45 served {s45_served} by the client's account:\n{seen}"
    );
    for n in 1..=52 {
        let marker = format!("d{n:02}");
        assert!(
            !seen.contains(&marker),
            "{marker} reached the server:\n{seen}"
        );
    }
    assert!(!seen.contains("admin"), "admin reached the server:\n{seen}");
}

/// Connects from `client` to `addr` (IPv6) with a Destination Options
/// header (one PadN option) on every segment.
fn connect_with_dstopts(client: &Netns, addr: SocketAddr) -> TcpStream {
    use std::os::fd::AsRawFd;
    const PADN: [u8; 8] = [0, 0, 1, 4, 0, 0, 0, 0];
    client.enter(|| {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
        // SAFETY: a valid socket and an 8-byte buffer that outlives the call.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_IPV6,
                libc::IPV6_DSTOPTS,
                PADN.as_ptr().cast(),
                PADN.len() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "IPV6_DSTOPTS: {}", std::io::Error::last_os_error());
        socket
            .connect_timeout(&addr.into(), Duration::from_secs(3))
            .unwrap();
        socket.into()
    })
}

/// Connections that end leave the L7 flow table: the client's FIN and RST
/// reach the L7 queue; a RST forgets the connection at once (a FIN after a
/// grace period, unit-tested in `l7::tests`), and the gauge says so.
#[test]
fn closed_connections_leave_the_flow_table() {
    let Some(lab) = l7_lab(
        "closed_connections_leave_the_flow_table",
        "client",
        &[],
        &[],
    ) else {
        return;
    };
    let (node, client) = (lab.node(), lab.ns("client"));
    link(node, client, 6);
    nginx(&lab, "node");
    lab.write_policy("policy.yaml", INGRESS_POLICY);
    let _agent = start_agent(
        &lab,
        &[("role", "web")],
        &["--metrics-address", "127.0.0.1:9481"],
    );
    let flows = || -> u64 {
        node.ok("curl -sS --max-time 5 http://127.0.0.1:9481/metrics")
            .lines()
            .filter(|l| l.starts_with("tollgate_l7_flows_active"))
            .map(|l| {
                l.rsplit_once(' ')
                    .expect("gauge value")
                    .1
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    // Closed with FIN (curl): tracked until the grace period ends, which
    // starts at the FIN: at the earliest here.
    let fins_started = Instant::now();
    for i in 0..5 {
        let (code, body) = curl(client, &format!("http://10.79.6.1/api/v2/fin{i}"));
        assert_eq!((code, body), (0, format!("ok /api/v2/fin{i}\n")));
    }
    wait_until("five connections tracked", Duration::from_secs(5), || {
        flows() == 5
    });
    assert!(
        fins_started.elapsed() < CLOSE_GRACE,
        "too slow to see the FIN flows in their grace period"
    );
    // Closed with RST (SO_LINGER 0) after a keep-alive request: forgotten.
    for i in 0..5 {
        client.enter(|| {
            let mut stream = TcpStream::connect_timeout(
                &"10.79.6.1:80".parse().unwrap(),
                Duration::from_secs(3),
            )
            .unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            write!(stream, "GET /api/v2/rst{i} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
            let mut answer = [0u8; 512];
            let n = stream.read(&mut answer).unwrap();
            assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: setsockopt on an open socket with a valid, sized option.
            let rc = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&stream),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    std::ptr::addr_of!(linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0);
        });
    }
    // One more segment after the last RST updates the gauge. The RSTs'
    // connections are gone: at most the five FIN flows and the last one
    // are left (11 with the RST flows). While the FINs' grace period
    // lasts, exactly those six; after it, fewer (a bound from the events,
    // not from the clock of a loaded machine).
    assert_eq!(curl(client, "http://10.79.6.1/api/v2/last").0, 0);
    wait_until("RST connections forgotten", Duration::from_secs(5), || {
        flows() <= 6
    });
    let left = flows();
    if fins_started.elapsed() < CLOSE_GRACE {
        assert_eq!(left, 6, "FIN flows in their grace period and the last one");
    }
    let counters = node.ok("iptables -w -L TOLLGATE-L7 -v -n -x");
    let matched = |flag: &str| {
        counters
            .lines()
            .find(|l| l.contains(&format!("flags:0x{flag}")))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(matched("01/0x01") >= 5, "FIN rule:\n{counters}");
    assert!(matched("04/0x04") >= 5, "RST rule:\n{counters}");
}
