//! The DNS reply queue's handler: every queued reply is snooped, learned
//! from by the pure [`FqdnTable::on_reply`] step, the set writes it returns
//! are applied over netlink, and only then is the reply released. The
//! table forgets timed-out entries on [`Handler::tick`]. Malformed,
//! untrusted or unlearnable replies are released unchanged and counted; a
//! reply is never dropped except a TCP segment after a gap (the server
//! retransmits it). It never logs per packet.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::runtime::{self, Handler, Queue, QueueError, QueueSpec, Verdicts};
use crate::datapath::ipset_netlink::{EntryOp, IpsetSocket};
use crate::datapath::plan::fqdn_set;
use crate::datapath::Family;
use crate::fqdn::{
    DnsSnooper, DnsStep, FqdnPattern, FqdnTable, Release, RestoredEntry, SetWrite, SnoopEvent,
    DEFAULT_MAX_TCP_FLOWS, DEFAULT_MAX_TCP_MESSAGE,
};
use crate::packet::{Action, Queued};
use crate::telemetry::counters::counters;
use crate::telemetry::Metrics;

/// Bytes copied per queued reply: a whole packet (the kernel segments
/// GSO packets for a queue without the GSO flag).
pub const DNS_COPY_RANGE: u16 = u16::MAX;
/// Replies the kernel holds before it lets new ones through unlearned
/// (the DNS queue is always fail-open: skipping learning only denies).
pub const DNS_QUEUE_MAX_LEN: u32 = 4096;
/// How often the table forgets timed-out entries.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
/// Selectors whose set names are kept at most (the names are a SHA-1 of
/// the pattern): reselections seldom change more than a few.
const MAX_CACHED_NAMES: usize = 4096;

counters! {
    /// What the DNS reply worker saw and did.
    pub struct DnsCounters: one per agent {
        parsed: Counter "dns_replies" { result = "parsed" } = "DNS replies inspected, by result (parsed or failed)",
        failed: Counter "dns_replies" { result = "failed" } = "DNS replies inspected, by result (parsed or failed)",
        untrusted: Counter "dns_untrusted" = "Replies from servers outside dnsTrustedServers (released unlearned)",
        tcp_untracked: Counter "dns_tcp_untracked" = "DNS-over-TCP data on connections whose start was not seen (released unlearned)",
        tcp_gaps: Counter "dns_tcp_gaps" = "DNS-over-TCP segments after a gap (dropped for retransmission)",
        oversized: Counter "dns_oversized" = "DNS-over-TCP messages above the buffer bound (released unlearned)",
        learned: Counter "fqdn_addresses_learned" = "Addresses added to FQDN sets from DNS answers",
        refreshed: Counter "fqdn_addresses_refreshed" = "FQDN set entries whose timeout a DNS answer extended",
        evicted: Counter "fqdn_addresses_evicted" = "FQDN set entries removed to stay within the address bounds",
        expired: Counter "fqdn_addresses_expired" = "FQDN set addresses whose TTL passed",
        addresses: Gauge "fqdn_addresses" = "Addresses currently in FQDN sets",
        ipset_errors: Counter "dns_ipset_errors" = "Batches of FQDN set writes the kernel refused (the table still learned)",
    }
}

