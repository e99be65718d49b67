//! L7 HTTP rules on the wire (root only; skipped otherwise): `tollgate run`
//! in one namespace, real nginx and curl on either side of a veth pair.
//! Ingress: allowed and denied requests (403 with the reason, never in the
//! server's access log), host globs, IPv6, keep-alive with an allowed then
//! a denied request, a head split over many segments, an upload larger
//! than the head buffer, non-HTTP bytes and a 20 KiB header (reset); the
//! `reset` response and the audit lines of a logged L7 rule; a Pod routed through the Node (FORWARD); and the
//! spec's egress example (allow DNS, HTTP only to `*.bar.com`).
//! Addresses: 10.79.0.0/16 and fd79::/16.

mod common;

use common::{capture_stderr, is_root, wait_until, within, NetNs};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha1::{Digest, Sha1};

/// A background process, killed on drop.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tollgate run` with its stderr collected.
struct Agent {
    _process: Background,
    log: Arc<Mutex<String>>,
}

impl Agent {
    fn start(ns: &NetNs, policies: &Path, labels: &str, extra: &[&str]) -> Agent {
        let mut args = vec![
            env!("CARGO_BIN_EXE_tollgate"),
            "run",
            "--policies",
            policies.to_str().unwrap(),
            "--node-name",
            "l7",
            "--node-labels",
            labels,
            "--queues",
            "1",
        ];
        args.extend_from_slice(extra);
        let mut child = ns
            .command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture_stderr(&mut child);
        let agent = Agent {
            _process: Background(child),
            log,
        };
        wait_until("ruleset applied", Duration::from_secs(20), || {
            agent.log.lock().unwrap().contains("ruleset applied")
        });
        agent
    }
}

/// Two namespaces joined by a veth pair: `a` holds `<net>.1` and
/// `fd79:<n>::1`, `b` holds `.2`.
fn pair(tag: &str, n: u8) -> (NetNs, NetNs) {
    let a = NetNs::create(&format!("{tag}a"));
    let b = NetNs::create(&format!("{tag}b"));
    a.ok(&format!(
        "ip link set lo up && ip link add l7a type veth peer name l7b netns {} && \
         ip addr add 10.79.{n}.1/24 dev l7a && ip addr add fd79:{n}::1/64 dev l7a nodad && \
         ip link set l7a up",
        b.0
    ));
    b.ok(&format!(
        "ip link set lo up && ip addr add 10.79.{n}.2/24 dev l7b && \
         ip addr add fd79:{n}::2/64 dev l7b nodad && ip link set l7b up"
    ));
    (a, b)
}

/// nginx answering `ok <uri>` to everything on port 80 (IPv4 and IPv6),
/// logging `$host $request $status` to `access.log` in `dir`.
fn nginx(ns: &NetNs, dir: &Path) -> Background {
    let d = dir.display();
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
    let path = dir.join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let child = ns
        .command(&[
            "nginx",
            "-c",
            path.to_str().unwrap(),
            "-p",
            dir.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = Background(child);
    wait_until("nginx listening", Duration::from_secs(10), || {
        let listening = ns.ok("ss -Htln");
        listening.contains("0.0.0.0:80 ") && listening.contains("[::]:80 ")
    });
    process
}

fn access_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("access.log")).unwrap_or_default()
}

/// Waits until nginx has logged `line` (it logs after the response).
fn wait_logged(dir: &Path, line: &str) {
    wait_until(line, Duration::from_secs(5), || {
        access_log(dir).contains(line)
    });
}

