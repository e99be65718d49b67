use super::*;
use crate::fqdn::NoFqdn;
use crate::packet::LocalSide;
use etherparse::PacketBuilder;

/// Allows TCP to port 80, rejects port 81, drops everything else.
struct PortPolicy;

impl Policy for PortPolicy {
    fn decide(&self, flow: &Flow, _: &dyn FqdnLookup) -> Ruling {
        Ruling::plain(match flow.transport {
            Transport::Tcp { dst_port: 80, .. } => Verdict::Allow,
            Transport::Tcp { dst_port: 81, .. } => Verdict::Reject,
            _ => Verdict::Drop,
        })
    }
}

const NOW: Timestamp = Timestamp { unix_micros: 1 };

fn queued(payload: &[u8], mark: u32, local: Option<LocalSide>) -> Queued<'_> {
    Queued {
        id: 1,
        payload,
        mark,
        local,
        indev: 0,
    }
}

fn config(fail_mode: FailMode) -> StepConfig {
    StepConfig {
        marks: MarkLayout::default(),
        fail_mode,
    }
}

fn syn(port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, port, 1, 1024)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

#[test]
fn allow_and_reject_repeat_with_a_mark_that_keeps_foreign_bits() {
    let foreign = 0x4000 | 0x0030_0000; // kube-proxy's bit, and stale bits of ours
    let allowed = step(
        &queued(&syn(80), foreign, None),
        &PortPolicy,
        &NoFqdn,
        &config(FailMode::Closed),
        NOW,
    );
    assert_eq!(
        allowed,
        Step {
            action: Action::Repeat {
                mark: 0x4000 | 0x10_0000
            },
            outcome: Outcome::Decided {
                verdict: Verdict::Allow,
                by: DecidedBy::NoRule
            },
            audit: Vec::new(),
            dry_run: None,
            cache: None,
            flow: parse_flow(&syn(80)).ok(),
        }
    );
    let rejected = step(
        &queued(&syn(81), 0, None),
        &PortPolicy,
        &NoFqdn,
        &config(FailMode::Closed),
        NOW,
    );
    assert_eq!(rejected.action, Action::Repeat { mark: 0x20_0000 });
    let dropped = step(
        &queued(&syn(82), 0, None),
        &PortPolicy,
        &NoFqdn,
        &config(FailMode::Open),
        NOW,
    );
    assert_eq!(dropped.action, Action::Drop);
    assert_eq!(
        dropped.outcome,
        Outcome::Decided {
            verdict: Verdict::Drop,
            by: DecidedBy::NoRule
        }
    );
}

#[test]
fn compiled_ruleset_decides_through_the_step() {
    let yaml = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: protect-node}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{nodeSelector: {matchLabels: {role: cp}}}]
  ingress:
  - action: Reject
    from: [{ipBlock: {cidr: 10.0.0.0/24}}]
    ports: [{protocol: TCP, port: 81}]
";
    let node = crate::compile::LocalNode {
        name: "n".into(),
        labels: crate::model::Labels::from_iter([("role".to_string(), "cp".to_string())]),
        addresses: vec!["10.0.0.2".parse().unwrap()],
    };
    let ruleset = crate::compile::compile_yaml(yaml, &node);
    assert!(ruleset.enforced().node_ingress);
    let marks = MarkLayout::default();
    let decide = |port| {
        step(
            &queued(&syn(port), 0, None),
            &ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        )
        .action
    };
    assert_eq!(decide(81), Action::Repeat { mark: marks.reject });
    assert_eq!(decide(80), Action::Repeat { mark: marks.allow });

    // An address the Node gained after compiling (a secondary, an IPv6
    // link-local or privacy address): the INPUT hook says the
    // destination is the Node, so the Node's policy applies to it.
    let to_new_address = |dst: [u8; 4], local| {
        let mut packet = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], dst, 64)
            .tcp(40000, 81, 1, 1024)
            .syn()
            .write(&mut packet, &[])
            .unwrap();
        step(
            &queued(&packet, 0, local),
            &ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        )
        .action
    };
    let v4 = [10, 0, 0, 99];
    assert_eq!(
        to_new_address(v4, Some(LocalSide::Destination)),
        Action::Repeat { mark: marks.reject }
    );
    // Without the hook's word it is nobody's address: not enforced.
    assert_eq!(
        to_new_address(v4, None),
        Action::Repeat { mark: marks.allow }
    );
    // The source side is the peer: its address stays a peer address.
    assert_eq!(
        to_new_address(v4, Some(LocalSide::Source)),
        Action::Repeat { mark: marks.allow }
    );
    // An IPv6 link-local destination is the Node's too: its rules are
    // evaluated (none matches this peer) instead of "not enforced".
    let decided = |local| {
        let mut packet = Vec::new();
        PacketBuilder::ipv6(
            "fe80::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            64,
        )
        .tcp(40000, 81, 1, 1024)
        .syn()
        .write(&mut packet, &[])
        .unwrap();
        let flow = Flow {
            local,
            ..parse_flow(&packet).unwrap()
        };
        let decision = ruleset.classify(&flow, &NoFqdn);
        decision.ingress.outcome
    };
    assert_eq!(decided(None), ClassifyOutcome::NotEnforced);
    assert_eq!(
        decided(Some(LocalSide::Destination)),
        ClassifyOutcome::NoRuleMatched
    );
}

