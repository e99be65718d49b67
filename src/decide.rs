//! The connection worker's pure step: the first packet of a connection as
//! the kernel queued it (bytes, mark, the Node's side) and the time in;
//! the verdict to give the kernel, who decided, and the audit records to
//! write out. No I/O, no clock, no locks.

use std::sync::Arc;

use crate::audit::{AuditRecord, Subject, Timestamp};
use crate::fqdn::FqdnLookup;
use crate::marks::{FailMode, MarkLayout};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::packet::{packet_length, parse_flow, Action, PacketError, Queued};
use crate::ruleset::{DecidedBy, Outcome as ClassifyOutcome, Ruleset};

/// What a worker asks the policy: the ruling on the first packet of a
/// connection (whose [`Flow::local`] names the Node's side when the kernel
/// did), given what the DNS snooper has learned (`fqdn`). Implemented by
/// the compiled ruleset.
pub trait Policy {
    fn decide(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Ruling;
}

/// A policy's answer for one connection.
#[derive(Clone, Debug, PartialEq)]
pub struct Ruling {
    pub verdict: Verdict,
    /// Allowed subject to L7 rules: every request is inspected.
    pub inspect_l7: bool,
    pub decided_by: DecidedBy,
    /// The directions the audit log records (empty unless a logged rule,
    /// or a logged Kubernetes default drop, decided).
    pub audit: Vec<Subject>,
}

impl Ruling {
    /// A verdict no rule is named for and nothing is audited.
    pub fn plain(verdict: Verdict) -> Ruling {
        Ruling {
            verdict,
            inspect_l7: false,
            decided_by: DecidedBy::NoRule,
            audit: Vec::new(),
        }
    }
}

impl Policy for Ruleset {
    /// A connection allowed by L7 rules is marked for inspection.
    fn decide(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Ruling {
        let decision = self.classify(flow, fqdn);
        let verdict = decision.verdict;
        let inspect_l7 = verdict == Verdict::Allow && !decision.l7.is_empty();
        let deciding = decision.deciding();
        let decided_by = match &deciding.outcome {
            ClassifyOutcome::Rule { rule } => DecidedBy::Rule(Arc::clone(rule)),
            ClassifyOutcome::K8sDefaultDeny => DecidedBy::K8sDefaultDrop,
            _ => DecidedBy::NoRule,
        };
        Ruling {
            verdict,
            inspect_l7,
            decided_by,
            audit: Subject::of(&decision, verdict, self),
        }
    }
}

/// What happened, for the counters.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Decided { verdict: Verdict, by: DecidedBy },
    Malformed(PacketError),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub action: Action,
    pub outcome: Outcome,
    /// Lines for the audit log, stamped with `now` and the packet's length.
    pub audit: Vec<AuditRecord>,
}

/// How the step turns verdicts into kernel actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepConfig {
    pub marks: MarkLayout,
    pub fail_mode: FailMode,
}

/// Decides one queued packet seen at `now`. Unparseable packets follow the
/// fail mode: accepted (without recording a decision) when open, dropped
/// when closed. A connection under L7 rules is accepted with the L7 mark
/// only when it is TCP and its SYN carries no data (TCP Fast Open data
/// would reach the server uninspected; the client retries the SYN without
/// it); otherwise the rule's implicit deny applies.
pub fn step<P: Policy + ?Sized>(
    packet: &Queued<'_>,
    policy: &P,
    fqdn: &dyn FqdnLookup,
    config: &StepConfig,
    now: Timestamp,
) -> Step {
    let (bytes, mark, marks) = (packet.payload, packet.mark, &config.marks);
    match parse_flow(bytes) {
        Ok(flow) => {
            let flow = Flow {
                local: packet.local,
                ..flow
            };
            let Ruling {
                mut verdict,
                inspect_l7,
                decided_by,
                audit,
            } = policy.decide(&flow, fqdn);
            let tcp = matches!(flow.transport, Transport::Tcp { .. });
            let inspectable = tcp && crate::packet::tcp_payload_len(bytes) == Some(0);
            if inspect_l7 && !inspectable {
                verdict = Verdict::Drop;
            }
            let action = match verdict {
                Verdict::Allow if inspect_l7 => Action::Repeat {
                    mark: marks.apply(mark, marks.l7),
                },
                Verdict::Allow => Action::Repeat {
                    mark: marks.apply(mark, marks.allow),
                },
                Verdict::Reject => Action::Repeat {
                    mark: marks.apply(mark, marks.reject),
                },
                Verdict::Drop => Action::Drop,
            };
            let audit = if audit.is_empty() {
                Vec::new()
            } else {
                let length = packet_length(bytes);
                audit
                    .into_iter()
                    .map(|subject| subject.record(now, flow, length))
                    .collect()
            };
            Step {
                action,
                outcome: Outcome::Decided {
                    verdict,
                    by: decided_by,
                },
                audit,
            }
        }
        Err(error) => Step {
            action: match config.fail_mode {
                FailMode::Open => Action::Accept,
                FailMode::Closed => Action::Drop,
            },
            outcome: Outcome::Malformed(error),
            audit: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
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
            labels: [("role".to_string(), "cp".to_string())].into(),
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
}
