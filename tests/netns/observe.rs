//! Observability of `tollgate run` end to end: the audit log (dedup of
//! Drop lines, one line per allowed connection, a rate limit that skips
//! lines but never packets, Kubernetes NetworkPolicy lines, L7 request
//! lines in text and JSON), the metrics endpoint as traffic flows, every
//! declared counter scraped, and `tollgate status` / `get policies`;
//! `tollgate observe`, `log-level`, `bundle` and `status --watch` against
//! a running agent; a real Prometheus scraping it with the shipped
//! dashboard's queries and alert rules.
//!
//! Addresses: 10.61.1-8.0/24, 10.61.10-11.0/24 (10.61.9.0/24 is
//! benches/audit_overload.sh).

use crate::harness::{poll_until, wait_until, AgentOptions, Lab, Netns, AGENT_WAIT};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Agent options: node `obs` labelled `role=obs`, one queue, `extra`
/// arguments.
fn options(lab: &Lab, extra: &[&str]) -> AgentOptions {
    lab.agent_options()
        .node_name("obs")
        .labels(&[("role", "obs")])
        .queues(1)
        .args(extra)
}

/// A node namespace (10.61.N.1) and a client namespace (10.61.N.2), with
/// the lab's policy file `p.yaml` holding [`policy`]`(N)`.
struct Pair {
    lab: Lab,
    node: Netns,
    client: Netns,
    subnet: u8,
}

impl Pair {
    fn new(test: &'static str, subnet: u8) -> Option<Pair> {
        Pair::requiring(test, subnet, &[])
    }

    /// As [`Pair::new`], the test needing `tools` too.
    fn requiring(test: &'static str, subnet: u8, tools: &[&'static str]) -> Option<Pair> {
        let lab = Lab::builder(test)
            .unlinked("client")
            .require(&["curl", "ping", "timeout"])
            .require(tools)
            .build()?;
        let (node, client) = (lab.node().clone(), lab.ns("client").clone());
        node.ok(&format!(
            "ip link add va type veth peer name vb netns {} && \
             ip addr add 10.61.{subnet}.1/24 dev va && ip link set va up",
            client.name()
        ));
        client.ok(&format!(
            "ip addr add 10.61.{subnet}.2/24 dev vb && ip link set vb up"
        ));
        lab.write_policy("p.yaml", &policy(subnet));
        Some(Pair {
            lab,
            node,
            client,
            subnet,
        })
    }

    fn node_ip(&self) -> String {
        format!("10.61.{}.1", self.subnet)
    }
}

/// The node allows and logs TCP 8080 from the client, and drops and logs
/// ICMP from it; everything else from the client falls through (allowed).
fn policy(subnet: u8) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: observe
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          role: obs
  ingress:
    - action: Allow
      name: allow-web
      enableLogging: true
      logLabel: web
      from:
        - ipBlock:
            cidr: 10.61.{subnet}.0/24
      ports:
        - protocol: TCP
          port: 8080
    - action: Drop
      name: drop-ping
      enableLogging: true
      from:
        - ipBlock:
            cidr: 10.61.{subnet}.0/24
      protocols:
        - icmp:
            icmpType: 8
"
    )
}

/// A TCP server on the node counting connections and bytes received.
struct Counting {
    connections: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

fn serve(pair: &Pair, port: u16) -> Counting {
    let address = format!("{}:{port}", pair.node_ip());
    let listener = pair.node.enter(|| TcpListener::bind(&address).unwrap());
    let connections = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (c, b) = (Arc::clone(&connections), Arc::clone(&bytes));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            c.fetch_add(1, Ordering::Relaxed);
            let b = Arc::clone(&b);
            std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while let Ok(n @ 1..) = stream.read(&mut buf) {
                    b.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
    });
    Counting { connections, bytes }
}