#[test]
fn l7_connections_are_marked_for_inspection_unless_the_syn_carries_data() {
    let yaml = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: l7}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {}}]
  ingress:
  - action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {method: GET}}]
  - action: Allow
    ports: [{protocol: UDP, port: 53}]
    l7Protocols: [{http: {}}]
";
    let node = crate::compile::LocalNode {
        name: "n".into(),
        labels: Default::default(),
        addresses: vec!["10.0.0.2".parse().unwrap()],
    };
    let ruleset = crate::compile::compile_yaml(yaml, &node);
    let marks = MarkLayout::default();
    let decide = |packet: &[u8]| {
        step(
            &queued(packet, 0, None),
            &ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        )
    };
    let inspected = decide(&syn(80));
    assert_eq!(inspected.action, Action::Repeat { mark: marks.l7 });
    assert!(matches!(
        inspected.outcome,
        Outcome::Decided {
            verdict: Verdict::Allow,
            by: DecidedBy::Rule(_)
        }
    ));
    assert_eq!(
        decide(&syn(22)).action,
        Action::Repeat { mark: marks.allow }
    );
    let mut fast_open = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 80, 1, 1024)
        .syn()
        .write(&mut fast_open, b"GET /admin HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(decide(&fast_open).action, Action::Drop);
    let mut udp = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(40000, 53)
        .write(&mut udp, b"query")
        .unwrap();
    let dropped = decide(&udp);
    assert_eq!(dropped.action, Action::Drop);
    assert!(matches!(
        dropped.outcome,
        Outcome::Decided {
            verdict: Verdict::Drop,
            ..
        }
    ));
}

#[test]
fn fqdn_peers_match_what_the_lookup_learned() {
    let yaml = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: fqdn}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {}}]
  egress:
  - action: Allow
    to: [{fqdn: '*.example.test'}]
  - action: Drop
    to: [{ipBlock: {cidr: 0.0.0.0/0}}]
";
    let node = crate::compile::LocalNode {
        name: "n".into(),
        labels: Default::default(),
        addresses: vec!["10.0.0.1".parse().unwrap()],
    };
    let ruleset = crate::compile::compile_yaml(yaml, &node);
    let marks = MarkLayout::default();
    let learned = crate::fqdn::StaticFqdn(vec![(
        "www.example.test".into(),
        "10.0.0.2".parse().unwrap(),
    )]);
    let allowed = step(
        &queued(&syn(80), 0, None),
        &ruleset,
        &learned,
        &config(FailMode::Closed),
        NOW,
    );
    assert_eq!(allowed.action, Action::Repeat { mark: marks.allow });
    let unknown = step(
        &queued(&syn(80), 0, None),
        &ruleset,
        &NoFqdn,
        &config(FailMode::Closed),
        NOW,
    );
    assert_eq!(unknown.action, Action::Drop);
}

