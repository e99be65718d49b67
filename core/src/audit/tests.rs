//! The line format pinned against the spec's example lines.

use std::time::Duration;

use super::*;
use crate::http::RequestHead;
use crate::packet::flow::Transport;

fn flow(src: &str, sport: Option<u16>, dst: &str, dport: Option<u16>, icmp: bool) -> Flow {
    let transport = if icmp {
        Transport::Icmp {
            icmp_type: 8,
            icmp_code: 0,
        }
    } else {
        Transport::Tcp {
            src_port: sport.unwrap(),
            dst_port: dport.unwrap(),
        }
    };
    Flow {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        transport,
        local: None,
    }
}

fn reject_icmp(micros: u64) -> AuditRecord {
    AuditRecord {
        time: Timestamp::from_unix_micros(micros),
        decider: Decider::Antrea {
            policy: "AntreaNetworkPolicy:default/reject-icmp-policy".into(),
            rule: "RejectICMPRequest".into(),
            baseline: false,
        },
        direction: Direction::Egress,
        verdict: Verdict::Reject,
        priority: Some(14500),
        applied_to: "default/nettool".into(),
        flow: flow("10.10.1.7", None, "10.10.2.3", None, true),
        packet_length: 84,
        log_label: Some("icmp-log-label".into()),
        reason: None,
        request: None,
        dry_run: false,
    }
}

#[test]
fn timestamps_are_utc_with_microseconds() {
    assert_eq!(
        Timestamp::from_unix_micros(1_688_474_721_804_416).format(),
        "2023/07/04 12:45:21.804416"
    );
    assert_eq!(
        Timestamp::from_unix_micros(0).format(),
        "1970/01/01 00:00:00.000000"
    );
    assert_eq!(
        Timestamp::from_unix_micros(951_782_400_000_001).format(),
        "2000/02/29 00:00:00.000001"
    );
}

#[test]
fn reject_tcp_line_matches_the_spec() {
    let record = AuditRecord {
        time: Timestamp::from_unix_micros(1_688_474_721_804_416),
        decider: Decider::Antrea {
            policy: "AntreaNetworkPolicy:default/reject-tcp-policy".into(),
            rule: "RejectTCPRequest".into(),
            baseline: true,
        },
        direction: Direction::Ingress,
        verdict: Verdict::Reject,
        priority: Some(16),
        applied_to: "default/nettoolv3".into(),
        flow: flow("10.10.1.7", Some(53646), "10.10.1.14", Some(80), false),
        packet_length: 60,
        log_label: Some("tcp-log-label".into()),
        reason: None,
        request: None,
        dry_run: false,
    };
    assert_eq!(
        record.line(),
        "2023/07/04 12:45:21.804416 IngressDefaultRule AntreaNetworkPolicy:default/reject-tcp-policy RejectTCPRequest Ingress Reject 16 default/nettoolv3 10.10.1.7 53646 10.10.1.14 80 TCP 60 tcp-log-label"
    );
}

fn l7_request(method: &str, host: Option<&str>, path: &str) -> AuditRecord {
    let mut record = reject_icmp(1_688_474_721_804_416);
    record.flow = flow("10.10.1.7", Some(53646), "10.10.1.14", Some(80), false);
    record.request = Some(RequestHead {
        method: method.into(),
        host: host.map(Into::into),
        port: None,
        path: path.into(),
    });
    record
}

#[test]
fn l7_lines_append_method_host_and_path_after_the_reason() {
    let mut record = l7_request("POST", Some("shop.example"), "/admin?x=1");
    assert_eq!(
        record.line(),
        "2023/07/04 12:45:21.804416 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 14500 default/nettool 10.10.1.7 53646 10.10.1.14 80 TCP 84 icmp-log-label method=\"POST\" host=\"shop.example\" path=\"/admin?x=1\""
    );
    record.reason = Some("strict framing: body on GET".into());
    assert!(record.line().ends_with(
        " icmp-log-label reason=\"strict framing: body on GET\" method=\"POST\" host=\"shop.example\" path=\"/admin?x=1\""
    ));
    // No Host header: an empty host column.
    let record = l7_request("GET", None, "/");
    assert!(record
        .line()
        .ends_with(" method=\"GET\" host=\"\" path=\"/\""));
}

