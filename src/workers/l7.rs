//! The L7 queue's socket loop: one OS thread bound to the dedicated L7
//! NFQUEUE, holding the [`Inspector`] (so flow state needs no lock), and
//! two raw sockets (IPv4, IPv6; `IPPROTO_RAW`, header included) that send
//! the packets closing a denied connection. Injection happens before the
//! verdict, while the connection's mark still lets them pass. Counts,
//! reports to the metrics and hands audit records of logged rules to the
//! audit writer; never logs per packet.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

use crate::audit::{AuditSink, Subject};
use crate::config::{FailMode, L7Config, MarkLayout};
use crate::fqdn::FqdnTable;
use crate::http::DEFAULT_MAX_HEAD;
use crate::packet::flow::{LocalSide, Verdict};
use crate::packet::{Action, PacketId, Queued};
use crate::telemetry::counters::counters;
use crate::workers::runtime::{self, wall_clock, Handler, Queue, QueueError, QueueSpec, Verdicts};
use crate::workers::Observers;

use crate::l7::inspect::{Inspector, L7Action, L7Policy, RequestRecord};
use crate::l7::response::{deny_packets, Injection};
use crate::packet::segment::{parse_segment, FlowKey};

/// Whole packets: a request head must be read from the segment itself.
const COPY_RANGE: u16 = 0xffff;
/// Packets the kernel holds for the L7 queue, including deferred ones.
const QUEUE_MAX_LEN: u32 = 16_384;
/// Most segments held back at once over all connections: well below
/// [`QUEUE_MAX_LEN`], so clients that send part of a head and vanish
/// cannot fill the queue. Past it, the connection deferring longest is
/// forgotten (its held segments dropped; its next bytes reset it).
const MAX_DEFERRED_TOTAL: usize = 4096;

/// How the L7 worker runs.
#[derive(Clone, Copy, Debug)]
pub struct L7WorkerConfig {
    pub marks: MarkLayout,
    pub fail_mode: FailMode,
    pub l7: L7Config,
}