impl DnsCounters {
    fn snooped(&self, event: SnoopEvent) {
        let counter = match event {
            SnoopEvent::Malformed => &self.failed,
            SnoopEvent::Untrusted => &self.untrusted,
            SnoopEvent::TcpUntracked => &self.tcp_untracked,
            SnoopEvent::TcpGap => &self.tcp_gaps,
            SnoopEvent::Oversized => &self.oversized,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn stepped(&self, step: &DnsStep) {
        let add = |counter: &std::sync::atomic::AtomicU64, n| {
            counter.fetch_add(n, Ordering::Relaxed);
        };
        add(&self.parsed, step.parsed);
        add(&self.failed, step.failed);
        add(&self.learned, step.learned);
        add(&self.refreshed, step.refreshed);
        add(&self.evicted, step.evicted);
        if let Some(addresses) = step.addresses {
            self.addresses.store(addresses, Ordering::Relaxed);
        }
    }
}

/// How the DNS worker runs.
#[derive(Clone, Debug)]
pub struct DnsWorkerConfig {
    pub queue: u16,
    /// Only replies from these servers are learned (empty: all).
    pub trusted_servers: Vec<IpAddr>,
}

/// The running DNS worker thread (detached, like the connection workers).
pub struct DnsWorker {
    pub queue: u16,
    pub stats: Arc<DnsCounters>,
}

impl DnsWorker {
    /// Binds the queue and opens the ipset socket (errors are returned
    /// here), then starts the thread.
    pub fn spawn(
        config: DnsWorkerConfig,
        table: Arc<FqdnTable>,
        metrics: Arc<Metrics>,
    ) -> Result<DnsWorker, QueueError> {
        let queue = config.queue;
        let socket = Queue::open(QueueSpec {
            queue,
            name: "dns",
            copy_range: DNS_COPY_RANGE,
            max_len: DNS_QUEUE_MAX_LEN,
            fail_open: true,
        })?;
        let ipset = IpsetSocket::open().map_err(|e| QueueError::Setup {
            queue,
            step: "ipset netlink socket",
            source: std::io::Error::other(e.to_string()),
        })?;
        let stats = Arc::new(DnsCounters::default());
        let handler = Replies {
            snooper: DnsSnooper::new(
                config.trusted_servers,
                DEFAULT_MAX_TCP_FLOWS,
                DEFAULT_MAX_TCP_MESSAGE,
            ),
            table,
            ipset,
            names: HashMap::new(),
            stats: Arc::clone(&stats),
            last_expire: Instant::now(),
        };
        runtime::spawn(socket, handler, Arc::clone(&stats) as _, &metrics)?;
        Ok(DnsWorker { queue, stats })
    }
}

/// The entries of the kernel's FQDN sets (by set name, as the datapath
/// reads them) that belong to `selectors`, by selector index: what
/// [`FqdnTable::restore`] takes. Entries of unknown sets are left out.
pub fn restored_entries(
    selectors: &[FqdnPattern],
    kernel_sets: &[(String, Vec<(IpAddr, u32)>)],
) -> Vec<RestoredEntry> {
    let mut entries = Vec::new();
    for (selector, pattern) in selectors.iter().enumerate() {
        let names = [fqdn_set(pattern, Family::V4), fqdn_set(pattern, Family::V6)];
        for (_, set) in kernel_sets.iter().filter(|(name, _)| names.contains(name)) {
            entries.extend(set.iter().map(|&(address, remaining_secs)| RestoredEntry {
                selector,
                address,
                remaining_secs,
            }));
        }
    }
    entries
}

/// The handler of the DNS reply queue.
struct Replies {
    snooper: DnsSnooper,
    table: Arc<FqdnTable>,
    ipset: IpsetSocket,
    /// `[v4, v6]` set names of the patterns seen.
    names: HashMap<FqdnPattern, [String; 2]>,
    stats: Arc<DnsCounters>,
    last_expire: Instant,
}

impl Handler for Replies {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let snooped = self.snooper.snoop(packet.payload);
        for event in &snooped.events {
            self.stats.snooped(*event);
        }
        let step = self.table.on_reply(&snooped, self.table.millis(now));
        self.stats.stepped(&step);
        if !step.writes.is_empty() && self.write(&step.writes).is_err() {
            self.stats.ipset_errors.fetch_add(1, Ordering::Relaxed);
        }
        let action = match step.release {
            Release::Accept => Action::Accept,
            Release::Drop => Action::Drop,
        };
        out.give(packet.id, action);
    }

    fn tick(&mut self, now: Instant, _out: &mut Verdicts) {
        if now.saturating_duration_since(self.last_expire) < EXPIRE_EVERY {
            return;
        }
        self.last_expire = now;
        let expired = self.table.expire(self.table.millis(now));
        self.stats
            .expired
            .fetch_add(expired.expired, Ordering::Relaxed);
        self.stats
            .addresses
            .store(expired.addresses, Ordering::Relaxed);
    }
}

impl Replies {
    /// Applies `writes` to the kernel sets in one netlink batch.
    fn write(
        &mut self,
        writes: &[SetWrite],
    ) -> Result<(), crate::datapath::ipset_netlink::NetlinkError> {
        if self.names.len() > MAX_CACHED_NAMES {
            self.names.clear();
        }
        for write in writes {
            let (SetWrite::Add { pattern, .. } | SetWrite::Remove { pattern, .. }) = write;
            if !self.names.contains_key(pattern) {
                let names = [fqdn_set(pattern, Family::V4), fqdn_set(pattern, Family::V6)];
                self.names.insert(pattern.clone(), names);
            }
        }
        let set = |pattern: &FqdnPattern, address: &IpAddr| {
            let names = &self.names[pattern];
            match address {
                IpAddr::V4(_) => names[0].as_str(),
                IpAddr::V6(_) => names[1].as_str(),
            }
        };
        let ops: Vec<EntryOp<'_>> = writes
            .iter()
            .map(|write| match write {
                SetWrite::Add {
                    pattern,
                    address,
                    timeout_secs,
                } => EntryOp::Add {
                    set: set(pattern, address),
                    address: *address,
                    timeout_secs: *timeout_secs,
                },
                SetWrite::Remove { pattern, address } => EntryOp::Del {
                    set: set(pattern, address),
                    address: *address,
                },
            })
            .collect();
        self.ipset.apply(&ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restored_entries_take_the_kernel_sets_of_known_selectors() {
        let kept = FqdnPattern::new("*.kept.test");
        let quiet = FqdnPattern::new("quiet.test");
        let v4: IpAddr = "10.0.0.2".parse().unwrap();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        let sets = [
            (fqdn_set(&kept, Family::V6), vec![(v6, 30)]),
            ("tollgate-fqdn-stale-v4".to_string(), vec![(v4, 9)]),
            (fqdn_set(&kept, Family::V4), vec![(v4, 5)]),
        ];
        let entry = |address, remaining_secs| RestoredEntry {
            selector: 1,
            address,
            remaining_secs,
        };
        assert_eq!(
            restored_entries(&[quiet, kept], &sets),
            [entry(v6, 30), entry(v4, 5)]
        );
    }
}