/// Runs curl; returns (exit status, stdout).
fn curl(ns: &NetNs, args: &str) -> (i32, String) {
    let out = ns.sh(&format!("curl -sS -g --max-time 5 {args}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
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

fn write_policy(dir: &Path, yaml: &str) -> PathBuf {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("policy.yaml"), yaml).unwrap();
    policies
}

#[test]
fn ingress_requests_are_matched_one_by_one() {
    if !is_root() {
        return;
    }
    let (node, client) = pair("l7i", 0);
    let dir = tempfile::tempdir().unwrap();
    let _nginx = nginx(&node, dir.path());
    let uploads = within(&node, || TcpListener::bind("10.79.0.1:8080").unwrap());
    let tls = within(&node, || TcpListener::bind("10.79.0.1:8443").unwrap());
    let agent = Agent::start(
        &node,
        &write_policy(dir.path(), INGRESS_POLICY),
        "role=web",
        &[],
    );
    let log = dir.path();

    // Allowed, and denied with a 403 naming the rule.
    let (code, body) = curl(&client, "-w ' %{http_code}' http://10.79.0.1/api/v2/x");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/x\n 200"));
    for args in [
        "-X POST http://10.79.0.1/api/v2/x",
        "http://10.79.0.1/admin",
    ] {
        let (code, body) = curl(&client, &format!("-i {args}"));
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
        &client,
        "-X DELETE -H 'Host: foo.bar.com' -w ' %{http_code}' http://10.79.0.1/anything",
    );
    assert_eq!(body, "ok /anything\n 200");
    let (_, body) = curl(
        &client,
        "-X DELETE -H 'Host: foo.baz.com' -w ' %{http_code}' -o /dev/null http://10.79.0.1/anything",
    );
    assert_eq!(body, " 403");
    // IPv6.
    let (_, body) = curl(&client, "-w ' %{http_code}' http://[fd79:0::1]/api/v2/six");
    assert_eq!(body, "ok /api/v2/six\n 200");
    let (_, body) = curl(
        &client,
        "-w ' %{http_code}' -o /dev/null http://[fd79:0::1]/admin6",
    );
    assert_eq!(body, " 403");

    // Keep-alive: one connection, an allowed then a denied request.
    let (code, body) = curl(
        &client,
        "-w '%{http_code} %{num_connects}\\n' -o /dev/null http://10.79.0.1/api/v2/ka \
         -o /dev/null http://10.79.0.1/admin/ka",
    );
    assert_eq!((code, body.as_str()), (0, "200 1\n403 0\n"));

    // A head split over many segments is matched once complete.
    let server: SocketAddr = "10.79.0.1:80".parse().unwrap();
    let allowed = within(&client, || {
        send_in_pieces(
            server,
            b"GET /api/v2/split HTTP/1.1\r\nHost: x\r\nX-Pad: 1234567890\r\n\r\n",
            10,
        )
    })
    .unwrap();
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    let denied = within(&client, || {
        send_in_pieces(
            server,
            b"GET /admin/split HTTP/1.1\r\nHost: x\r\nX-Pad: 1234567890\r\n\r\n",
            10,
        )
    })
    .unwrap();
    assert!(denied.starts_with("HTTP/1.1 403 Forbidden"), "{denied}");

    // An upload larger than the head buffer passes intact.
    let upload = upload_server(uploads);
    let file = dir.path().join("upload.bin");
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let (code, body) = curl(
        &client,
        &format!(
            "-H 'Host: up.bar.com' -H 'Expect:' --data-binary @{} http://10.79.0.1:8080/upload",
            file.display()
        ),
    );
    let expected = hex(&Sha1::digest(&data));
    assert_eq!((code, body.as_str()), (0, expected.as_str()));
    assert_eq!(upload.join().unwrap(), expected);

    // Non-HTTP bytes: reset, no answer.
    let started = Instant::now();
    let garbage = within(&client, || {
        send_in_pieces(server, b"SSH-2.0-OpenSSH_9.6\r\n", 100)
    });
    let error = garbage.expect_err("non-HTTP bytes were answered");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // A 20 KiB header: reset. (The head outgrows the client's initial
    // window, so its first part reaches the server before the reset: the
    // server logs an incomplete request with status 400 and never
    // processes it.)
    let big = "a".repeat(20 * 1024);
    let (code, _) = curl(
        &client,
        &format!("-H 'X-Big: {big}' http://10.79.0.1/api/v2/big"),
    );
    assert_eq!(code, 56, "curl should see a reset");

    // TLS: the ClientHello's server name decides (the test server speaks
    // no TLS, so curl fails either way; what matters is what it received).
    let hellos = first_bytes_server(tls, 2);
    let (code, _) = curl(
        &client,
        "-k --resolve api.bar.com:8443:10.79.0.1 https://api.bar.com:8443/",
    );
    assert_ne!(code, 0);
    let (code, _) = curl(
        &client,
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
    if !is_root() {
        return;
    }
    let (node, client) = pair("l7r", 2);
    let dir = tempfile::tempdir().unwrap();
    let _nginx = nginx(&node, dir.path());
    // With enableLogging, every request decision is an audit line.
    let policy = INGRESS_POLICY.replace(
        "  - name: allow-api\n    action: Allow\n",
        "  - name: allow-api\n    action: Allow\n    enableLogging: true\n",
    );
    let audit = dir.path().join("np.log");
    let _agent = Agent::start(
        &node,
        &write_policy(dir.path(), &policy),
        "role=web",
        &[
            "--l7-deny-response",
            "reset",
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    let (code, body) = curl(&client, "http://10.79.2.1/api/v2/r");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/r\n"));
    let started = Instant::now();
    let (code, _) = curl(&client, "http://10.79.2.1/admin/r");
    assert_eq!(code, 56, "curl should see a reset");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    wait_logged(dir.path(), "GET /api/v2/r HTTP/1.1 200");
    assert!(!access_log(dir.path()).contains("admin"));
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
    if !is_root() {
        return;
    }
    let (server, node) = pair("l7e", 1);
    let dir = tempfile::tempdir().unwrap();
    let _nginx = nginx(&server, dir.path());
    let _dns = Background(
        server
            .command(&[
                "dnsmasq",
                "--no-daemon",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=10.79.1.1",
                "--address=/bar.com/10.79.1.1",
                "--address=/baz.com/10.79.1.1",
                &format!("--pid-file={}/dnsmasq.pid", dir.path().display()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("dnsmasq listening", Duration::from_secs(10), || {
        server.ok("ss -Hluan").contains("10.79.1.1:53 ")
    });
    let _agent = Agent::start(
        &node,
        &write_policy(dir.path(), EGRESS_POLICY),
        "egress-restriction=internal-domain-only",
        &[],
    );
    // DNS is allowed.
    let answer = node.ok("dig +short +time=2 +tries=1 @10.79.1.1 foo.bar.com");
    assert_eq!(answer.trim(), "10.79.1.1");
    // HTTP to *.bar.com passes, to foo.baz.com gets the 403.
    let (_, body) = curl(
        &node,
        "--resolve foo.bar.com:80:10.79.1.1 -w ' %{http_code}' http://foo.bar.com/any/path",
    );
    assert_eq!(body, "ok /any/path\n 200");
    let (_, body) = curl(
        &node,
        "--resolve foo.baz.com:80:10.79.1.1 -w ' %{http_code}' -o /dev/null http://foo.baz.com/x",
    );
    assert_eq!(body, " 403");
    // Non-HTTP traffic under the L7 rule: TCP is reset, ICMP dropped.
    let server_addr: SocketAddr = "10.79.1.1:80".parse().unwrap();
    let garbage = within(&node, || {
        send_in_pieces(server_addr, b"\x16\x03\x01\x00\x05hello", 100)
    });
    assert_eq!(garbage.unwrap_err().kind(), ErrorKind::ConnectionReset);
    assert!(!node.sh("ping -n -c 1 -W 1 10.79.1.1").status.success());

    wait_logged(dir.path(), "foo.bar.com GET /any/path HTTP/1.1 200");
    assert!(!access_log(dir.path()).contains("baz"));
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
    if !is_root() {
        return;
    }
    let (node, client) = pair("l7f", 3);
    let pod = NetNs::create("l7fp");
    node.ok(&format!(
        "sysctl -qw net.ipv4.ip_forward=1 && ip link add l7p type veth peer name l7q netns {} && \
         ip addr add 10.79.4.1/24 dev l7p && ip link set l7p up",
        pod.0
    ));
    pod.ok(
        "ip link set lo up && ip addr add 10.79.4.2/24 dev l7q && ip link set l7q up && \
            ip route add default via 10.79.4.1",
    );
    client.ok("ip route add 10.79.4.0/24 via 10.79.3.1");
    let dir = tempfile::tempdir().unwrap();
    let _nginx = nginx(&pod, dir.path());
    let _agent = Agent::start(
        &node,
        &write_policy(dir.path(), POD_POLICY),
        "role=node",
        &[],
    );

    let (code, body) = curl(&client, "-w ' %{http_code}' http://10.79.4.2/api/v2/pod");
    assert_eq!((code, body.as_str()), (0, "ok /api/v2/pod\n 200"));
    let (code, body) = curl(&client, "-i http://10.79.4.2/admin");
    assert_eq!(code, 0);
    assert!(body.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{body}");
    assert!(body.ends_with("rule api-get\n"), "{body}");
    let (code, body) = curl(
        &client,
        "-w '%{http_code} %{num_connects}\\n' -o /dev/null http://10.79.4.2/api/v2/a \
         --next -w '%{http_code} %{num_connects}\\n' -o /dev/null -X POST \
         http://10.79.4.2/api/v2/b",
    );
    assert_eq!((code, body.as_str()), (0, "200 1\n403 0\n"));
    wait_logged(dir.path(), "GET /api/v2/a HTTP/1.1 200");
    let seen = access_log(dir.path());
    assert!(!seen.contains("admin") && !seen.contains("POST"), "{seen}");
}

/// Connections that end leave the L7 flow table: the client's FIN and RST
/// reach the L7 queue; a RST forgets the connection at once (a FIN after a
/// grace period, unit-tested in `l7::tests`), and the gauge says so.
#[test]
fn closed_connections_leave_the_flow_table() {
    if !is_root() {
        return;
    }
    let (node, client) = pair("l7c", 5);
    let dir = tempfile::tempdir().unwrap();
    let _nginx = nginx(&node, dir.path());
    let _agent = Agent::start(
        &node,
        &write_policy(dir.path(), INGRESS_POLICY),
        "role=web",
        &["--metrics-address", "127.0.0.1:9481"],
    );
    let flows = || -> u64 {
        node.ok("curl -sS --max-time 5 http://127.0.0.1:9481/metrics")
            .lines()
            .find_map(|l| l.strip_prefix("tollgate_l7_flows_active "))
            .expect("gauge exported")
            .trim()
            .parse()
            .unwrap()
    };
    // Closed with FIN (curl): tracked until the grace period ends.
    for i in 0..5 {
        let (code, body) = curl(&client, &format!("http://10.79.5.1/api/v2/fin{i}"));
        assert_eq!((code, body), (0, format!("ok /api/v2/fin{i}\n")));
    }
    wait_until("five connections tracked", Duration::from_secs(5), || {
        flows() == 5
    });
    // Closed with RST (SO_LINGER 0) after a keep-alive request: forgotten.
    for i in 0..5 {
        within(&client, || {
            let mut stream = TcpStream::connect_timeout(
                &"10.79.5.1:80".parse().unwrap(),
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
    // One more segment after the last RST updates the gauge; the RSTs'
    // connections are gone, the FINs' are still in their grace period.
    assert_eq!(curl(&client, "http://10.79.5.1/api/v2/last").0, 0);
    wait_until("RST connections forgotten", Duration::from_secs(5), || {
        flows() == 6
    });
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
