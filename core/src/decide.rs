//! The connection worker's pure step: the first packet of a connection as
//! the kernel queued it (bytes, mark, the Node's side) and the time in;
//! the verdict to give the kernel, who decided, and the audit records to
//! write out, and what the kernel may remember of the verdict (a
//! [`CacheEntry`]: the decision held for every flow with its key). No I/O,
//! no clock, no locks.

use std::net::IpAddr;
use std::sync::Arc;

use crate::audit::{AuditRecord, Subject, Timestamp};
use crate::fqdn::FqdnLookup;
use crate::marks::{FailMode, MarkLayout};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::packet::{packet_length, parse_flow, Action, LocalSide, PacketError, Queued};
use crate::ruleset::{DecidedBy, Outcome as ClassifyOutcome, Ruleset, VerdictCache};

/// What a worker asks the policy: the ruling on the first packet of a
/// connection (whose [`Flow::local`] names the Node's side when the kernel
/// did), given what the DNS snooper has learned (`fqdn`). Implemented by
/// the compiled ruleset.
pub trait Policy {
    fn decide(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Ruling;

    /// Where the kernel caches this policy's cacheable verdicts; `None`:
    /// nowhere.
    fn verdict_cache(&self) -> Option<VerdictCache> {
        None
    }
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
    /// The ruling holds for every flow with the same [`CacheKey`]: it was
    /// reached without FQDN peers or `sourcePort` rules, and needs to see
    /// no later connection (no L7 inspection, nothing audited).
    pub cacheable: bool,
}

impl Ruling {
    /// A verdict no rule is named for and nothing is audited; not to be
    /// cached.
    pub fn plain(verdict: Verdict) -> Ruling {
        Ruling {
            verdict,
            inspect_l7: false,
            decided_by: DecidedBy::NoRule,
            audit: Vec::new(),
            cacheable: false,
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
        let audit = Subject::of(&decision, verdict, self);
        Ruling {
            verdict,
            inspect_l7,
            decided_by,
            cacheable: decision.key_only && decision.l7.is_empty() && audit.is_empty(),
            audit,
        }
    }

    fn verdict_cache(&self) -> Option<VerdictCache> {
        self.enforced().verdict_cache
    }
}

/// What a cached verdict is looked up by: the hook (as the side it names
/// the Node), both addresses, the protocol and the destination port, or
/// for ICMP the type and code (`type << 8 | code`, as the kernel's
/// `hash:ip,port,ip` sets read them). Only TCP, UDP, SCTP and ICMP have
/// one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub local: Option<LocalSide>,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IP protocol number (ICMPv6 is 58).
    pub protocol: u8,
    pub port: u16,
}

impl CacheKey {
    pub fn of(flow: &Flow) -> Option<CacheKey> {
        let (protocol, port) = match flow.transport {
            Transport::Tcp { dst_port, .. } => (6, dst_port),
            Transport::Udp { dst_port, .. } => (17, dst_port),
            Transport::Sctp { dst_port, .. } => (132, dst_port),
            Transport::Icmp {
                icmp_type,
                icmp_code,
            } => (
                if flow.src.is_ipv4() { 1 } else { 58 },
                u16::from(icmp_type) << 8 | u16::from(icmp_code),
            ),
            Transport::Igmp { .. } | Transport::Other { .. } => return None,
        };
        Some(CacheKey {
            local: flow.local,
            src: flow.src,
            dst: flow.dst,
            protocol,
            port,
        })
    }
}

/// A verdict the kernel may apply to every new connection with `key`
/// without asking a worker, as long as the ruleset that decided it is in
/// force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheEntry {
    pub key: CacheKey,
    pub verdict: Verdict,
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
    /// Set when the verdict holds for every flow with the packet's key.
    pub cache: Option<CacheEntry>,
    /// The flow decided (`None`: the packet could not be parsed), for
    /// `tollgate observe`.
    pub flow: Option<Flow>,
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
                cacheable,
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
            let cache = cacheable
                .then(|| CacheKey::of(&flow))
                .flatten()
                .map(|key| CacheEntry { key, verdict });
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
                cache,
                flow: Some(flow),
            }
        }
        Err(error) => Step {
            action: match config.fail_mode {
                FailMode::Open => Action::Accept,
                FailMode::Closed => Action::Drop,
            },
            outcome: Outcome::Malformed(error),
            audit: Vec::new(),
            cache: None,
            flow: None,
        },
    }
}

#[cfg(test)]
mod tests;