#[test]
fn request_fields_cannot_forge_columns_or_lines() {
    let record = l7_request(
        "GET",
        Some("a\" b=\"c"),
        "/x\" method=\"DELETE\"\n2023/01/01 forged",
    );
    let line = record.line();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.ends_with(
            " method=\"GET\" host=\"a\\\" b=\\\"c\" path=\"/x\\\" method=\\\"DELETE\\\"\\n2023/01/01 forged\""
        ),
        "{line}"
    );
    let json = record.render(AuditFormat::Json, record.time, None);
    assert_eq!(json.lines().count(), 1, "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        value["http"]["path"],
        "/x\" method=\"DELETE\"\n2023/01/01 forged"
    );
}

#[test]
fn json_lines_carry_the_same_fields_and_the_dedup_summary() {
    let mut dedup = Deduplicator::new(Duration::from_secs(1), 1000, AuditFormat::Json);
    let first = dedup.offer(reject_icmp(1_688_426_676_422_233));
    assert_eq!(first.len(), 1);
    let value: serde_json::Value = serde_json::from_str(&first[0]).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "time": "2023-07-03T23:24:36.422233Z",
            "table": "AntreaPolicyEgressRule",
            "policy": "AntreaNetworkPolicy:default/reject-icmp-policy",
            "rule": "RejectICMPRequest",
            "direction": "Egress",
            "action": "Reject",
            "priority": 14500,
            "appliedTo": "default/nettool",
            "srcIP": "10.10.1.7",
            "srcPort": null,
            "dstIP": "10.10.2.3",
            "dstPort": null,
            "protocol": "ICMP",
            "length": 84,
            "logLabel": "icmp-log-label",
        })
    );
    assert!(dedup.offer(reject_icmp(1_688_426_677_000_000)).is_empty());
    let summary = dedup.flush(Timestamp::from_unix_micros(1_688_426_677_424_024));
    let value: serde_json::Value = serde_json::from_str(&summary[0]).unwrap();
    assert_eq!(value["time"], "2023-07-03T23:24:37.424024Z");
    assert_eq!(value["packets"], 2);
    assert_eq!(value["durationSeconds"], 1.001791);

    let mut record = l7_request("GET", Some("shop.example"), "/cart");
    record.reason = Some("strict framing: body on GET".into());
    let value: serde_json::Value =
        serde_json::from_str(&record.render(AuditFormat::Json, record.time, None)).unwrap();
    assert_eq!(
        value["http"],
        serde_json::json!({"method": "GET", "host": "shop.example", "path": "/cart"})
    );
    assert_eq!(value["reason"], "strict framing: body on GET");
    assert_eq!(value["srcPort"], 53646);
}

#[test]
fn icmp_lines_print_nil_ports_and_dedup_summarises_as_the_spec_shows() {
    let mut dedup = Deduplicator::new(Duration::from_secs(1), 1000, AuditFormat::Text);
    let first = dedup.offer(reject_icmp(1_688_426_676_422_233));
    assert_eq!(
        first,
        ["2023/07/03 23:24:36.422233 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 14500 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label"]
    );
    // A repeat inside the window is only counted.
    assert!(dedup.offer(reject_icmp(1_688_426_677_000_000)).is_empty());
    assert_eq!(
        dedup.next_close(),
        Some(Timestamp::from_unix_micros(1_688_426_677_422_233))
    );
    assert!(dedup
        .flush(Timestamp::from_unix_micros(1_688_426_677_422_232))
        .is_empty());
    // The window closes: the spec's second line, stamped when written, with
    // the time since the first packet.
    let summary = dedup.flush(Timestamp::from_unix_micros(1_688_426_677_424_024));
    assert_eq!(
        summary,
        ["2023/07/03 23:24:37.424024 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 14500 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label [2 packets in 1.001791s]"]
    );
    assert_eq!(dedup.next_close(), None);
    assert!(dedup
        .flush(Timestamp::from_unix_micros(u64::MAX / 2))
        .is_empty());
}

