//! The DNS worker's pure step: a snooped packet, the outstanding queries
//! and the time in; the FQDN set writes it requires, the packet's release
//! and its counts out ([`DnsStep`]). A query is remembered; a reply is
//! learned from only if it answers an outstanding query. The writes are
//! applied before the release (no race). Never writes a set, reads the
//! clock or parses under the table's lock.

use std::net::IpAddr;

use super::queries::{Answered, Direction, OutstandingQueries};
use super::{
    FqdnPattern, FqdnTable, IpsetChange, LearnerCounters, Release, SnoopEvent, Snooped, Source,
};
use crate::dns;

/// One write to the kernel set of `pattern` for the address family of
/// `address`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetWrite {
    /// Add the address, or refresh its timeout.
    Add {
        pattern: FqdnPattern,
        address: IpAddr,
        timeout_secs: u32,
    },
    /// Remove the address (evicted to stay within the bounds).
    Remove {
        pattern: FqdnPattern,
        address: IpAddr,
    },
}

/// What one reply requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsStep {
    /// To apply, in order, before the reply is released.
    pub writes: Vec<SetWrite>,
    pub release: Release,
    /// DNS messages parsed and learned from.
    pub parsed: u64,
    /// Packets or DNS messages that could not be read (released unchanged).
    pub failed: u64,
    /// Queries remembered, queries that could not be read, and outstanding
    /// queries forgotten to stay within the bound.
    pub queries: u64,
    pub queries_failed: u64,
    pub queries_evicted: u64,
    /// Queries outstanding after the packet.
    pub outstanding: u64,
    /// Parsed replies not learned from: no outstanding query on their flow
    /// with their id, or one that asked another question.
    pub unasked: u64,
    pub other_question: u64,
    /// Why the packet was not learned from, when it was not (see
    /// [`SnoopEvent`]).
    pub untrusted: u64,
    pub wrong_interface: u64,
    pub tcp_untracked: u64,
    pub tcp_gaps: u64,
    pub oversized: u64,
    /// Set entries created, refreshed and evicted by this reply.
    pub learned: u64,
    pub refreshed: u64,
    pub evicted: u64,
    /// Entries in the table after the reply, if it learned anything.
    pub addresses: Option<u64>,
}

impl FqdnTable {
    /// Counts what the snooper saw in a packet; remembers the queries it
    /// completed in `queries`, and learns the answers of the replies it
    /// completed that answer one of them, at
    /// `now_ms` on the table's clock. The messages are parsed before the
    /// lock is taken; the writes name their selectors' patterns, so a
    /// reselect meanwhile cannot misdirect them.
    pub fn on_packet(
        &self,
        snooped: &Snooped,
        queries: &mut OutstandingQueries,
        now_ms: u64,
    ) -> DnsStep {
        let mut step = DnsStep {
            writes: Vec::new(),
            release: snooped.release,
            parsed: 0,
            failed: 0,
            queries: 0,
            queries_failed: 0,
            queries_evicted: 0,
            outstanding: 0,
            unasked: 0,
            other_question: 0,
            untrusted: 0,
            wrong_interface: 0,
            tcp_untracked: 0,
            tcp_gaps: 0,
            oversized: 0,
            learned: 0,
            refreshed: 0,
            evicted: 0,
            addresses: None,
        };
        for event in &snooped.events {
            *match event {
                SnoopEvent::Malformed => &mut step.failed,
                SnoopEvent::Untrusted => &mut step.untrusted,
                SnoopEvent::WrongInterface => &mut step.wrong_interface,
                SnoopEvent::TcpUntracked => &mut step.tcp_untracked,
                SnoopEvent::TcpGap => &mut step.tcp_gaps,
                SnoopEvent::Oversized => &mut step.oversized,
            } += 1;
        }
        let mut resolutions = Vec::new();
        if let Some(flow) = &snooped.flow {
            for message in &snooped.messages {
                match flow.direction {
                    Direction::Query => match dns::parse_query(message) {
                        Ok(query) => {
                            step.queries += 1;
                            if queries.asked(flow, query, now_ms) {
                                step.queries_evicted += 1;
                            }
                        }
                        Err(_) => step.queries_failed += 1,
                    },
                    Direction::Reply => match dns::parse_reply(message) {
                        Ok(reply) => {
                            step.parsed += 1;
                            match queries.answered(flow, reply.query(), now_ms) {
                                Answered::Matched => resolutions.extend(reply.resolved()),
                                Answered::Unasked => step.unasked += 1,
                                Answered::OtherQuestion => step.other_question += 1,
                            }
                        }
                        Err(_) => step.failed += 1,
                    },
                }
            }
        }
        step.outstanding = queries.len() as u64;
        if resolutions.is_empty() {
            return step;
        }
        let learned = self.learn_answers(&resolutions, Source::Snooped, now_ms);
        step.writes = learned.writes;
        step.learned = learned.learned;
        step.refreshed = learned.refreshed;
        step.evicted = learned.evicted;
        step.addresses = Some(learned.addresses);
        step
    }

    /// Learns `resolutions` (of a snooped reply, or of an answer tollgate
    /// asked for itself: `source`) at `now_ms`: the set writes to apply
    /// and what they count. The writes name their selectors' patterns.
    pub fn learn_answers(
        &self,
        resolutions: &[dns::Resolution],
        source: Source,
        now_ms: u64,
    ) -> Learned {
        let mut learner = self.write();
        let before = learner.counters();
        let changes = learner.learn_from(resolutions, source, now_ms);
        let selectors = learner.selectors();
        let writes = changes
            .into_iter()
            .filter_map(|change| {
                Some(match change {
                    IpsetChange::Add {
                        selector,
                        address,
                        timeout_secs,
                    } => SetWrite::Add {
                        pattern: selectors.get(selector)?.clone(),
                        address,
                        timeout_secs,
                    },
                    IpsetChange::Remove { selector, address } => SetWrite::Remove {
                        pattern: selectors.get(selector)?.clone(),
                        address,
                    },
                })
            })
            .collect();
        let after: LearnerCounters = learner.counters();
        Learned {
            writes,
            learned: after.learned.saturating_sub(before.learned),
            refreshed: after.refreshed.saturating_sub(before.refreshed),
            evicted: after.evicted.saturating_sub(before.evicted),
            addresses: learner.installed() as u64,
        }
    }
}

/// What learning one answer's addresses requires and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// To apply, in order, before the answer is used.
    pub writes: Vec<SetWrite>,
    /// Set entries created, refreshed and evicted.
    pub learned: u64,
    pub refreshed: u64,
    pub evicted: u64,
    /// Entries in the table afterwards.
    pub addresses: u64,
}

#[cfg(test)]
mod tests;