#[test]
fn malformed_packets_follow_the_fail_mode() {
    let truncated = &syn(80)[..21];
    let closed = step(
        &queued(truncated, 0, None),
        &PortPolicy,
        &NoFqdn,
        &config(FailMode::Closed),
        NOW,
    );
    assert_eq!(closed.action, Action::Drop);
    assert!(matches!(closed.outcome, Outcome::Malformed(_)));
    let open = step(
        &queued(truncated, 0, None),
        &PortPolicy,
        &NoFqdn,
        &config(FailMode::Open),
        NOW,
    );
    assert_eq!(open.action, Action::Accept);
}

/// Pods a, b (ns x, labels app=a/app=b, named port `http` = 80 on a and
/// 8080 on b) on node n (10.0.0.1), and policies that exercise every
/// way a decision can depend on more than the cache key: an FQDN peer,
/// a `sourcePort`, a logged rule, L7 rules, named ports, ipBlocks with
/// holes, a Kubernetes NetworkPolicy that isolates b, Drop and Reject.
const CACHE_POLICIES: &str = "apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {app: a}}
spec: {nodeName: n, containers: [{name: m, ports: [{name: http, containerPort: 80}]}]}
status: {podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}, {ip: 'fd00:1::1'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: x, labels: {app: b}}
spec: {nodeName: n, containers: [{name: m, ports: [{name: http, containerPort: 8080}]}]}
status: {podIP: 10.1.0.2, podIPs: [{ip: 10.1.0.2}, {ip: 'fd00:1::2'}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: mixed}
spec:
  priority: 5
  appliedTo: [{podSelector: {}}, {nodeSelector: {}}]
  egress:
  - action: Allow
    to: [{fqdn: '*.example.test'}]
    ports: [{protocol: TCP, port: 443}]
  - action: Reject
    to: [{ipBlock: {cidr: 192.0.2.0/24, except: [192.0.2.128/25]}}]
  ingress:
  - action: Allow
    ports: [{protocol: TCP, port: 22, sourcePort: 1000, sourceEndPort: 2000}]
  - action: Drop
    ports: [{protocol: TCP, port: 22}]
  - action: Drop
    enableLogging: true
    ports: [{protocol: UDP, port: 53}]
    from: [{ipBlock: {cidr: 198.51.100.0/24}}]
  - action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols: [{http: {method: GET}}]
    from: [{ipBlock: {cidr: 198.51.100.0/24}}]
  - action: Allow
    ports: [{protocol: TCP, port: http}]
    from: [{podSelector: {matchLabels: {app: a}}}]
  - action: Reject
    protocols: [{icmp: {icmpType: 8}}]
    from: [{ipBlock: {cidr: 203.0.113.0/24}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate-b, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
  ingress:
  - from: [{ipBlock: {cidr: 10.1.0.0/16}}]
    ports: [{protocol: TCP, port: 8080}]
";

const CACHE_ADDRESSES: [&str; 10] = [
    "10.1.0.1",
    "10.1.0.2",
    "10.0.0.1",
    "192.0.2.7",
    "192.0.2.200",
    "198.51.100.9",
    "203.0.113.5",
    "10.1.0.9",
    "fd00:1::1",
    "fd00:1::2",
];
const CACHE_PORTS: [u16; 8] = [22, 53, 80, 443, 8080, 9, 1500, 0];

/// Dry-run policies over [`CACHE_POLICIES`]'s: a Drop and an Allow by
/// address and port, an FQDN rule and a `sourcePort` rule (which make a
/// dry-run outcome depend on more than the key), and a Kubernetes
/// NetworkPolicy that would isolate `a`.
const DRY_RUN_POLICIES: &str = "---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: dry, annotations: {tollgate.io/dry-run: 'true'}}
spec:
  priority: 1
  tier: emergency
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Drop
    ports: [{protocol: TCP, port: 80}]
    from: [{ipBlock: {cidr: 10.1.0.0/24}}]
  - action: Allow
    from: [{ipBlock: {cidr: 203.0.113.0/24}}]
  egress:
  - action: Drop
    to: [{fqdn: '*.example.test'}]
    ports: [{protocol: TCP, port: 8080}]
  - action: Reject
    ports: [{protocol: UDP, port: 53, sourcePort: 1000, sourceEndPort: 2000}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate-a, namespace: x, annotations: {tollgate.io/dry-run: 'true'}}
spec:
  podSelector: {matchLabels: {app: a}}
  policyTypes: [Ingress]
  ingress:
  - from: [{ipBlock: {cidr: 10.1.0.2/32}}]
";

/// [`CACHE_POLICIES`], and with `dry_run` [`DRY_RUN_POLICIES`] too.
fn cache_ruleset_of(dry_run: bool) -> &'static Ruleset {
    static RULESETS: [std::sync::OnceLock<Ruleset>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    RULESETS[usize::from(dry_run)].get_or_init(|| {
        let node = crate::compile::LocalNode {
            name: "n".into(),
            labels: Default::default(),
            addresses: vec!["10.0.0.1".parse().unwrap()],
        };
        let extra = if dry_run { DRY_RUN_POLICIES } else { "" };
        crate::compile::compile_yaml(&format!("{CACHE_POLICIES}{extra}"), &node)
    })
}

fn cache_ruleset() -> &'static Ruleset {
    cache_ruleset_of(false)
}

/// A packet of `protocol` (0 TCP, 1 UDP, 2 ICMP echo or unreachable)
/// between two addresses of one family, with `payload`.
fn cache_packet(
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    (src_port, dst_port): (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let builder = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family"),
    };
    let mut out = Vec::new();
    let icmp_type = if dst_port % 2 == 0 { 8 } else { 3 };
    match (protocol, src.is_ipv4()) {
        (0, _) => builder
            .tcp(src_port, dst_port, 1, 1024)
            .syn()
            .write(&mut out, payload),
        (1, _) => builder.udp(src_port, dst_port).write(&mut out, payload),
        (_, true) => builder
            .icmpv4(etherparse::Icmpv4Type::Unknown {
                type_u8: icmp_type,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut out, payload),
        (_, false) => builder
            .icmpv6(etherparse::Icmpv6Type::Unknown {
                type_u8: icmp_type + 125,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut out, payload),
    }
    .unwrap();
    out
}

fn local_side(n: u8) -> Option<LocalSide> {
    match n % 3 {
        0 => None,
        1 => Some(LocalSide::Source),
        _ => Some(LocalSide::Destination),
    }
}

/// A source port, three times in four one at an edge of the policy's
/// `sourcePort: 1000, sourceEndPort: 2000` (or of the port space): a
/// source-port rule taken for cacheable shows only when the two flows'
/// ports fall on either side of an edge, which uniform ports almost
/// never did (audit 3, L7).
fn source_port() -> impl proptest::strategy::Strategy<Value = u16> {
    use proptest::prelude::*;
    prop_oneof![
        3 => proptest::sample::select(vec![0u16, 999, 1000, 1001, 1999, 2000, 2001, u16::MAX]),
        1 => any::<u16>(),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// A cacheable step's verdict is the verdict of every flow with its
    /// key, whatever the source port, the SYN's payload and the FQDN
    /// table: the kernel may apply it without asking. With dry-run
    /// policies too, and then no flow with the key has a dry-run verdict
    /// of its own (one the kernel answered would go unreported).
    #[test]
    fn a_cacheable_verdict_holds_for_every_flow_with_its_key(
        dry_run in proptest::prelude::any::<bool>(),
        src in 0..CACHE_ADDRESSES.len(),
        dst in 0..CACHE_ADDRESSES.len(),
        protocol in 0u8..3,
        dst_port in 0..CACHE_PORTS.len(),
        side in 0u8..3,
        ports in proptest::collection::vec(source_port(), 2),
        payloads in proptest::collection::vec(
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4), 2),
        learned in proptest::collection::vec(0..CACHE_ADDRESSES.len(), 0..3),
    ) {
        // The destination is drawn from the source's family (an assumption
        // rejecting the other third of the cases would run into proptest's
        // limit on rejects now and then).
        let src: IpAddr = CACHE_ADDRESSES[src].parse().unwrap();
        let same_family: Vec<IpAddr> = CACHE_ADDRESSES
            .iter()
            .map(|a| a.parse::<IpAddr>().unwrap())
            .filter(|a| a.is_ipv4() == src.is_ipv4())
            .collect();
        let dst = same_family[dst % same_family.len()];
        let ruleset = cache_ruleset_of(dry_run);
        let first_packet = cache_packet(src, dst, protocol, (ports[0], CACHE_PORTS[dst_port]), &payloads[0]);
        let first = step(
            &queued(&first_packet, 0, local_side(side)),
            ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        );
        let Some(entry) = first.cache else {
            return Ok(());
        };
        proptest::prop_assert!(first.dry_run.is_none(), "cached with a dry-run verdict");
        let decided = matches!(first.outcome, Outcome::Decided { verdict, .. } if verdict == entry.verdict);
        proptest::prop_assert!(decided, "the entry carries the step's verdict");
        let fqdn = crate::fqdn::StaticFqdn(
            learned
                .iter()
                .map(|&i| ("www.example.test".to_string(), CACHE_ADDRESSES[i].parse().unwrap()))
                .collect(),
        );
        let other_packet = cache_packet(src, dst, protocol, (ports[1], CACHE_PORTS[dst_port]), &payloads[1]);
        let other = step(
            &queued(&other_packet, 0, local_side(side)),
            ruleset,
            &fqdn,
            &config(FailMode::Closed),
            NOW,
        );
        proptest::prop_assert_eq!(other.cache, Some(entry));
        proptest::prop_assert_eq!(other.action, first.action);
        proptest::prop_assert!(other.dry_run.is_none(), "a dry-run verdict under a cached key");
    }
}

#[test]
fn dry_run_verdicts_are_reported_never_given_and_never_cached() {
    let ruleset = cache_ruleset_of(true);
    let plain = cache_ruleset_of(false);
    let a: IpAddr = "10.1.0.1".parse().unwrap();
    let b: IpAddr = "10.1.0.2".parse().unwrap();
    let decide = |ruleset, src: IpAddr, dst: IpAddr, protocol, ports| {
        let packet = cache_packet(src, dst, protocol, ports, &[]);
        step(
            &queued(&packet, 0, None),
            ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        )
    };
    // b -> a on the named port: allowed and cached without dry-run; with
    // it the dry-run Drop is reported, the connection still allowed, and
    // not cached (the next connection must be seen too).
    let without = decide(plain, b, a, 0, (4000, 80));
    let with = decide(ruleset, b, a, 0, (4000, 80));
    assert_eq!(with.action, without.action);
    assert_eq!(with.outcome, without.outcome);
    assert_eq!(
        without.cache.map(|e| e.verdict),
        Some(Verdict::Allow),
        "cached without the dry-run policy"
    );
    assert_eq!(with.cache, None);
    let dry = with.dry_run.expect("a dry-run Drop");
    assert_eq!(dry.verdict, Verdict::Drop);
    assert_eq!(
        dry.cause.policy().to_string(),
        "AntreaClusterNetworkPolicy:dry"
    );
    assert!(dry.record.dry_run);
    assert_eq!(dry.record.verdict, Verdict::Drop);
    assert!(
        dry.record
            .line()
            .contains(" AntreaPolicyIngressRule AntreaClusterNetworkPolicy:dry ingress-drop-"),
        "{}",
        dry.record.line()
    );
    assert!(
        dry.record.line().contains(" Ingress DryRunDrop "),
        "{}",
        dry.record.line()
    );
    // The ICMP reject from 203.0.113.5 to a: the dry-run Allow changes it.
    let rejected = decide(ruleset, "203.0.113.5".parse().unwrap(), a, 2, (0, 8));
    assert_eq!(
        rejected.action,
        decide(plain, "203.0.113.5".parse().unwrap(), a, 2, (0, 8)).action
    );
    assert_eq!(rejected.dry_run.map(|d| d.verdict), Some(Verdict::Allow));
    assert_eq!(rejected.cache, None);
    // A port no rule names: the dry-run isolation of a drops it, named
    // by its policy.
    let isolated = decide(ruleset, "10.0.0.9".parse().unwrap(), a, 0, (4000, 9));
    let dry = isolated.dry_run.expect("isolation");
    assert_eq!(
        dry.cause.policy().to_string(),
        "K8sNetworkPolicy:x/isolate-a"
    );
    assert!(
        dry.record.line().contains(
            " IngressDefaultRule K8sNetworkPolicy:x/isolate-a <nil> Ingress DryRunDrop <nil> x/a "
        ),
        "{}",
        dry.record.line()
    );
    // Where the dry-run outcome agrees and only the key decides both,
    // the verdict is cached as before: b -> b's own port from outside the
    // dry-run Drop's block.
    let agreed = decide(ruleset, "10.1.0.9".parse().unwrap(), b, 0, (4000, 8080));
    assert!(agreed.dry_run.is_none());
    assert_eq!(agreed.cache.map(|e| e.verdict), Some(Verdict::Allow));
    // An FQDN rule of a dry-run policy keeps its flows out of the cache
    // even where it agrees today (a learned address could change that).
    let fqdn = decide(ruleset, a, "192.0.2.200".parse().unwrap(), 0, (4000, 8080));
    assert!(fqdn.dry_run.is_none());
    assert_eq!(fqdn.cache, None);
    assert_eq!(
        decide(plain, a, "192.0.2.200".parse().unwrap(), 0, (4000, 8080))
            .cache
            .map(|e| e.verdict),
        Some(Verdict::Allow)
    );
}

#[test]
fn fqdn_l7_logged_and_source_port_decisions_are_never_cached() {
    let ruleset = cache_ruleset();
    let a: IpAddr = "10.1.0.1".parse().unwrap();
    let decide = |src: &str, dst: IpAddr, protocol, ports| {
        let packet = cache_packet(src.parse().unwrap(), dst, protocol, ports, &[]);
        step(
            &queued(&packet, 0, None),
            ruleset,
            &NoFqdn,
            &config(FailMode::Closed),
            NOW,
        )
    };
    let cached = |step: &Step| step.cache.map(|entry| entry.verdict);
    // An FQDN rule evaluated (the flow is dropped by none, but a
    // learned address would allow it): not cached.
    assert_eq!(
        cached(&decide(
            "10.1.0.1",
            "192.0.2.200".parse().unwrap(),
            0,
            (4000, 443)
        )),
        None
    );
    // sourcePort: the allowed port range and the drop behind it.
    assert_eq!(cached(&decide("10.1.0.2", a, 0, (1500, 22))), None);
    assert_eq!(cached(&decide("10.1.0.2", a, 0, (4000, 22))), None);
    // Logged.
    let logged = decide("198.51.100.9", a, 1, (4000, 53));
    assert!(!logged.audit.is_empty());
    assert_eq!(cached(&logged), None);
    // L7.
    let l7 = decide("198.51.100.9", a, 0, (4000, 80));
    assert_eq!(
        l7.action,
        Action::Repeat {
            mark: MarkLayout::default().l7
        }
    );
    assert_eq!(cached(&l7), None);
    // And what only the key decides is: a named port, an ipBlock
    // reject, the Kubernetes default drop, no rule at all.
    assert_eq!(
        cached(&decide("10.1.0.1", a, 0, (4000, 80))),
        Some(Verdict::Allow)
    );
    assert_eq!(
        cached(&decide(
            "10.1.0.1",
            "192.0.2.7".parse().unwrap(),
            1,
            (4000, 9)
        )),
        Some(Verdict::Reject)
    );
    assert_eq!(
        cached(&decide(
            "10.0.0.9",
            "10.1.0.2".parse().unwrap(),
            0,
            (4000, 8080)
        )),
        Some(Verdict::Drop)
    );
    assert_eq!(
        cached(&decide(
            "10.1.0.9",
            "10.1.0.2".parse().unwrap(),
            0,
            (4000, 8080)
        )),
        Some(Verdict::Allow)
    );
    assert_eq!(
        cached(&decide(
            "203.0.113.5",
            "198.51.100.1".parse().unwrap(),
            2,
            (0, 8)
        )),
        Some(Verdict::Allow)
    );
    assert_eq!(
        cached(&decide("203.0.113.5", a, 2, (0, 8))),
        Some(Verdict::Reject)
    );
}