#[test]
fn duplicates_are_equal_lines_and_a_lone_packet_has_no_summary() {
    let mut dedup = Deduplicator::new(Duration::from_secs(1), 1000, AuditFormat::Text);
    let tcp = |sport| {
        let mut r = reject_icmp(5_000_000);
        r.flow = flow("10.10.1.7", Some(sport), "10.10.2.3", Some(80), false);
        r
    };
    // Other source ports are other connections: their own lines.
    assert_eq!(dedup.offer(tcp(1000)).len(), 1);
    assert_eq!(dedup.offer(tcp(1001)).len(), 1);
    // A retransmitted SYN of the first is a duplicate.
    assert!(dedup.offer(tcp(1000)).is_empty());
    let closed = dedup.close_all(Timestamp::from_unix_micros(5_250_000));
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(
        closed[0].contains(" 1000 10.10.2.3 80 TCP ")
            && closed[0].ends_with("[2 packets in 250ms]"),
        "{}",
        closed[0]
    );
}

#[test]
fn allow_lines_are_never_deduplicated() {
    let mut dedup = Deduplicator::new(Duration::from_secs(1), 1000, AuditFormat::Text);
    let mut record = reject_icmp(1);
    record.verdict = Verdict::Allow;
    assert_eq!(dedup.offer(record.clone()).len(), 1);
    assert_eq!(dedup.offer(record).len(), 1);
}

#[test]
fn k8s_lines_match_the_spec() {
    let allow = AuditRecord {
        time: Timestamp::from_unix_micros(1_688_473_862_801_442),
        decider: Decider::K8s {
            policy: "K8sNetworkPolicy:default/allow-tcp-80".into(),
        },
        direction: Direction::Ingress,
        verdict: Verdict::Allow,
        priority: Some(190),
        applied_to: "default/nettool".into(),
        flow: flow("10.10.1.13", Some(57050), "10.10.1.7", Some(80), false),
        packet_length: 60,
        log_label: None,
        reason: None,
        request: None,
        dry_run: false,
    };
    assert_eq!(
        allow.line(),
        "2023/07/04 12:31:02.801442 IngressRule K8sNetworkPolicy:default/allow-tcp-80 <nil> Ingress Allow 190 default/nettool 10.10.1.13 57050 10.10.1.7 80 TCP 60 <nil>"
    );
    let default_drop = AuditRecord {
        time: Timestamp::from_unix_micros(1_688_474_006_221_413),
        decider: Decider::K8sDefaultDrop,
        direction: Direction::Ingress,
        verdict: Verdict::Drop,
        priority: None,
        applied_to: "default/nettool".into(),
        flow: flow("10.10.1.13", None, "10.10.1.7", None, true),
        packet_length: 84,
        log_label: None,
        reason: None,
        request: None,
        dry_run: false,
    };
    assert_eq!(
        default_drop.line(),
        "2023/07/04 12:33:26.221413 IngressDefaultRule K8sNetworkPolicy <nil> Ingress Drop <nil> default/nettool 10.10.1.13 <nil> 10.10.1.7 <nil> ICMP 84 <nil>"
    );
}

#[test]
fn dry_run_lines_say_dry_run_in_the_action_column_in_text_and_json() {
    let mut record = reject_icmp(1_688_474_721_804_416);
    record.dry_run = true;
    record.verdict = Verdict::Drop;
    assert_eq!(
        record.line(),
        "2023/07/04 12:45:21.804416 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress DryRunDrop 14500 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label"
    );
    let json: Value =
        serde_json::from_str(&record.render(AuditFormat::Json, record.time, None)).unwrap();
    assert_eq!(json["action"], "DryRunDrop");
    // The isolation a dry-run Kubernetes NetworkPolicy would add: the
    // default-rule stage, naming the policy.
    record.decider = Decider::K8sIsolation {
        policy: "K8sNetworkPolicy:default/deny-all".into(),
    };
    record.direction = Direction::Ingress;
    record.priority = None;
    record.log_label = None;
    assert!(
        record.line().contains(
            " IngressDefaultRule K8sNetworkPolicy:default/deny-all <nil> Ingress DryRunDrop <nil> default/nettool "
        ),
        "{}",
        record.line()
    );
    let json: Value =
        serde_json::from_str(&record.render(AuditFormat::Json, record.time, None)).unwrap();
    assert_eq!(
        (&json["table"], &json["policy"], &json["rule"]),
        (
            &Value::from("IngressDefaultRule"),
            &Value::from("K8sNetworkPolicy:default/deny-all"),
            &Value::Null
        )
    );
    // A DryRunDrop is deduplicated as a Drop is, apart from it; a
    // DryRunAllow, as an Allow, never.
    let mut dedup = Deduplicator::new(Duration::from_secs(1), 1000, AuditFormat::Text);
    let mut enforced = record.clone();
    enforced.dry_run = false;
    assert_eq!(dedup.offer(record.clone()).len(), 1);
    assert_eq!(
        dedup.offer(enforced).len(),
        1,
        "another line than the dry-run one"
    );
    assert_eq!(dedup.offer(record.clone()).len(), 0, "a repeat");
    record.verdict = Verdict::Allow;
    assert_eq!(dedup.offer(record.clone()).len(), 1);
    assert_eq!(dedup.offer(record).len(), 1);
}

