//! The connection worker's pure step: the first packet of a connection as
//! the kernel queued it (bytes, mark, the Node's side) and the time in;
//! the verdict to give the kernel, who decided, and the audit records to
//! write out, what a dry-run policy would have decided instead
//! ([`DryRunStep`]: never the verdict given), and what the kernel may
//! remember of the verdict (a [`CacheEntry`]: the decision held for every
//! flow with its key, and no dry-run policy would decide any of them
//! otherwise). No I/O, no clock, no locks.

use std::net::IpAddr;
use std::sync::Arc;

use crate::audit::{AuditRecord, Subject, Timestamp};
use crate::fqdn::FqdnLookup;
use crate::marks::{FailMode, MarkLayout};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::packet::{packet_length, parse_flow, Action, LocalSide, PacketError, Queued};
use crate::ruleset::{DecidedBy, DryRunCause, Outcome as ClassifyOutcome, Ruleset, VerdictCache};

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
    /// What the dry-run policies would have decided instead, when it
    /// differs from `verdict`.
    pub dry_run: Option<DryRunVerdict>,
    /// The ruling holds for every flow with the same [`CacheKey`]: it was
    /// reached without FQDN peers or `sourcePort` rules, and needs to see
    /// no later connection (no L7 inspection, nothing audited, and the
    /// dry-run policies decide every such flow as the enforced ones do).
    pub cacheable: bool,
}

/// A verdict the dry-run policies would have given a connection that the
/// enforced policy decided otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRunVerdict {
    pub verdict: Verdict,
    /// The dry-run rule or isolation it comes from.
    pub cause: DryRunCause,
    /// What the audit log prints about it.
    pub subject: Subject,
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
            dry_run: None,
            cacheable: false,
        }
    }
}

impl Policy for Ruleset {
    /// A connection allowed by L7 rules is marked for inspection. The
    /// dry-run outcome never changes the verdict: it is reported where it
    /// differs, and a flow it might decide otherwise is not cached (the
    /// kernel would answer its key's next connections unseen).
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
        let dry_run = decision.dry_run.as_ref().and_then(|outcome| {
            let change = outcome.change(&decision)?;
            Some(DryRunVerdict {
                verdict: change.verdict,
                cause: change.cause.clone(),
                subject: Subject::of_dry_run(&change),
            })
        });
        // Cached, a key's later connections would reach no worker: only
        // when the dry-run outcome is the enforced one for all of them.
        let dry_run_agrees = decision
            .dry_run
            .as_ref()
            .is_none_or(|d| d.key_only && d.verdict == verdict && !d.l7);
        Ruling {
            verdict,
            inspect_l7,
            decided_by,
            cacheable: decision.key_only
                && decision.l7.is_empty()
                && audit.is_empty()
                && dry_run_agrees,
            audit,
            dry_run,
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
    /// What the dry-run policies would have decided instead.
    pub dry_run: Option<DryRunStep>,
    /// Set when the verdict holds for every flow with the packet's key.
    pub cache: Option<CacheEntry>,
    /// The flow decided (`None`: the packet could not be parsed), for
    /// `tollgate observe`.
    pub flow: Option<Flow>,
}

/// A dry-run policy's different verdict on the connection: counted by the
/// worker, and its line (disposition `DryRun<Verdict>`) handed to the
/// audit log when there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRunStep {
    pub verdict: Verdict,
    pub cause: DryRunCause,
    pub record: AuditRecord,
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
                dry_run,
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
            let length = || packet_length(bytes);
            let audit = if audit.is_empty() {
                Vec::new()
            } else {
                let length = length();
                audit
                    .into_iter()
                    .map(|subject| subject.record(now, flow, length))
                    .collect()
            };
            let dry_run = dry_run.map(|d| DryRunStep {
                verdict: d.verdict,
                cause: d.cause,
                record: d.subject.record(now, flow, length()),
            });
            Step {
                action,
                outcome: Outcome::Decided {
                    verdict,
                    by: decided_by,
                },
                audit,
                dry_run,
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
            dry_run: None,
            cache: None,
            flow: None,
        },
    }
}

#[cfg(test)]
mod tests;