/// Opens `n` connections from the client, each sending `hello` (5 bytes).
fn connect_n(pair: &Pair, port: u16, n: usize) {
    let address = format!("{}:{port}", pair.node_ip());
    pair.client.enter(|| {
        for _ in 0..n {
            let mut s =
                TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(3))
                    .expect("allowed connection");
            s.write_all(b"hello").unwrap();
        }
    });
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn lines_with(text: &str, needle: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn audit_log_dedups_drops_and_logs_each_allowed_connection() {
    let Some(pair) = Pair::new("audit_log_dedups_drops_and_logs_each_allowed_connection", 1) else {
        return;
    };
    let server = serve(&pair, 8080);
    let log = pair.lab.dir().join("np.log");
    let mut agent = pair
        .lab
        .start_agent(options(&pair.lab, &["--audit-log", log.to_str().unwrap()]));
    agent.wait_generation(1);

    // Allow: one line per new connection.
    connect_n(&pair, 8080, 5);
    wait_until("5 allow lines", Duration::from_secs(5), || {
        lines_with(&read(&log), " allow-web ").len() == 5
    });
    let allow = lines_with(&read(&log), " allow-web ");
    let ip = pair.node_ip();
    for line in &allow {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 16, "{line}");
        assert_eq!(
            &f[2..8],
            [
                "AntreaPolicyIngressRule",
                "AntreaClusterNetworkPolicy:observe",
                "allow-web",
                "Ingress",
                "Allow",
                "1"
            ],
            "{line}"
        );
        assert_eq!(f[8], "obs");
        assert_eq!(f[9], "10.61.1.2");
        assert!(f[10].parse::<u16>().is_ok(), "{line}");
        assert_eq!(
            &f[11..],
            [ip.as_str(), "8080", "TCP", "60", "web"],
            "{line}"
        );
    }
    let ports: std::collections::BTreeSet<&str> = allow
        .iter()
        .map(|l| l.split(' ').nth(10).unwrap())
        .collect();
    assert_eq!(ports.len(), 5, "one line per connection: {allow:#?}");
    // The line is written when the connection is decided, before the
    // server accepts it.
    wait_until("server accepted 5", Duration::from_secs(5), || {
        server.connections.load(Ordering::Relaxed) == 5
    });

    // Drop: 50 pings, nominally a quarter of a second long. Each dedup
    // window (one second) gives a line for its first packet and, when more
    // came, a summary `[N packets in D]` as it closes: on an idle machine
    // one window (a line and `[50 packets in ~1s]`), on a loaded one the
    // pings may spread over more. The check is bounded by the events, not
    // the clock: the windows account for exactly the 50 packets.
    let expected = format!(
        "AntreaPolicyIngressRule AntreaClusterNetworkPolicy:observe drop-ping Ingress Drop 2 obs 10.61.1.2 <nil> {ip} <nil> ICMP 84 <nil>"
    );
    let out = pair
        .client
        .sh(&format!("timeout 5 ping -c 50 -i 0.005 -W 1 -q {ip}"));
    assert!(
        out.stdout.contains("50 packets transmitted"),
        "{}",
        out.stdout
    );
    let packets = |windows: &[Window]| windows.iter().map(|w| w.packets).sum::<u64>();
    wait_until("every ping accounted for", Duration::from_secs(5), || {
        packets(&windows(&read(&log), &expected)) == 50
    });
    let after_pings = windows(&read(&log), &expected);
    assert!(after_pings[0].packets >= 1, "{after_pings:?}");
    for window in &after_pings {
        // A window closes a second after its first packet (later on a
        // loaded machine), so every summary spans at least a second.
        assert!(window.seconds.is_none_or(|s| s >= 1.0), "{after_pings:?}");
    }
    let drop_lines = lines_with(&read(&log), " drop-ping ").len();
    // Nothing more: a ping in a later window would have been logged at
    // once, before the line of a connection decided after it.
    connect_n(&pair, 8080, 1);
    wait_until("sixth allow line", Duration::from_secs(5), || {
        lines_with(&read(&log), " allow-web ").len() == 6
    });
    assert_eq!(lines_with(&read(&log), " drop-ping ").len(), drop_lines);

    // A window still open at SIGTERM is summarised before the agent exits.
    let pinged = Instant::now();
    let out = pair
        .client
        .sh(&format!("timeout 5 ping -c 5 -i 0.005 -W 0.05 -q {ip}"));
    assert!(out.stdout.contains("5 packets transmitted"));
    wait_until("a line for the new window", Duration::from_secs(5), || {
        lines_with(&read(&log), " drop-ping ").len() > drop_lines
    });
    let open_for = pinged.elapsed();
    agent.stop();
    let all = windows(&read(&log), &expected);
    assert_eq!(packets(&all), 55, "{all:?}\n{}", read(&log));
    if open_for < Duration::from_millis(900) {
        // SIGTERM came within a second of the first of the five pings, so
        // they all fell in one window, still open then: closed (and
        // summarised) by the shutdown, not by the clock.
        let last = all.last().expect("windows");
        assert_eq!(last.packets, 5, "{all:?}");
        assert!(last.seconds.is_some_and(|s| s < 1.0), "{all:?}");
    }
    eprintln!("np.log:\n{}", read(&log));
}

/// One dedup window of a Drop line in the audit log: how many packets it
/// counted, and the duration its summary reports (none for a lone packet).
#[derive(Debug)]
struct Window {
    packets: u64,
    seconds: Option<f64>,
}

/// The windows of the audit lines ending with `fields`: each plain line
/// opens one, a summary (`... [N packets in Ds]`) right after it closes it.
/// Panics on a line or summary of another shape.
fn windows(log: &str, fields: &str) -> Vec<Window> {
    let mut windows: Vec<Window> = Vec::new();
    for line in log.lines().filter(|l| l.contains(fields)) {
        match line.split_once(" [") {
            None => {
                assert!(line.ends_with(fields), "{line}");
                windows.push(Window {
                    packets: 1,
                    seconds: None,
                });
            }
            Some((head, summary)) => {
                assert!(head.ends_with(fields), "{line}");
                let (count, duration) = summary
                    .strip_suffix(']')
                    .and_then(|s| s.split_once(" packets in "))
                    .unwrap_or_else(|| panic!("summary {line}"));
                let open = windows
                    .last_mut()
                    .filter(|w| w.seconds.is_none() && w.packets == 1)
                    .unwrap_or_else(|| panic!("summary without its line: {line}"));
                open.packets = count.parse().unwrap_or_else(|_| panic!("{line}"));
                open.seconds =
                    Some(go_seconds(duration).unwrap_or_else(|| panic!("duration in {line}")));
            }
        }
    }
    windows
}

/// Seconds of a Go duration as the audit log prints it (`1.0008s`,
/// `35.2ms`, `870µs`, `500ns`).
fn go_seconds(text: &str) -> Option<f64> {
    [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)]
        .iter()
        .find_map(|(unit, scale)| Some(text.strip_suffix(unit)?.parse::<f64>().ok()? * scale))
}

/// Counters of a metrics exposition: `name{labels}` → value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn scrape(ns: &Netns, port: u16) -> BTreeMap<String, f64> {
    let text = ns.ok(&format!(
        "curl -sf --max-time 5 http://127.0.0.1:{port}/metrics"
    ));
    assert!(text.ends_with("# EOF\n"), "{text}");
    parse_metrics(&text)
}

/// The value of series `key`; panics when the series is not exported (a
/// renamed or lost series must not read as 0).
#[track_caller]
fn value(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("series {key} not exported: {:#?}", m.keys()))
}

