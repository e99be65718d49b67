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
use crate::counters;
use crate::dns;

counters! {
    /// What the DNS reply worker saw and did: [`FqdnTable::on_packet`]
    /// counts each packet in a [`DnsCounts`], the worker adds it here.
    pub struct DnsCounters: one per agent, counted in DnsCounts {
        parsed: Counter "dns_replies" { result = "parsed" } = "DNS replies inspected, by result (parsed or failed)",
        failed: Counter "dns_replies" { result = "failed" } = "DNS replies inspected, by result (parsed or failed)",
        untrusted: Counter "dns_untrusted" = "Replies from servers outside dnsTrustedServers (released unlearned)",
        wrong_interface: Counter "dns_wrong_interface" = "Replies that came in on another interface than the route to their server (released unlearned)",
        unasked: Counter "dns_unasked" = "Parsed replies that answer no outstanding query: never asked, answered already or timed out (released unlearned)",
        other_question: Counter "dns_other_question" = "Parsed replies whose id is outstanding on their flow with another question (released unlearned)",
        queries: Counter "dns_queries" { result = "remembered" } = "DNS queries seen, by result (remembered or failed)",
        queries_failed: Counter "dns_queries" { result = "failed" } = "DNS queries seen, by result (remembered or failed)",
        query_copies: Counter "dns_query_copies" = "Copies of DNS queries over UDP read from the NFLOG group fqdn.dnsLogGroup (the queries themselves pass unheld)",
        query_copies_lost: Counter "dns_query_copies_lost" = "Times the kernel reported copies of DNS queries lost to a full NFLOG socket buffer (fqdn.queryLogBuffer)",
        unasked_after_loss: Counter "dns_unasked_after_loss" = "Replies that answered no outstanding query while copies of queries had been lost within fqdn.queryTimeout: their query may be among those lost (released unlearned; also in dns_unasked)",
        queries_evicted: Counter "dns_queries_evicted" = "Outstanding queries forgotten to stay within fqdn.maxOutstandingQueries",
        queries_unanswered: Counter "dns_queries_unanswered" = "Queries forgotten unanswered after fqdn.queryTimeout",
        outstanding: Gauge "dns_queries_outstanding" = "DNS queries waiting for their answer",
        tcp_untracked: Counter "dns_tcp_untracked" = "DNS-over-TCP data on connections whose start was not seen (released unlearned)",
        tcp_gaps: Counter "dns_tcp_gaps" = "DNS-over-TCP segments after a gap (dropped for retransmission)",
        oversized: Counter "dns_oversized" = "DNS-over-TCP messages above the buffer bound (released unlearned)",
        learned: Counter "fqdn_addresses_learned" = "Addresses added to FQDN sets from DNS answers",
        refreshed: Counter "fqdn_addresses_refreshed" = "FQDN set entries whose timeout a DNS answer extended",
        evicted: Counter "fqdn_addresses_evicted" = "FQDN set entries removed to stay within the address bounds",
        expired: Counter "fqdn_addresses_expired" = "FQDN set addresses whose TTL passed",
        addresses: Gauge "fqdn_addresses" = "Addresses currently in FQDN sets",
        ipset_errors: Counter "dns_ipset_errors" = "Batches of FQDN set writes the kernel refused (the table still learned)",
        write_batches: Counter "fqdn_write_batches" = "Batches of FQDN set writes sent to the kernel, one sendmsg each, shared by the replies that arrived together",
        write_entries: Counter "fqdn_write_entries" = "FQDN set writes sent in those batches (divided by fqdn_write_batches: the mean batch size)",
        write_batch_peak: Gauge "fqdn_write_batch_peak" = "Most FQDN set writes in one batch since the start",
        write_queue: Gauge "fqdn_write_queue" = "FQDN set writes queued or in flight, not yet acknowledged by the kernel",
        write_queue_peak: Gauge "fqdn_write_queue_peak" = "Most FQDN set writes queued at once since the start (bound: fqdn.writeQueue)",
        replies_held: Counter "dns_replies_held" = "DNS replies held until the kernel acknowledged the set writes of their addresses",
        held_micros: Counter "dns_replies_held_micros" = "Microseconds DNS replies were held for their set writes, summed (divided by dns_replies_held: the mean wait)",
        replies_delayed: Counter "dns_replies_delayed" = "DNS replies that found the set-write queue full (fqdn.writeQueue) and waited for it to be written (delayed, never dropped)",
        resolved: Counter "fqdn_resolutions" { result = "answered" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_nodata: Counter "fqdn_resolutions" { result = "nodata" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_nxdomain: Counter "fqdn_resolutions" { result = "nxdomain" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_refused: Counter "fqdn_resolutions" { result = "refused" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_timeout: Counter "fqdn_resolutions" { result = "timeout" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_failed: Counter "fqdn_resolutions" { result = "failed" } = "Queries tollgate sent itself for exact FQDN selectors, one per name and record type, by result (answered, nodata, nxdomain, refused, timeout, failed)",
        resolve_learned: Counter "fqdn_addresses_resolved" = "Addresses added to FQDN sets from answers tollgate asked for (also in fqdn_addresses_learned)",
        resolve_mismatched: Counter "fqdn_resolve_mismatched" = "Messages on a resolve socket that answer none of its queries (ignored)",
    }
}

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
    /// What the packet showed: messages parsed and learned from, queries
    /// remembered, why it was not learned from, set entries created,
    /// refreshed and evicted, and the gauges after it (queries
    /// outstanding; entries in the table if it learned anything).
    pub counts: DnsCounts,
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
            counts: DnsCounts::default(),
        };
        let counts = &mut step.counts;
        for event in &snooped.events {
            *match event {
                SnoopEvent::Malformed => &mut counts.failed,
                SnoopEvent::Untrusted => &mut counts.untrusted,
                SnoopEvent::WrongInterface => &mut counts.wrong_interface,
                SnoopEvent::TcpUntracked => &mut counts.tcp_untracked,
                SnoopEvent::TcpGap => &mut counts.tcp_gaps,
                SnoopEvent::Oversized => &mut counts.oversized,
            } += 1;
        }
        let mut resolutions = Vec::new();
        if let Some(flow) = &snooped.flow {
            for message in &snooped.messages {
                match flow.direction {
                    Direction::Query => match dns::parse_query(message) {
                        Ok(query) => {
                            counts.queries += 1;
                            if queries.asked(flow, query, now_ms) {
                                counts.queries_evicted += 1;
                            }
                        }
                        Err(_) => counts.queries_failed += 1,
                    },
                    Direction::Reply => match dns::parse_reply(message) {
                        Ok(reply) => {
                            counts.parsed += 1;
                            match queries.answered(flow, reply.query(), now_ms) {
                                Answered::Matched => resolutions.extend(reply.resolved()),
                                Answered::Unasked => counts.unasked += 1,
                                Answered::OtherQuestion => counts.other_question += 1,
                            }
                        }
                        Err(_) => counts.failed += 1,
                    },
                }
            }
        }
        counts.outstanding = Some(queries.len() as u64);
        if resolutions.is_empty() {
            return step;
        }
        let learned = self.learn_answers(&resolutions, Source::Snooped, now_ms);
        step.counts.learned = learned.learned;
        step.counts.refreshed = learned.refreshed;
        step.counts.evicted = learned.evicted;
        step.counts.addresses = Some(learned.addresses);
        step.writes = learned.writes;
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