#[test]
fn ipv6_addresses_print_compressed_as_go_does() {
    let mut record = reject_icmp(0);
    record.flow = Flow {
        src: "fd00:0:0:1::7".parse().unwrap(),
        dst: "fd00::1:0:0:3".parse().unwrap(),
        transport: Transport::Udp {
            src_port: 5353,
            dst_port: 53,
        },
        local: None,
    };
    assert!(
        record
            .line()
            .contains(" default/nettool fd00:0:0:1::7 5353 fd00::1:0:0:3 53 UDP 84 "),
        "{}",
        record.line()
    );
}

#[test]
fn go_durations() {
    assert_eq!(
        go_duration(Duration::from_nanos(1_000_855_539)),
        "1.000855539s"
    );
    assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(go_duration(Duration::from_secs(2)), "2s");
    assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
}

#[test]
fn rate_limit_allows_the_burst_then_the_rate() {
    let mut limiter = RateLimiter::new(500, 1000);
    let t0 = 1_000_000u64;
    let admitted = (0..1500)
        .filter(|_| limiter.admit(Timestamp::from_unix_micros(t0)))
        .count();
    assert_eq!(admitted, 1000);
    assert_eq!(limiter.skipped, 500);
    // One second later, 500 more tokens.
    let later = (0..600)
        .filter(|_| limiter.admit(Timestamp::from_unix_micros(t0 + 1_000_000)))
        .count();
    assert_eq!(later, 500);
}

/// Policies → compiled ruleset → worker step → audit lines, pinned exactly:
/// what the agent writes for real packets.
mod through_the_step {
    use super::*;
    use crate::compile::{compile_yaml, LocalNode};
    use crate::decide::{step, StepConfig};
    use crate::marks::{FailMode, MarkLayout};
    use crate::packet::Queued;
    use crate::ruleset::Ruleset;
    use etherparse::PacketBuilder;

    fn config() -> StepConfig {
        StepConfig {
            marks: MarkLayout::default(),
            fail_mode: FailMode::Closed,
        }
    }

