//! The DNS reply queue: one OS thread reads every queued DNS reply, learns
//! the addresses its answers give for FQDN selectors into the shared
//! [`FqdnMirror`], writes them to the kernel's FQDN ipsets over netlink,
//! and only then releases the reply. Malformed, untrusted or unlearnable
//! replies are released unchanged and counted; the worker never drops a
//! reply except a TCP segment after a gap (the server retransmits it). It
//! never logs per packet, and the mirror's lock is never held across a
//! system call.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use crate::classify::FqdnLookup;
use crate::datapath::ipset_netlink::{EntryOp, IpsetSocket};
use crate::datapath::plan::fqdn_set;
use crate::datapath::Family;
use crate::dns;
use crate::fqdn::{
    DnsSnooper, FqdnLearner, FqdnPattern, IpsetChange, LearnerConfig, LearnerCounters, Release,
    RestoredEntry, SnoopEvent, DEFAULT_MAX_TCP_FLOWS, DEFAULT_MAX_TCP_MESSAGE,
};
use crate::telemetry::counters::counters;
use crate::telemetry::Metrics;

use super::runtime::{self, Handler, Queue, QueueError, QueueSpec, Verdicts};
use crate::packet::{Action, Queued};

/// Bytes copied per queued reply: a whole packet (the kernel segments
/// GSO packets for a queue without the GSO flag).
pub const DNS_COPY_RANGE: u16 = u16::MAX;
/// Replies the kernel holds before it lets new ones through unlearned
/// (the DNS queue is always fail-open: skipping learning only denies).
pub const DNS_QUEUE_MAX_LEN: u32 = 4096;
/// How often the mirror forgets timed-out entries.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// The learner and the kernel set names of its selectors.
struct Learned {
    learner: FqdnLearner,
    /// `[v4, v6]` set names, by selector index.
    sets: Vec<[String; 2]>,
}

impl Learned {
    fn new(learner: FqdnLearner) -> Learned {
        let sets = learner
            .selectors()
            .iter()
            .map(|p| [fqdn_set(p, Family::V4), fqdn_set(p, Family::V6)])
            .collect();
        Learned { learner, sets }
    }

    fn set(&self, selector: usize, address: &IpAddr) -> Option<&str> {
        let names = self.sets.get(selector)?;
        Some(match address {
            IpAddr::V4(_) => &names[0],
            IpAddr::V6(_) => &names[1],
        })
    }
}

/// The in-memory mirror of the FQDN sets, shared by every worker: the DNS
/// worker writes it, connection workers read it (through [`lookup`]) when
/// a rule with an `fqdn` peer is evaluated. A `RwLock`: readers take it
/// only for FQDN peers and hold it for one hash lookup; the writer parses
/// outside it and holds it only to learn the resolved addresses of one
/// reply (about a microsecond).
///
/// [`lookup`]: FqdnMirror::lookup
pub struct FqdnMirror {
    learned: RwLock<Learned>,
    /// Origin of the monotonic milliseconds the learner works in.
    origin: Instant,
}

impl FqdnMirror {
    /// A mirror for `selectors`, restored from what the kernel sets hold
    /// (entries of unknown sets are ignored). Returns it and how many
    /// entries were restored.
    pub fn restore(
        selectors: Vec<FqdnPattern>,
        config: LearnerConfig,
        kernel_sets: &[(String, Vec<(IpAddr, u32)>)],
    ) -> (FqdnMirror, usize) {
        let mut learned = Learned::new(FqdnLearner::new(selectors, config));
        let entries: Vec<RestoredEntry> = learned
            .sets
            .iter()
            .enumerate()
            .flat_map(|(selector, names)| {
                kernel_sets
                    .iter()
                    .filter(move |(name, _)| names.contains(name))
                    .flat_map(move |(_, entries)| {
                        entries
                            .iter()
                            .map(move |&(address, remaining_secs)| RestoredEntry {
                                selector,
                                address,
                                remaining_secs,
                            })
                    })
            })
            .collect();
        // The mirror's clock starts now, at 0 ms.
        let restored = learned.learner.restore(&entries, 0);
        let mirror = FqdnMirror {
            learned: RwLock::new(learned),
            origin: Instant::now(),
        };
        (mirror, restored)
    }

    /// Milliseconds since the mirror was made, on the monotonic clock.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Switches to a new selector list, keeping what kept selectors have
    /// learned. Nothing changes when the list is the same.
    pub fn reselect(&self, selectors: &[FqdnPattern]) {
        let now = self.now_ms();
        let mut learned = self.write();
        if learned.learner.selectors() == selectors {
            return;
        }
        let next = learned.learner.reselect(selectors.to_vec(), now);
        *learned = Learned::new(next);
    }

    /// The learner's counters.
    pub fn counters(&self) -> LearnerCounters {
        self.read().learner.counters()
    }

    /// A lookup for the classifier, reading the mirror at call time.
    pub fn lookup(&self) -> MirrorLookup<'_> {
        MirrorLookup(self)
    }

    fn read(&self) -> RwLockReadGuard<'_, Learned> {
        // A worker that panicked while writing leaves consistent data
        // behind (each learning step completes or is not visible).
        self.learned.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Learned> {
        self.learned.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`FqdnLookup`] over the shared mirror at the current time.