/// A counter series that the agent creates on its first increment: 0
/// until then.
fn count(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

#[test]
fn rate_limit_skips_lines_without_losing_packets() {
    let Some(pair) = Pair::new("rate_limit_skips_lines_without_losing_packets", 2) else {
        return;
    };
    let server = serve(&pair, 8080);
    let log = pair.lab.dir().join("np.log");
    let config = pair.lab.dir().join("config.yaml");
    std::fs::write(
        &config,
        "auditRate: 1\nauditBurst: 5\nmetricsAddress: 127.0.0.1:9461\n",
    )
    .unwrap();
    let mut agent = pair.lab.start_agent(options(
        &pair.lab,
        &[
            "--config",
            config.to_str().unwrap(),
            "--audit-log",
            log.to_str().unwrap(),
        ],
    ));
    agent.wait_generation(1);

    let n = 60;
    let started = Instant::now();
    connect_n(&pair, 8080, n);
    let elapsed = started.elapsed();
    wait_until("every byte delivered", Duration::from_secs(5), || {
        server.bytes.load(Ordering::Relaxed) == 5 * n as u64
    });
    assert_eq!(server.connections.load(Ordering::Relaxed), n as u64);
    // Every connection decided; written + skipped lines account for all.
    let accounted = |m: &BTreeMap<String, f64>| {
        value(m, "tollgate_audit_lines_written_total")
            + count(
                m,
                "tollgate_audit_lines_skipped_total{reason=\"rate_limit\"}",
            )
    };
    let end = Instant::now() + Duration::from_secs(5);
    while accounted(&scrape(&pair.node, 9461)) != n as f64 {
        assert!(
            Instant::now() < end,
            "lines not accounted for: {:#?}",
            scrape(&pair.node, 9461)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The writer admits lines on its own clock, between the first
    // connection and the moment every line was accounted for: at most the
    // burst (5) plus one per second of that span (rounded up).
    let accounted_by = started.elapsed();
    let written = lines_with(&read(&log), " allow-web ").len();
    let allowed_by_rate = 5 + accounted_by.as_secs() as usize + 1;
    assert!(
        (5..=allowed_by_rate).contains(&written),
        "{written} lines, all accounted for {accounted_by:?} after the first connection"
    );
    let m = scrape(&pair.node, 9461);
    eprintln!(
        "{n} connections in {elapsed:?}, all delivered; {written} audit lines written, {} skipped",
        n - written
    );
    assert_eq!(
        value(
            &m,
            "tollgate_audit_lines_skipped_total{reason=\"rate_limit\"}"
        ),
        (n - written) as f64
    );
    assert_eq!(
        value(
            &m,
            "tollgate_verdicts_total{action=\"Allow\",tier=\"securityops\"}"
        ),
        n as f64
    );
}

fn tollgate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn metrics_move_with_traffic_and_status_answers() {
    let Some(pair) = Pair::new("metrics_move_with_traffic_and_status_answers", 3) else {
        return;
    };
    let _server = serve(&pair, 8080);
    let socket: PathBuf = pair.lab.dir().join("run/tollgate.sock");
    let mut options = options(
        &pair.lab,
        &[
            "--metrics-address",
            "127.0.0.1:9463",
            "--log-format",
            "json",
        ],
    );
    options.status_socket = socket.clone();
    let mut agent = pair.lab.start_agent(options);
    agent.wait_for_log(r#""message":"ruleset applied","generation":1"#, AGENT_WAIT);

    let before = scrape(&pair.node, 9463);
    assert_eq!(value(&before, "tollgate_ruleset_generation"), 1.0);
    assert_eq!(value(&before, "tollgate_policies"), 1.0);
    assert_eq!(value(&before, "tollgate_last_reload_success"), 1.0);
    connect_n(&pair, 8080, 3);
    let out = pair
        .client
        .sh(&format!("ping -c 2 -i 0.2 -W 1 -q {}", pair.node_ip()));
    // Exit 1: no reply (not 2, an error, nor 124, the timeout).
    assert_eq!(out.code(), Some(1), "pings are dropped: {out:?}");
    let after = scrape(&pair.node, 9463);
    let delta = |key: &str| value(&after, key) - count(&before, key);
    assert_eq!(
        delta("tollgate_verdicts_total{action=\"Allow\",tier=\"securityops\"}"),
        3.0
    );
    assert_eq!(
        delta("tollgate_verdicts_total{action=\"Drop\",tier=\"securityops\"}"),
        2.0
    );
    assert_eq!(
        delta("tollgate_rule_hits_total{policy=\"AntreaClusterNetworkPolicy:observe\",rule=\"allow-web\",action=\"Allow\"}"),
        3.0
    );
    assert!(delta("tollgate_queue_packets_total{queue=\"100\"}") >= 5.0);
    assert!(delta("tollgate_verdict_latency_seconds_count{queue=\"100\"}") >= 5.0);
    assert_eq!(
        value(&after, "tollgate_queue_overflows_total{queue=\"100\"}"),
        0.0
    );
    assert!(after.contains_key("tollgate_queue_kernel_dropped_total{queue=\"100\"}"));

    // tollgate status against the running agent.
    let socket_arg = socket.to_str().unwrap();
    let meta = std::fs::metadata(&socket).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let out = tollgate(&["status", "--socket", socket_arg, "-o", "wide"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "node:               obs",
        "ruleset generation: 1",
        "policies loaded:    1 (2 rules)",
        "last reload:        none since start",
        "fail mode:          closed",
        "metrics:            127.0.0.1:9463",
    ] {
        assert!(text.contains(expected), "{expected:?} missing in\n{text}");
    }
    // The queue's row in the counters table (the health table comes first).
    let (_, counters) = text.split_once("\nQUEUE ALLOWED ").unwrap();
    let queue_line = counters.lines().find(|l| l.starts_with("100 ")).unwrap();
    let allowed: u64 = queue_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(allowed >= 3, "{queue_line}");

    let out = tollgate(&[
        "get",
        "policies",
        "--sort-by",
        "effectivePriority",
        "--socket",
        socket_arg,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("SOURCE"), "{table}");
    assert!(
        table.contains("AntreaClusterNetworkPolicy:observe securityops 100"),
        "{table}"
    );

    // An invalid change: the status and the metrics say so.
    pair.lab
        .write_policy("p.yaml", &policy(3).replace("Drop", "Maybe"));
    agent.wait_for_log("reload rejected:", AGENT_WAIT);
    let out = tollgate(&["status", "--socket", socket_arg, "--output", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["rulesetGeneration"], 1);
    let error = json["lastReload"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("rejected: ") && error.contains("p.yaml"),
        "{error}"
    );
    let m = scrape(&pair.node, 9463);
    assert_eq!(value(&m, "tollgate_last_reload_success"), 0.0);
    assert_eq!(
        value(&m, "tollgate_reloads_total{result=\"rejected\"}"),
        1.0
    );

    // After a clean stop the socket is gone and the CLI says so.
    agent.stop();
    assert!(!socket.exists());
    let out = tollgate(&["status", "--socket", socket_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is `tollgate run` running?"));
}

/// The node routes between a client (10.61.4.2) and a Pod (10.61.5.2) in
/// an annotated Namespace whose Kubernetes NetworkPolicy allows TCP 8080:
/// the allowed connection and the implicit default drop are both audited
/// in the spec's K8s format.
#[test]
fn kubernetes_policy_and_default_drop_are_audited_in_an_annotated_namespace() {
    let Some(lab) =
        Lab::builder("kubernetes_policy_and_default_drop_are_audited_in_an_annotated_namespace")
            .unlinked("client")
            .unlinked("pod")
            .require(&["ping", "timeout"])
            .build()
    else {
        return;
    };
    let (node, client, pod) = (lab.node(), lab.ns("client"), lab.ns("pod"));
    node.ok(&format!(
        "sysctl -qw net.ipv4.ip_forward=1 && \
         ip link add va type veth peer name vb netns {} && ip addr add 10.61.4.1/24 dev va && ip link set va up && \
         ip link add vc type veth peer name vd netns {} && ip addr add 10.61.5.1/24 dev vc && ip link set vc up",
        client.name(), pod.name()
    ));
    client.ok("ip addr add 10.61.4.2/24 dev vb && ip link set vb up && ip route add default via 10.61.4.1");
    pod.ok("ip addr add 10.61.5.2/24 dev vd && ip link set vd up && ip route add default via 10.61.5.1");
    let listener = pod.enter(|| TcpListener::bind("10.61.5.2:8080").unwrap());
    std::thread::spawn(move || for _ in listener.incoming() {});

    lab.write_policy(
        "k8s.yaml",
        "apiVersion: v1
kind: Namespace
metadata:
  name: default
  annotations:
    networkpolicy.antrea.io/enable-logging: \"true\"
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
status: {podIP: 10.61.5.2}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-8080, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - ports: [{protocol: TCP, port: 8080}]
",
    );
    let log = lab.dir().join("np.log");
    let mut agent = lab.start_agent(options(&lab, &["--audit-log", log.to_str().unwrap()]));
    agent.wait_generation(1);

    let port = client.enter(|| {
        let s =
            TcpStream::connect_timeout(&"10.61.5.2:8080".parse().unwrap(), Duration::from_secs(3))
                .expect("allowed by the K8s policy");
        s.local_addr().unwrap().port()
    });
    let out = client.sh("timeout 5 ping -c 3 -i 0.01 -W 0.05 -q 10.61.5.2");
    // Exit 1: no reply (not 2, an error, nor 124, the timeout).
    assert_eq!(out.code(), Some(1), "pings are dropped: {out:?}");
    wait_until("K8s lines", Duration::from_secs(5), || {
        read(&log).lines().count() >= 2
    });
    let text = read(&log);
    let lines: Vec<&str> = text.lines().map(|l| l.split_once(' ').unwrap().1).collect();
    let tail = |l: &str| l.split_once(' ').unwrap().1.to_string();
    assert_eq!(
        tail(lines[0]),
        format!("IngressRule K8sNetworkPolicy:default/allow-8080 <nil> Ingress Allow 1 default/web 10.61.4.2 {port} 10.61.5.2 8080 TCP 60 <nil>"),
        "{text}"
    );
    assert_eq!(
        tail(lines[1]),
        "IngressDefaultRule K8sNetworkPolicy <nil> Ingress Drop <nil> default/web 10.61.4.2 <nil> 10.61.5.2 <nil> ICMP 84 <nil>",
        "{text}"
    );
}

/// The scrape-and-check test against a running agent: before any FQDN
/// policy exists the DNS and FQDN series are exported already (at zero),
/// and `tollgate status` shows the agent-level series with the values of
/// the scrape; then with every worker (a connection queue, the L7 queues,
/// and the DNS queue an FQDN rule starts) every counter any worker declares
/// is exported, each queue's kernel counters too, with the agent-level
/// families, build info and the `process_*` metrics; `tollgate status`
/// shows the same rows.
#[test]
fn every_declared_counter_is_scraped_from_a_running_agent() {
    use tollgate::counters::{Kind, Scope, Series};
    use tollgate::telemetry::kernel::KernelCounters;
    use tollgate::workers::{ConnectionCounters, DnsCounters, L7Counters, QueueCounters};
    let Some(pair) = Pair::new("every_declared_counter_is_scraped_from_a_running_agent", 6) else {
        return;
    };
    let socket: PathBuf = pair.lab.dir().join("run/tollgate.sock");
    let mut options = options(
        &pair.lab,
        &[
            "--metrics-address",
            "127.0.0.1:9466",
            "--log-format",
            "json",
        ],
    );
    options.status_socket = socket.clone();
    let mut agent = pair.lab.start_agent(options);
    agent.wait_for_log(r#""message":"ruleset applied","generation":1"#, AGENT_WAIT);

    // No FQDN policy yet, so no DNS worker: its series are there, at 0.
    let scrape_text = || {
        pair.node
            .ok("curl -sf --max-time 5 http://127.0.0.1:9466/metrics")
    };
    let early = scrape_text();
    let m = parse_metrics(&early);
    for series in DnsCounters::SERIES {
        let name = match series.kind {
            Kind::Counter => format!("tollgate_{}_total", series.metric),
            Kind::Gauge => format!("tollgate_{}", series.metric),
        };
        let key = match series.label {
            Some((k, v)) => format!("{name}{{{k}=\"{v}\"}}"),
            None => name,
        };
        assert_eq!(
            m.get(&key),
            Some(&0.0),
            "{key} before any FQDN policy:\n{early}"
        );
    }
    // status shows the agent-level series of the metrics, same values.
    let out = tollgate(&[
        "status",
        "--socket",
        socket.to_str().unwrap(),
        "--output",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["agentSeries"].as_array().unwrap();
    assert!(rows.len() >= 20, "{report}");
    for row in rows {
        let series = row["series"].as_str().unwrap();
        assert_eq!(
            m.get(series).copied(),
            row["value"].as_f64(),
            "{series}: status and /metrics differ"
        );
    }

    pair.lab.write_policy(
        "fqdn.yaml",
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: observe-fqdn
spec:
  priority: 6
  tier: application
  appliedTo:
    - nodeSelector:
        matchLabels:
          role: obs
  egress:
    - action: Allow
      name: allow-fqdn
      to:
        - fqdn: \"*.allowed.test\"
",
    );
    agent.wait_for_log(r#""message":"ruleset applied","generation":2"#, AGENT_WAIT);

    let text = scrape_text();
    let sets: [(&str, Scope, &[Series]); 5] = [
        ("QueueCounters", Scope::Queue, QueueCounters::SERIES),
        (
            "ConnectionCounters",
            Scope::Queue,
            ConnectionCounters::SERIES,
        ),
        ("DnsCounters", Scope::Agent, DnsCounters::SERIES),
        ("L7Counters", Scope::Queue, L7Counters::SERIES),
        ("KernelCounters", Scope::Queue, KernelCounters::SERIES),
    ];
    let mut missing = Vec::new();
    for (set, scope, series) in sets {
        for series in series {
            let name = match series.kind {
                Kind::Counter => format!("tollgate_{}_total", series.metric),
                Kind::Gauge => format!("tollgate_{}", series.metric),
            };
            let found = text.lines().any(|line| {
                let Some(rest) = line.strip_prefix(&name) else {
                    return false;
                };
                let queue = scope == Scope::Agent || rest.starts_with("{queue=\"");
                let label = series
                    .label
                    .is_none_or(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
                (rest.starts_with(' ') || rest.starts_with('{')) && queue && label
            });
            if !found {
                missing.push(format!("{set}.{} ({name})", series.key));
            }
        }
    }
    assert!(missing.is_empty(), "not exported: {missing:?}\n{text}");
    // Four queues bound: the connection queue, DNS and the two L7 queues,
    // each with its kernel counters.
    let kernel_queues = text
        .lines()
        .filter(|l| l.starts_with("tollgate_queue_kernel_queued_total{queue=\""))
        .count();
    assert_eq!(kernel_queues, 4, "{text}");

    let m = parse_metrics(&text);
    assert!(value(&m, "tollgate_last_reload_success_timestamp_seconds") > 1.6e9);
    assert!(value(&m, "tollgate_datapath_apply_duration_seconds_count") >= 1.0);
    assert_eq!(value(&m, "tollgate_enforced_endpoints"), 1.0);
    assert_eq!(value(&m, "tollgate_kubernetes_synced"), 0.0);
    assert_eq!(
        value(&m, "tollgate_reloads_total{result=\"failed\"}"),
        0.0,
        "labelled families start at zero"
    );
    assert!(value(&m, "process_resident_memory_bytes") > 0.0);
    assert!(value(&m, "process_open_fds") >= 3.0);
    assert!(value(&m, "process_cpu_seconds_total") >= 0.0);
    assert!(value(&m, "process_start_time_seconds") > 1.6e9);
    let build = text
        .lines()
        .find(|l| l.starts_with("tollgate_build_info{"))
        .unwrap_or_else(|| panic!("no build info in\n{text}"));
    assert!(
        build.starts_with(&format!(
            "tollgate_build_info{{version=\"{}\",commit=\"",
            env!("CARGO_PKG_VERSION")
        )) && build.ends_with("\"} 1"),
        "{build}"
    );

    let out = tollgate(&["status", "--socket", socket.to_str().unwrap(), "-o", "wide"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "enforced endpoints: 1",
        "policy source:      complete snapshot",
        "last applied:       ",
        "process:            cpu ",
        " (commit ",
    ] {
        assert!(
            status.contains(expected),
            "{expected:?} missing in\n{status}"
        );
    }
    eprintln!("tollgate status:\n{status}");
    // Every worker's table: connection queue, DNS and L7 with their
    // kernel columns.
    for worker in ["QUEUE ", "DNS ", "L7 QUEUE "] {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(worker) && l.contains("KERNEL-QUEUED")),
            "{worker:?} table missing in\n{status}"
        );
    }
    agent.stop();
}

/// An L7 rule with `enableLogging`: each HTTP request decision is an
/// audit line carrying the request's method, host (lower-cased, without
/// port) and path after the spec's columns; with `audit.format: json` the
/// same record is one JSON object per line. `tollgate observe` shows the
/// same decisions with their request.
#[test]
fn l7_audit_lines_carry_method_host_and_path_in_text_and_json() {
    let Some(pair) = Pair::new(
        "l7_audit_lines_carry_method_host_and_path_in_text_and_json",
        7,
    ) else {
        return;
    };
    pair.lab.write_policy(
        "p.yaml",
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: observe-l7
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          role: obs
  ingress:
    - action: Allow
      name: api-get
      enableLogging: true
      logLabel: api
      from:
        - ipBlock:
            cidr: 10.61.7.0/24
      ports:
        - protocol: TCP
          port: 8080
      l7Protocols:
        - http:
            method: GET
            path: /api/*
",
    );
    let _server = serve(&pair, 8080);
    let address = format!("{}:8080", pair.node_ip());
    // Sends `request` on a new connection; returns what came back.
    let send = |request: &str| -> String {
        pair.client.enter(|| {
            let mut s =
                TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(3))
                    .expect("connection to the L7 port");
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            s.write_all(request.as_bytes()).unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer
        })
    };
    let allowed = "GET /api/items?id=7 HTTP/1.1\r\nHost: Shop.Example:8080\r\n\r\n";
    let denied = "POST /admin HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\n\r\n";
    let fields = "AntreaClusterNetworkPolicy:observe-l7 api-get Ingress";

    for format in ["text", "json"] {
        let log = pair.lab.dir().join(format!("np-{format}.log"));
        let set = format!("audit.format={format}");
        let mut agent = pair.lab.start_agent(options(
            &pair.lab,
            &[
                "--audit-log",
                log.to_str().unwrap(),
                "--set",
                &set,
                "--log-format",
                "json",
            ],
        ));
        agent.wait_for_log(r#""message":"ruleset applied","generation":1"#, AGENT_WAIT);
        send(allowed);
        let answer = send(denied);
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{answer:?}"
        );
        // The connections' own Allow lines (their SYNs) come first; the
        // request lines are those with a method.
        wait_until("two request lines", Duration::from_secs(5), || {
            read(&log).matches("\"method\"").count() + read(&log).matches("method=").count() >= 2
        });
        let text = read(&log);
        if format == "text" {
            let requests = lines_with(&text, " method=");
            let allow: Vec<&String> = requests
                .iter()
                .filter(|l| l.contains(&format!("{fields} Allow ")))
                .collect();
            assert_eq!(allow.len(), 1, "{text}");
            assert!(
                allow[0].ends_with(
                    " api method=\"GET\" host=\"shop.example\" path=\"/api/items?id=7\""
                ),
                "{text}"
            );
            let reject = lines_with(&text, &format!("{fields} Reject "));
            assert_eq!(reject.len(), 1, "{text}");
            assert!(
                reject[0].ends_with(" api method=\"POST\" host=\"shop.example\" path=\"/admin\""),
                "{text}"
            );
            // `tollgate observe` shows the L7 worker's decisions with the
            // request. Mutation: the `observe.offer` of src/workers/l7.rs
            // removed — no request line.
            let socket = pair.lab.agent_options().status_socket;
            let observe = || {
                let out = tollgate(&["observe", "--socket", socket.to_str().unwrap()]);
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            let rule = "by AntreaClusterNetworkPolicy:observe-l7 rule api-get (Ingress)";
            let get = format!(" TCP Allow GET shop.example/api/items?id=7 {rule}");
            let post = format!(" TCP Reject POST shop.example/admin {rule}");
            let seen = poll_until(AGENT_WAIT, || {
                let lines = observe();
                (lines.contains(&get) && lines.contains(&post)).then_some(())
            });
            assert!(seen.is_some(), "{get:?} and {post:?} not in\n{}", observe());
        } else {
            let records: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
            let find = |action: &str| {
                records
                    .iter()
                    .find(|r| r["action"] == action && r.get("http").is_some())
                    .unwrap_or_else(|| panic!("no {action} record in\n{text}"))
            };
            let allow = find("Allow");
            assert_eq!(allow["policy"], "AntreaClusterNetworkPolicy:observe-l7");
            assert_eq!(allow["rule"], "api-get");
            assert_eq!(allow["logLabel"], "api");
            assert_eq!(allow["dstPort"], 8080);
            assert_eq!(
                allow["http"],
                serde_json::json!({"method": "GET", "host": "shop.example", "path": "/api/items?id=7"})
            );
            let reject = find("Reject");
            assert_eq!(
                reject["http"],
                serde_json::json!({"method": "POST", "host": "shop.example", "path": "/admin"})
            );
            assert!(reject["time"].as_str().unwrap().ends_with('Z'), "{reject}");
        }
        agent.stop();
    }
}

/// Runs a PromQL `query` against the Prometheus listening on `port` in
/// `ns`; returns its result vector (an error answer fails the test).
fn promql(ns: &Netns, port: u16, query: &str) -> Vec<serde_json::Value> {
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let out = ns.run(&[
        "curl",
        "-sfG",
        "--max-time",
        "5",
        "--data-urlencode",
        &format!("query={query}"),
        &url,
    ]);
    let answer: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{query}: {e}: {}", out.stdout));
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A real Prometheus (Debian's `prometheus`) in the node namespace scrapes
/// a running agent every second with `docker/monitoring/alerts.yaml`
/// loaded, while allowed and dropped traffic flows: every query of
/// `docker/monitoring/dashboard.json` (its variables as Grafana fills
/// them) returns data, every alert rule is evaluated without error, and
/// every metric an alert expression names is scraped — so a dashboard or
/// rule naming a metric the agent does not export fails here. None of the
/// alerts fires on the healthy agent.
/// Mutation: `tollgate_ready` renamed in `alerts.yaml`
/// (`tollgate_readyy == 0`) — the metric is not scraped and the test fails
/// naming it; likewise a dashboard query naming `tollgate_verdict_total`.
#[test]
fn prometheus_scrapes_an_agent_and_every_dashboard_query_returns_data() {
    const METRICS: &str = "127.0.0.1:9468";
    const PROMETHEUS: u16 = 9098;
    let Some(pair) = Pair::requiring(
        "prometheus_scrapes_an_agent_and_every_dashboard_query_returns_data",
        8,
        &["prometheus"],
    ) else {
        return;
    };
    let _server = serve(&pair, 8080);
    let mut agent = pair
        .lab
        .start_agent(options(&pair.lab, &["--metrics-address", METRICS]));
    agent.wait_generation(1);
    let monitoring = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/monitoring");
    let config = pair.lab.dir().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: tollgate\n    static_configs:\n      - targets: ['{METRICS}']\n",
            monitoring.join("alerts.yaml").display()
        ),
    )
    .unwrap();
    let storage = pair.lab.dir().join("prometheus-data");
    pair.lab.spawn(
        "node",
        &[
            "prometheus",
            &format!("--config.file={}", config.display()),
            &format!("--storage.tsdb.path={}", storage.display()),
            &format!("--web.listen-address=127.0.0.1:{PROMETHEUS}"),
        ],
    );
    // Traffic for the verdict, rule-hit and latency series: allowed
    // connections and dropped pings, again while Prometheus scrapes.
    let traffic = || {
        connect_n(&pair, 8080, 3);
        pair.client
            .sh(&format!("ping -c 1 -W 1 {}", pair.node_ip()));
    };
    traffic();

    let text = std::fs::read_to_string(monitoring.join("dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let queries: Vec<(String, String)> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap().to_string();
            panel["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| {
                    let expr = t["expr"]
                        .as_str()
                        .unwrap()
                        .replace("$__rate_interval", "30s")
                        .replace("$instance", ".+");
                    (title.clone(), expr)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(queries.len() >= 12);
    // Rates need two scrapes: poll until every query answers, or name
    // those that never did.
    let mut empty: Vec<String> = queries.iter().map(|(_, q)| q.clone()).collect();
    poll_until(Duration::from_secs(90), || {
        traffic();
        empty.retain(|query| promql(&pair.node, PROMETHEUS, query).is_empty());
        empty.is_empty().then_some(())
    });
    assert!(
        empty.is_empty(),
        "dashboard queries without data: {empty:#?}\nprometheus log:\n{}",
        read(&pair.lab.dir().join("prometheus-0.log"))
    );
    let verdicts = promql(
        &pair.node,
        PROMETHEUS,
        "sum by (action) (tollgate_verdicts_total{action=\"Drop\"})",
    );
    let dropped: f64 = verdicts[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(dropped >= 1.0, "the pings were dropped: {verdicts:?}");

    // The alert rules: each evaluated, healthy, none firing; every metric
    // they name is scraped.
    let url = format!("http://127.0.0.1:{PROMETHEUS}/api/v1/rules");
    let rules = poll_until(Duration::from_secs(30), || {
        let out = pair.node.run(&["curl", "-sf", "--max-time", "5", &url]);
        let answer: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let rules = answer["data"]["groups"][0]["rules"].as_array()?.clone();
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001-"))
        });
        (rules.len() == 6 && evaluated).then_some(rules)
    })
    .expect("the six alert rules evaluated");
    for rule in &rules {
        let (name, expr) = (
            rule["name"].as_str().unwrap(),
            rule["query"].as_str().unwrap(),
        );
        assert_eq!(rule["health"], "ok", "{name}: {rule}");
        assert_eq!(
            rule["state"], "inactive",
            "{name} on a healthy agent: {rule}"
        );
        let names: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("tollgate_"))
            .collect();
        assert!(!names.is_empty(), "{name}: {expr}");
        for metric in names {
            assert!(
                !promql(&pair.node, PROMETHEUS, metric).is_empty(),
                "{name}: {metric} is not scraped"
            );
        }
    }
    agent.stop();
}

/// `tollgate observe` over the status socket: the agent's latest
/// decisions, each naming the deciding policy and rule (an allowed TCP
/// connection, a dropped ping; an IPv6 connection no rule decides); `--verdict drop` keeps only the drops; and
/// `-f` prints a decision made after it started, within seconds, from a
/// fresh source port (a flow the agent decides, not the kernel's cache).
/// Mutation: the `observe.offer` of the connection worker removed
/// (src/workers/connection.rs) — no decision reaches the agent's history
/// and the first assertion fails.
#[test]
fn observe_shows_the_agents_decisions_and_follows_new_ones() {
    use std::io::BufRead;
    let Some(pair) = Pair::new(
        "observe_shows_the_agents_decisions_and_follows_new_ones",
        10,
    ) else {
        return;
    };
    let socket: PathBuf = pair.lab.dir().join("run/tollgate.sock");
    let mut options = options(&pair.lab, &["--verdict-cache", "off"]);
    options.status_socket = socket.clone();
    let _server = serve(&pair, 8080);
    // IPv6 beside: the link's v6 addresses and a listener on the node's
    // (no rule matches IPv6 from the client: allowed, no rule).
    pair.node.ok("ip addr add fd61:a::1/64 dev va nodad");
    pair.client.ok("ip addr add fd61:a::2/64 dev vb nodad");
    let _v6 = pair
        .node
        .enter(|| TcpListener::bind("[fd61:a::1]:8080").unwrap());
    let mut agent = pair.lab.start_agent(options);
    agent.wait_generation(1);
    let socket_arg = socket.to_str().unwrap();
    connect_n(&pair, 8080, 2);
    pair.client.enter(|| {
        TcpStream::connect_timeout(&"[fd61:a::1]:8080".parse().unwrap(), Duration::from_secs(3))
            .expect("the IPv6 connection")
    });
    pair.client
        .sh(&format!("ping -c 1 -W 1 {}", pair.node_ip()));
    let observe = |args: &[&str]| {
        let out = tollgate(&[&["observe", "--socket", socket_arg], args].concat());
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The node's address is named by the ruleset: `node:obs`.
    let node = "node:obs";
    let client = format!("10.61.{}.2", pair.subnet);
    // The hub copies each decision from a channel: poll until both are in.
    let all = poll_until(AGENT_WAIT, || {
        let text = observe(&[]);
        (text.contains(" Allow ") && text.contains(" Drop ") && text.contains("[fd61:a::2]:"))
            .then_some(text)
    })
    .unwrap_or_else(|| panic!("no decisions observed:\n{}", observe(&[])));
    let allowed: Vec<String> = lines_with(&all, &format!(" -> {node}:8080 TCP Allow "))
        .into_iter()
        .filter(|l| l.contains(&format!(" {client}:")))
        .collect();
    assert_eq!(allowed.len(), 2, "{all}");
    let v6 = lines_with(&all, " [fd61:a::2]:");
    assert_eq!(v6.len(), 1, "{all}");
    assert!(
        v6[0].contains(":8080 TCP Allow ") && v6[0].ends_with(" (no rule)"),
        "{all}"
    );
    assert!(
        allowed[0].starts_with("20")
            && allowed[0].contains(&format!(" {client}:"))
            && allowed[0]
                .ends_with(" by AntreaClusterNetworkPolicy:observe rule allow-web (Ingress)"),
        "{all}"
    );
    let drops = lines_with(&all, " Drop ");
    assert_eq!(drops.len(), 1, "{all}");
    assert!(
        drops[0].contains(&format!(" {client} -> {node} ICMP Drop "))
            && drops[0].ends_with(" rule drop-ping (Ingress)"),
        "{all}"
    );
    let only = observe(&["--verdict", "drop"]);
    assert_eq!(
        only.lines().collect::<Vec<_>>(),
        [drops[0].as_str()],
        "{only}"
    );
    let json = observe(&["-o", "json", "--last", "1", "--verdict", "drop"]);
    let event: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(event["verdict"], "Drop");
    assert_eq!(event["rule"], "drop-ping");

    // -f: nothing old (--last 0), then the next allowed connection.
    let mut follow = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["observe", "-f", "--last", "0", "--socket", socket_arg])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The follower is registered once the agent counts it.
    wait_until("the follower", AGENT_WAIT, || {
        value(&agent_series(&socket), "tollgate_observe_followers") == 1.0
    });
    connect_n(&pair, 8080, 1);
    let line = rx.recv_timeout(AGENT_WAIT).expect("a followed decision");
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(line.contains(" -> node:obs:8080 TCP Allow by "), "{line}");
    agent.stop();
}

/// The agent-level series of `status -o json`, by name, as /metrics has
/// them.
fn agent_series(socket: &Path) -> BTreeMap<String, f64> {
    let out = tollgate(&["status", "-o", "json", "--socket", socket.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["agentSeries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["series"].as_str().unwrap().to_string(),
                row["value"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// `tollgate log-level` changes the running agent's filter at once (a
/// debug line appears only after), and `tollgate bundle`, run outside the
/// agent's network namespace, holds what only the agent can see: its
/// namespace's tollgate chains and sets, its log tail, its configuration,
/// the decisions, the status; as a private directory and as a `.tar.gz`.
/// Mutation: `logging::set` not calling `reload` — the agent answers the
/// filter still in force (`info`) and no `status request` line appears:
/// the test fails.
#[test]
fn log_level_changes_at_once_and_bundle_holds_the_agents_state() {
    use std::os::unix::fs::PermissionsExt;
    let Some(pair) = Pair::new(
        "log_level_changes_at_once_and_bundle_holds_the_agents_state",
        11,
    ) else {
        return;
    };
    let socket: PathBuf = pair.lab.dir().join("run/tollgate.sock");
    let mut options = options(&pair.lab, &["--log-level", "info"]);
    options.status_socket = socket.clone();
    let _server = serve(&pair, 8080);
    let mut agent = pair.lab.start_agent(options);
    agent.wait_generation(1);
    connect_n(&pair, 8080, 1);
    let s = socket.to_str().unwrap();
    let ok = |args: &[&str]| {
        let out = tollgate(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };

    assert_eq!(ok(&["log-level", "--socket", s]), "info");
    ok(&["status", "--socket", s]);
    assert_eq!(agent.count_log("status request"), 0, "{}", agent.log());
    assert_eq!(ok(&["log-level", "debug", "--socket", s]), "debug");
    ok(&["status", "--socket", s]);
    agent.wait_for_log("status request", AGENT_WAIT);
    let bad = tollgate(&["log-level", "tollgate=loud", "--socket", s]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert_eq!(ok(&["log-level", "info", "--socket", s]), "info");

    let dir = pair.lab.dir().join("bundle");
    ok(&["bundle", dir.to_str().unwrap(), "--socket", s]);
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let file = |name: &str| read(&dir.join(name));
    for (name, expected) in [
        ("status.txt", "node:               obs"),
        ("status.json", "\"rulesetGeneration\": 1"),
        ("policies.txt", "AntreaClusterNetworkPolicy:observe"),
        ("endpoints.json", "\"endpoint\""),
        (
            "decisions.txt",
            " TCP Allow by AntreaClusterNetworkPolicy:observe rule allow-web",
        ),
        ("config.txt", "obs"),
        ("command-line.txt", " run "),
        ("log.txt", "ruleset applied"),
        ("iptables-save.txt", ":TOLLGATE-INPUT"),
        ("ip6tables-save.txt", ":TOLLGATE-INPUT"),
        ("ipset-list.txt", "Name: tollgate-"),
        ("versions.txt", "kernel "),
        ("skipped.json", "skips nothing"),
    ] {
        assert!(
            file(name).contains(expected),
            "{name}: {expected:?} missing in\n{}",
            file(name)
        );
    }
    // The log tail holds the debug line logged while the filter allowed it.
    assert!(file("log.txt").contains("status request"));

    // --watch: status again and again until interrupted.
    // Mutation: `repeat` returning after the first answer — one `node:`.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["status", "-w", "--interval", "0.2", "--socket", s])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("node:") && tx.send(line).is_err() {
                return;
            }
        }
    });
    for n in 0..3 {
        rx.recv_timeout(AGENT_WAIT)
            .unwrap_or_else(|e| panic!("status -w answer {n}: {e}"));
    }
    let _ = watch.kill();
    let _ = watch.wait();

    let archive = pair.lab.dir().join("b.tar.gz");
    ok(&["bundle", archive.to_str().unwrap(), "--socket", s]);
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let list = Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for name in [
        "status.txt",
        "iptables-save.txt",
        "ipset-list.txt",
        "log.txt",
    ] {
        assert!(
            list.lines()
                .any(|l| l.starts_with("tollgate-bundle-obs-") && l.ends_with(name)),
            "{name} not in\n{list}"
        );
    }
    agent.stop();
}