    /// A packet queued from FORWARD with no mark.
    fn queued(payload: &[u8]) -> Queued<'_> {
        Queued {
            id: 1,
            payload,
            mark: 0,
            local: None,
            indev: 0,
        }
    }

    const POLICIES: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: default
  annotations: {networkpolicy.antrea.io/enable-logging: \"true\"}
---
apiVersion: v1
kind: Namespace
metadata: {name: quiet}
---
apiVersion: v1
kind: Pod
metadata: {name: nettool, namespace: default, labels: {app: nettool}}
status: {podIP: 10.10.1.7}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: quiet, labels: {app: web}}
status: {podIP: 10.10.1.8}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: reject-icmp-policy, namespace: default}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: nettool}}}]
  egress:
  - action: Reject
    name: RejectICMPRequest
    enableLogging: true
    logLabel: icmp-log-label
    to: [{ipBlock: {cidr: 10.10.2.0/24}}]
    protocols: [{icmp: {icmpType: 8}}]
  - action: Allow
    name: AllowWeb
    enableLogging: true
    to: [{ipBlock: {cidr: 10.10.3.0/24}}]
  - action: Allow
    name: NotLogged
    to: [{ipBlock: {cidr: 10.10.4.0/24}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-tcp-80, namespace: default}
spec:
  podSelector: {matchLabels: {app: nettool}}
  policyTypes: [Ingress]
  ingress:
  - ports: [{protocol: TCP, port: 80}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate, namespace: quiet}
spec:
  podSelector: {}
  policyTypes: [Ingress]
";

    fn ruleset() -> Ruleset {
        compile_yaml(
            POLICIES,
            &LocalNode {
                name: "node1".into(),
                ..Default::default()
            },
        )
    }

    fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ipv4(src, dst, 64)
            .tcp(sport, dport, 1, 1024)
            .syn()
            .write(&mut out, &[])
            .unwrap();
        out
    }

    fn ping(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ipv4(src, dst, 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut out, &[0u8; 56])
            .unwrap();
        out
    }

    fn lines(ruleset: &Ruleset, packet: &[u8], micros: u64) -> Vec<String> {
        let s = step(
            &queued(packet),
            ruleset,
            &crate::fqdn::NoFqdn,
            &config(),
            Timestamp::from_unix_micros(micros),
        );
        s.audit.iter().map(AuditRecord::line).collect()
    }

    const T: u64 = 1_688_474_006_221_413; // 2023/07/04 12:33:26.221413

    #[test]
    fn k8s_allow_and_default_drop_in_an_annotated_namespace() {
        let rs = ruleset();
        let rank = |name: &str| {
            rs.policies()
                .iter()
                .position(|p| p.policy.name == name)
                .unwrap()
        };
        assert!(rank("reject-icmp-policy") < rank("allow-tcp-80"));
        assert_eq!(
            lines(&rs, &tcp([10, 10, 1, 13], 57050, [10, 10, 1, 7], 80), T),
            ["2023/07/04 12:33:26.221413 IngressRule K8sNetworkPolicy:default/allow-tcp-80 <nil> Ingress Allow 4 default/nettool 10.10.1.13 57050 10.10.1.7 80 TCP 40 <nil>"]
        );
        assert_eq!(
            lines(&rs, &ping([10, 10, 1, 13], [10, 10, 1, 7]), T),
            ["2023/07/04 12:33:26.221413 IngressDefaultRule K8sNetworkPolicy <nil> Ingress Drop <nil> default/nettool 10.10.1.13 <nil> 10.10.1.7 <nil> ICMP 84 <nil>"]
        );
        // Namespace `quiet` is not annotated: its default drop is silent.
        assert!(lines(&rs, &tcp([10, 10, 1, 13], 1, [10, 10, 1, 8], 80), T).is_empty());
    }

    #[test]
    fn antrea_reject_icmp_with_nil_ports_and_allow_per_connection() {
        let rs = ruleset();
        assert_eq!(
            lines(&rs, &ping([10, 10, 1, 7], [10, 10, 2, 3]), T),
            ["2023/07/04 12:33:26.221413 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 1 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label"]
        );
        for port in [40000, 40001] {
            assert_eq!(
                lines(&rs, &tcp([10, 10, 1, 7], port, [10, 10, 3, 9], 443), T),
                [format!("2023/07/04 12:33:26.221413 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy AllowWeb Egress Allow 2 default/nettool 10.10.1.7 {port} 10.10.3.9 443 TCP 40 <nil>")]
            );
        }
        assert!(lines(&rs, &tcp([10, 10, 1, 7], 1, [10, 10, 4, 9], 443), T).is_empty());
    }

    #[test]
    fn repeated_drops_give_one_line_and_a_summary() {
        let rs = ruleset();
        let mut dedup = Deduplicator::new(Duration::from_secs(1), 100, AuditFormat::Text);
        let mut out = Vec::new();
        for i in 0..50u64 {
            let s = step(
                &queued(&ping([10, 10, 1, 7], [10, 10, 2, 3])),
                &rs,
                &crate::fqdn::NoFqdn,
                &config(),
                Timestamp::from_unix_micros(T + i * 20_000),
            );
            for record in s.audit {
                out.extend(dedup.offer(record));
            }
        }
        out.extend(dedup.flush(Timestamp::from_unix_micros(T + 1_000_000)));
        assert_eq!(
            out,
            [
                "2023/07/04 12:33:26.221413 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 1 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label",
                "2023/07/04 12:33:27.221413 AntreaPolicyEgressRule AntreaNetworkPolicy:default/reject-icmp-policy RejectICMPRequest Egress Reject 1 default/nettool 10.10.1.7 <nil> 10.10.2.3 <nil> ICMP 84 icmp-log-label [50 packets in 1s]",
            ]
        );
    }
}