pub struct MirrorLookup<'a>(&'a FqdnMirror);

impl FqdnLookup for MirrorLookup<'_> {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool {
        let now = self.0.now_ms();
        self.0.read().learner.resolves_to(pattern, ip, now)
    }
}

counters! {
    /// What the DNS reply worker saw and did.
    pub struct DnsStats: one per agent {
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
        ipset_errors: Counter "dns_ipset_errors" = "Batches of FQDN set writes the kernel refused (the mirror still learned)",
    }
}

impl DnsStats {
    fn count(&self, event: SnoopEvent) {
        let counter = match event {
            SnoopEvent::Malformed => &self.failed,
            SnoopEvent::Untrusted => &self.untrusted,
            SnoopEvent::TcpUntracked => &self.tcp_untracked,
            SnoopEvent::TcpGap => &self.tcp_gaps,
            SnoopEvent::Oversized => &self.oversized,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn add_learner_delta(&self, before: LearnerCounters, after: LearnerCounters) {
        let add = |counter: &AtomicU64, b: u64, a: u64| {
            counter.fetch_add(a.saturating_sub(b), Ordering::Relaxed);
        };
        add(&self.learned, before.learned, after.learned);
        add(&self.refreshed, before.refreshed, after.refreshed);
        add(&self.evicted, before.evicted, after.evicted);
        add(&self.expired, before.expired, after.expired);
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
    pub stats: Arc<DnsStats>,
}

impl DnsWorker {
    /// Binds the queue and opens the ipset socket (errors are returned
    /// here), then starts the thread.
    pub fn spawn(
        config: DnsWorkerConfig,
        mirror: Arc<FqdnMirror>,
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
        let stats = Arc::new(DnsStats::default());
        let snooper = DnsSnooper::new(
            config.trusted_servers,
            DEFAULT_MAX_TCP_FLOWS,
            DEFAULT_MAX_TCP_MESSAGE,
        );
        let handler = DnsLoop {
            snooper,
            ipset,
            mirror,
            stats: Arc::clone(&stats),
            last_expire: Instant::now(),
        };
        runtime::spawn(socket, handler, Arc::clone(&stats) as _, &metrics)?;
        Ok(DnsWorker { queue, stats })
    }
}

struct DnsLoop {
    snooper: DnsSnooper,
    ipset: IpsetSocket,
    mirror: Arc<FqdnMirror>,
    stats: Arc<DnsStats>,
    last_expire: Instant,
}

impl Handler for DnsLoop {
    fn packet(&mut self, packet: Queued<'_>, _now: Instant, out: &mut Verdicts) {
        let release = self.handle(packet.payload);
        out.give(
            packet.id,
            match release {
                Release::Accept => Action::Accept,
                Release::Drop => Action::Drop,
            },
        );
    }
}

impl DnsLoop {
    /// Learns from one packet and writes the kernel sets; returns what to
    /// do with the packet.
    fn handle(&mut self, packet: &[u8]) -> Release {
        let snooped = self.snooper.snoop(packet);
        for event in &snooped.events {
            self.stats.count(*event);
        }
        if snooped.messages.is_empty() {
            return snooped.release;
        }
        let mut resolutions = Vec::new();
        for message in &snooped.messages {
            match dns::parse_reply(message) {
                Ok(reply) => {
                    self.stats.parsed.fetch_add(1, Ordering::Relaxed);
                    resolutions.extend(reply.resolved());
                }
                Err(_) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if resolutions.is_empty() {
            return snooped.release;
        }
        let expire = self.last_expire.elapsed() >= EXPIRE_EVERY;
        if expire {
            self.last_expire = Instant::now();
        }
        // (set, address, timeout or None for a removal), owned so the lock
        // is released before the system call.
        let mut writes: Vec<(String, IpAddr, Option<u32>)> = Vec::new();
        {
            let now = self.mirror.now_ms();
            let mut learned = self.mirror.write();
            let before = learned.learner.counters();
            if expire {
                learned.learner.expire(now);
            }
            for change in learned.learner.learn(&resolutions, now) {
                let (selector, address, timeout) = match change {
                    IpsetChange::Add {
                        selector,
                        address,
                        timeout_secs,
                    } => (selector, address, Some(timeout_secs)),
                    IpsetChange::Remove { selector, address } => (selector, address, None),
                };
                if let Some(set) = learned.set(selector, &address) {
                    writes.push((set.to_string(), address, timeout));
                }
            }
            let after = learned.learner.counters();
            self.stats.add_learner_delta(before, after);
            self.stats
                .addresses
                .store(learned.learner.installed() as u64, Ordering::Relaxed);
        }
        let ops: Vec<EntryOp<'_>> = writes
            .iter()
            .map(|(set, address, timeout)| match timeout {
                Some(timeout_secs) => EntryOp::Add {
                    set,
                    address: *address,
                    timeout_secs: *timeout_secs,
                },
                None => EntryOp::Del {
                    set,
                    address: *address,
                },
            })
            .collect();
        if self.ipset.apply(&ops).is_err() {
            self.stats.ipset_errors.fetch_add(1, Ordering::Relaxed);
        }
        snooped.release
    }
}