counters! {
    /// What the L7 queue's worker saw and did.
    pub struct L7Stats: one per agent {
        requests_allowed: Counter "l7_requests" { result = "allowed" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        requests_denied: Counter "l7_requests" { result = "denied" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        resets: Counter "l7_resets" = "Connections closed without a 403 (not HTTP, malformed, state lost)",
        held: Counter "l7_held" = "Segments dropped after a gap in the stream or repeating deferred bytes",
        deferred: Counter "l7_deferred" = "Segments whose verdict waited for the rest of a request head",
        deferred_evicted: Counter "l7_deferred_evicted" = "Connections forgotten because too many segments were held overall",
        malformed: Counter "l7_malformed" = "Packets on the L7 queue that were not readable TCP segments (dropped)",
        inject_errors: Counter "l7_inject_errors" = "Packets closing a denied connection that could not be sent",
        flows: Gauge "l7_flows_active" = "Connections under L7 inspection",
    }
}

/// The running L7 worker (detached, like the other queue workers).
pub struct L7Worker {
    pub queue: u16,
    pub stats: Arc<L7Stats>,
}

/// Raw sockets for injected packets.
struct Injector {
    v4: OwnedFd,
    v6: OwnedFd,
}

impl Injector {
    fn open() -> std::io::Result<Injector> {
        let open = |family| {
            // SAFETY: plain socket(2) call; the result is checked.
            let fd = unsafe { libc::socket(family, libc::SOCK_RAW, libc::IPPROTO_RAW) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        Ok(Injector {
            v4: open(libc::AF_INET)?,
            v6: open(libc::AF_INET6)?,
        })
    }

    fn send(&self, injection: &Injection) -> std::io::Result<()> {
        let packet = &injection.packet;
        // SAFETY: the sockaddr structs are fully initialised (zeroed, then
        // family and address set) and live across the call; the buffer is
        // valid for its length.
        let sent = unsafe {
            match injection.destination {
                IpAddr::V4(addr) => {
                    let mut sa: libc::sockaddr_in = std::mem::zeroed();
                    sa.sin_family = libc::AF_INET as libc::sa_family_t;
                    sa.sin_addr.s_addr = u32::from_ne_bytes(addr.octets());
                    libc::sendto(
                        self.v4.as_raw_fd(),
                        packet.as_ptr().cast(),
                        packet.len(),
                        0,
                        std::ptr::addr_of!(sa).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    )
                }
                IpAddr::V6(addr) => {
                    let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                    sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                    sa.sin6_addr.s6_addr = addr.octets();
                    libc::sendto(
                        self.v6.as_raw_fd(),
                        packet.as_ptr().cast(),
                        packet.len(),
                        0,
                        std::ptr::addr_of!(sa).cast(),
                        std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                    )
                }
            }
        };
        if sent < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl L7Worker {
    /// Binds the L7 queue and opens the raw sockets in the calling
    /// thread's network namespace (errors are returned here), then starts
    /// the thread.
    pub fn spawn<P>(
        config: L7WorkerConfig,
        policy: Arc<ArcSwap<P>>,
        fqdn: Arc<FqdnTable>,
        observers: Observers,
    ) -> Result<L7Worker, QueueError>
    where
        P: L7Policy + Send + Sync + 'static,
    {
        let queue = config.l7.queue;
        let socket = Queue::open(QueueSpec {
            queue,
            name: "L7 queue",
            copy_range: COPY_RANGE,
            max_len: QUEUE_MAX_LEN,
            fail_open: config.fail_mode == FailMode::Open,
        })?;
        let injector = Injector::open().map_err(QueueError::setup(queue, "raw sockets"))?;
        let stats = Arc::new(L7Stats::default());
        let max_flows = NonZeroUsize::new(config.l7.max_flows).unwrap_or(NonZeroUsize::MIN);
        let handler = L7Handler {
            inspector: Inspector::new(
                max_flows,
                config.l7.idle_timeout,
                DEFAULT_MAX_HEAD,
                config.l7.deny_response,
            ),
            deferred: HashMap::new(),
            deferred_total: 0,
            injector,
            marks: config.marks,
            policy,
            fqdn,
            stats: Arc::clone(&stats),
            audit: observers.audit,
        };
        runtime::spawn(socket, handler, Arc::clone(&stats) as _, &observers.metrics)?;
        Ok(L7Worker { queue, stats })
    }
}

/// The handler of the L7 queue.
struct L7Handler<P> {
    inspector: Inspector,
    /// Ids of the segments of incomplete heads, per connection, in arrival
    /// order, with when the first arrived.
    deferred: HashMap<FlowKey, (Instant, Vec<PacketId>)>,
    deferred_total: usize,
    injector: Injector,
    marks: MarkLayout,
    policy: Arc<ArcSwap<P>>,
    fqdn: Arc<FqdnTable>,
    stats: Arc<L7Stats>,
    audit: Option<AuditSink>,
}

impl<P: L7Policy> Handler for L7Handler<P> {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let (id, mark, marks) = (packet.id, packet.mark, self.marks);
        let packet_length = u32::try_from(packet.payload.len()).unwrap_or(u32::MAX);
        match parse_segment(packet.payload) {
            Err(_) => {
                self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                out.give(id, Action::Drop);
            }
            Ok(segment) if segment.syn_ack => {
                let key = segment.key.reversed();
                let policy = self.policy.load();
                // The SYN-ACK runs server→client: the Node's side of it is
                // the opposite side of the client→server flow.
                let forgotten = self.inspector.handshake(
                    key,
                    segment.ack,
                    packet.local.map(LocalSide::opposite),
                    (&**policy, &self.fqdn.lookup()),
                    now,
                );
                if let Some(old) = forgotten {
                    self.drop_held(old, out);
                }
                out.give(
                    id,
                    Action::Repeat {
                        mark: marks.apply(mark, marks.l7_active()),
                    },
                );
            }
            Ok(segment) => {
                let key = segment.key;
                let inspection = self.inspector.inspect(&segment, now);
                for record in &inspection.requests {
                    record_request(&self.stats, &self.audit, &key, record, packet_length);
                }
                match inspection.action {
                    L7Action::Pass => out.give(id, Action::Accept),
                    L7Action::Defer => {
                        self.stats.deferred.fetch_add(1, Ordering::Relaxed);
                        self.deferred
                            .entry(key)
                            .or_insert_with(|| (now, Vec::new()))
                            .1
                            .push(id);
                        self.deferred_total += 1;
                        if self.deferred_total > MAX_DEFERRED_TOTAL {
                            let oldest = self
                                .deferred
                                .iter()
                                .min_by_key(|(_, (since, _))| *since)
                                .map(|(k, _)| *k);
                            if let Some(oldest) = oldest {
                                self.stats.deferred_evicted.fetch_add(1, Ordering::Relaxed);
                                self.inspector.forget(&oldest);
                                self.drop_held(oldest, out);
                            }
                        }
                    }
                    L7Action::Release => {
                        let held = self
                            .deferred
                            .remove(&key)
                            .map(|(_, held)| held)
                            .unwrap_or_default();
                        self.deferred_total -= held.len();
                        for held in held {
                            out.give(held, Action::Accept);
                        }
                        out.give(id, Action::Accept);
                    }
                    L7Action::Hold => {
                        self.stats.held.fetch_add(1, Ordering::Relaxed);
                        out.give(id, Action::Drop);
                    }
                    L7Action::Deny(denial) => {
                        if !matches!(denial.reason, crate::l7::DenyReason::Request { .. }) {
                            self.stats.resets.fetch_add(1, Ordering::Relaxed);
                        }
                        self.drop_held(key, out);
                        for injection in deny_packets(&segment, &denial) {
                            if self.injector.send(&injection).is_err() {
                                self.stats.inject_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        out.give(
                            id,
                            Action::Repeat {
                                mark: marks.apply(mark, marks.l7_denied()),
                            },
                        );
                    }
                }
                if segment.rst {
                    // The inspector forgot the connection: nothing held
                    // for it will ever be released.
                    self.drop_held(key, out);
                }
            }
        }
    }

    fn tick(&mut self, now: Instant, out: &mut Verdicts) {
        let mut forgotten = Vec::new();
        self.inspector.sweep(now, |key| forgotten.push(key));
        for key in forgotten {
            self.drop_held(key, out);
        }
        self.stats
            .flows
            .store(self.inspector.len() as u64, Ordering::Relaxed);
    }
}

impl<P> L7Handler<P> {
    /// Drops a connection's held segments.
    fn drop_held(&mut self, key: FlowKey, out: &mut Verdicts) {
        if let Some((_, held)) = self.deferred.remove(&key) {
            self.deferred_total -= held.len();
            for id in held {
                out.give(id, Action::Drop);
            }
        }
    }
}

/// Where every L7 request decision passes: counted, and written to the
/// audit log when the deciding rule has `enableLogging` (a denied request
/// as `Reject`: the client is answered).
fn record_request(
    stats: &L7Stats,
    audit: &Option<AuditSink>,
    key: &FlowKey,
    record: &RequestRecord,
    packet_length: u32,
) {
    let counter = if record.allowed {
        &stats.requests_allowed
    } else {
        &stats.requests_denied
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let (Some(audit), Some((rule, Some(endpoint)))) = (audit, &record.rule) else {
        return;
    };
    let verdict = if record.allowed {
        Verdict::Allow
    } else {
        Verdict::Reject
    };
    if let Some(subject) = Subject::of_rule(rule, endpoint, verdict) {
        audit.offer(subject.record(wall_clock(), key.flow(), packet_length));
    }
}
