//! The DNS reply queue's handler: snoop → the pure [`FqdnTable::on_reply`]
//! step → its set writes over netlink → only then the reply's release;
//! expiry runs on [`Handler::tick`]. It never drops a reply except a TCP
//! segment after a gap, and never logs per packet.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fqdn_sets::FqdnSets;
use super::runtime::{self, Handler, Queue, QueueError, QueueSpec, Verdicts};
use crate::config::FqdnConfig;
use crate::fqdn::{
    DnsSnooper, DnsStep, FqdnTable, Release, DEFAULT_MAX_TCP_FLOWS, DEFAULT_MAX_TCP_MESSAGE,
};
use crate::packet::{Action, Queued};
use crate::telemetry::counters::counters;
use crate::telemetry::Metrics;

/// Bytes copied per queued reply: a whole packet (the kernel segments
/// GSO packets for a queue without the GSO flag).
const DNS_COPY_RANGE: u16 = u16::MAX;
/// Replies the kernel holds before it lets new ones through unlearned
/// (the DNS queue is always fail-open: skipping learning only denies).
const DNS_QUEUE_MAX_LEN: u32 = 4096;
/// How often the table forgets timed-out entries.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

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
    fn stepped(&self, step: &DnsStep) {
        for (counter, n) in [
            (&self.parsed, step.parsed),
            (&self.failed, step.failed),
            (&self.untrusted, step.untrusted),
            (&self.tcp_untracked, step.tcp_untracked),
            (&self.tcp_gaps, step.tcp_gaps),
            (&self.oversized, step.oversized),
            (&self.learned, step.learned),
            (&self.refreshed, step.refreshed),
            (&self.evicted, step.evicted),
        ] {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        if let Some(addresses) = step.addresses {
            self.addresses.store(addresses, Ordering::Relaxed);
        }
    }
}

/// The running DNS worker thread (detached, like the connection workers).
pub struct DnsWorker {
    pub queue: u16,
}

impl DnsWorker {
    /// Binds the queue and opens the ipset socket (errors are returned
    /// here), then starts the thread.
    pub fn spawn(
        config: &FqdnConfig,
        table: Arc<FqdnTable>,
        metrics: Arc<Metrics>,
    ) -> Result<DnsWorker, QueueError> {
        let queue = config.dns_queue;
        let spec = QueueSpec {
            queue,
            name: "dns",
            copy_range: DNS_COPY_RANGE,
            max_len: DNS_QUEUE_MAX_LEN,
            fail_open: true,
        };
        let trusted = config.trusted_servers.clone();
        let stats = Arc::new(DnsCounters::default());
        let handler_stats = Arc::clone(&stats);
        let open = move || {
            let socket = Queue::open(spec)?;
            let sets = FqdnSets::open().map_err(|e| QueueError::Setup {
                queue,
                step: "ipset netlink socket",
                source: std::io::Error::other(e.to_string()),
            })?;
            let handler = Replies {
                snooper: DnsSnooper::new(
                    trusted.clone(),
                    DEFAULT_MAX_TCP_FLOWS,
                    DEFAULT_MAX_TCP_MESSAGE,
                ),
                table: Arc::clone(&table),
                sets,
                stats: Arc::clone(&handler_stats),
                last_expire: Instant::now(),
            };
            Ok((socket, handler))
        };
        runtime::spawn(open, Arc::clone(&stats) as _, &metrics)?;
        Ok(DnsWorker { queue })
    }
}

/// The handler of the DNS reply queue.
struct Replies {
    snooper: DnsSnooper,
    table: Arc<FqdnTable>,
    sets: FqdnSets,
    stats: Arc<DnsCounters>,
    last_expire: Instant,
}

impl Handler for Replies {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let snooped = self.snooper.snoop(packet.payload);
        let step = self.table.on_reply(&snooped, self.table.millis(now));
        self.stats.stepped(&step);
        if self.sets.write(&step.writes).is_err() {
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
