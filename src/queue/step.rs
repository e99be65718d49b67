//! The worker's pure step: packet bytes and current mark in, the verdict to
//! give the kernel out. No I/O, no clock, no locks.

use crate::classify::NoFqdn;
use crate::compile::Ruleset;
use crate::config::{FailMode, MarkLayout};
use crate::flow::{Flow, Verdict};

use super::packet::{parse_flow, PacketError};

/// What a worker asks the policy: the verdict for the first packet of a
/// connection. Implemented by the compiled ruleset.
pub trait Policy {
    fn verdict(&self, flow: &Flow) -> Verdict;

    /// The verdict, or that the connection is allowed subject to L7 rules.
    fn admit(&self, flow: &Flow) -> Admit {
        Admit::Verdict(self.verdict(flow))
    }
}

/// How a new connection is let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Verdict(Verdict),
    /// Allowed subject to L7 rules: every request is inspected.
    InspectL7,
}

impl Policy for Ruleset {
    /// FQDN peers match nothing until the DNS snooper feeds a lookup.
    fn verdict(&self, flow: &Flow) -> Verdict {
        self.classify(flow, &NoFqdn).verdict
    }

    fn admit(&self, flow: &Flow) -> Admit {
        let decision = self.classify(flow, &NoFqdn);
        if decision.verdict == Verdict::Allow && !decision.l7.is_empty() {
            Admit::InspectL7
        } else {
            Admit::Verdict(decision.verdict)
        }
    }
}

/// The verdict handed to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `NF_ACCEPT`: continue without a decision recorded in conntrack.
    Accept,
    /// `NF_DROP`.
    Drop,
    /// Set the packet mark and `NF_REPEAT`: the owned chain, re-entered from
    /// the top, saves the mark to conntrack and accepts, or rejects.
    Repeat { mark: u32 },
}

/// What happened, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Decided(Verdict),
    /// Accepted and marked *L7 under inspection*.
    Inspected,
    Malformed(PacketError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub action: Action,
    pub outcome: Outcome,
}

/// Decides one queued packet. Unparseable packets follow the fail mode:
/// accepted (without recording a decision) when open, dropped when closed.
/// A connection under L7 rules is accepted with the L7 mark only when it is
/// TCP and its SYN carries no data (TCP Fast Open data would reach the
/// server uninspected; the client retries the SYN without it); otherwise
/// the rule's implicit deny applies.
pub fn step<P: Policy + ?Sized>(
    packet: &[u8],
    mark: u32,
    policy: &P,
    marks: &MarkLayout,
    fail_mode: FailMode,
) -> Step {
    match parse_flow(packet) {
        Ok(flow) => {
            let verdict = match policy.admit(&flow) {
                Admit::Verdict(verdict) => verdict,
                Admit::InspectL7 => {
                    let tcp = matches!(flow.transport, crate::flow::Transport::Tcp { .. });
                    if tcp && crate::l7::tcp_payload_len(packet) == Some(0) {
                        return Step {
                            action: Action::Repeat {
                                mark: marks.apply(mark, marks.l7),
                            },
                            outcome: Outcome::Inspected,
                        };
                    }
                    Verdict::Drop
                }
            };
            let action = match verdict {
                Verdict::Allow => Action::Repeat {
                    mark: marks.apply(mark, marks.allow),
                },
                Verdict::Reject => Action::Repeat {
                    mark: marks.apply(mark, marks.reject),
                },
                Verdict::Drop => Action::Drop,
            };
            Step {
                action,
                outcome: Outcome::Decided(verdict),
            }
        }
        Err(error) => Step {
            action: match fail_mode {
                FailMode::Open => Action::Accept,
                FailMode::Closed => Action::Drop,
            },
            outcome: Outcome::Malformed(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Transport;
    use etherparse::PacketBuilder;

    /// Allows TCP to port 80, rejects port 81, drops everything else.
    struct PortPolicy;

    impl Policy for PortPolicy {
        fn verdict(&self, flow: &Flow) -> Verdict {
            match flow.transport {
                Transport::Tcp { dst_port: 80, .. } => Verdict::Allow,
                Transport::Tcp { dst_port: 81, .. } => Verdict::Reject,
                _ => Verdict::Drop,
            }
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
        let marks = MarkLayout::default();
        let foreign = 0x4000 | 0x0030_0000; // kube-proxy's bit, and stale bits of ours
        let allowed = step(&syn(80), foreign, &PortPolicy, &marks, FailMode::Closed);
        assert_eq!(
            allowed,
            Step {
                action: Action::Repeat {
                    mark: 0x4000 | 0x10_0000
                },
                outcome: Outcome::Decided(Verdict::Allow),
            }
        );
        let rejected = step(&syn(81), 0, &PortPolicy, &marks, FailMode::Closed);
        assert_eq!(rejected.action, Action::Repeat { mark: 0x20_0000 });
        let dropped = step(&syn(82), 0, &PortPolicy, &marks, FailMode::Open);
        assert_eq!(dropped.action, Action::Drop);
        assert_eq!(dropped.outcome, Outcome::Decided(Verdict::Drop));
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
        let (objects, problems) =
            crate::source::parse_documents(std::path::Path::new("p.yaml"), yaml);
        assert!(problems.is_empty(), "{problems:?}");
        let node = crate::compile::LocalNode {
            name: "n".into(),
            labels: [("role".to_string(), "cp".to_string())].into(),
            addresses: vec!["10.0.0.2".parse().unwrap()],
        };
        let ruleset = Ruleset::compile(&crate::model::Snapshot { objects }, &node);
        assert!(ruleset.enforced().node_ingress);
        let marks = MarkLayout::default();
        let decide = |port| step(&syn(port), 0, &ruleset, &marks, FailMode::Closed).action;
        assert_eq!(decide(81), Action::Repeat { mark: marks.reject });
        assert_eq!(decide(80), Action::Repeat { mark: marks.allow });
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
";
        let (objects, problems) =
            crate::source::parse_documents(std::path::Path::new("p.yaml"), yaml);
        assert!(problems.is_empty(), "{problems:?}");
        let node = crate::compile::LocalNode {
            name: "n".into(),
            labels: Default::default(),
            addresses: vec!["10.0.0.2".parse().unwrap()],
        };
        let ruleset = Ruleset::compile(&crate::model::Snapshot { objects }, &node);
        let marks = MarkLayout::default();
        let decide = |port| step(&syn(port), 0, &ruleset, &marks, FailMode::Closed);
        assert_eq!(
            decide(80),
            Step {
                action: Action::Repeat { mark: marks.l7 },
                outcome: Outcome::Inspected
            }
        );
        assert_eq!(decide(22).action, Action::Repeat { mark: marks.allow });
        let mut fast_open = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1, 1024)
            .syn()
            .write(&mut fast_open, b"GET /admin HTTP/1.1\r\n\r\n")
            .unwrap();
        let tfo = step(&fast_open, 0, &ruleset, &marks, FailMode::Closed);
        assert_eq!(tfo.action, Action::Drop);
    }

    #[test]
    fn malformed_packets_follow_the_fail_mode() {
        let marks = MarkLayout::default();
        let truncated = &syn(80)[..21];
        let closed = step(truncated, 0, &PortPolicy, &marks, FailMode::Closed);
        assert_eq!(closed.action, Action::Drop);
        assert!(matches!(closed.outcome, Outcome::Malformed(_)));
        let open = step(truncated, 0, &PortPolicy, &marks, FailMode::Open);
        assert_eq!(open.action, Action::Accept);
    }
}
