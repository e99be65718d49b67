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

use crate::audit::Subject;
use crate::config::{FailMode, L7Config, MarkLayout};
use crate::http::DEFAULT_MAX_HEAD;
use crate::packet::flow::{LocalSide, Verdict};
use crate::telemetry::counters::counters;
use crate::workers::connection::{open_queue, wall_clock};
use crate::workers::dns::FqdnMirror;
use crate::workers::{Observers, QueueError};

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
/// Consecutive receive errors after which the worker gives up.
const MAX_CONSECUTIVE_ERRORS: u32 = 1000;

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
        segments: Counter "l7_segments" = "Segments read from the L7 queue",
        requests_allowed: Counter "l7_requests" { result = "allowed" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        requests_denied: Counter "l7_requests" { result = "denied" } = "HTTP requests decided by L7 rules, by result (allowed or denied)",
        resets: Counter "l7_resets" = "Connections closed without a 403 (not HTTP, malformed, state lost)",
        held: Counter "l7_held" = "Segments dropped after a gap in the stream or repeating deferred bytes",
        deferred: Counter "l7_deferred" = "Segments whose verdict waited for the rest of a request head",
        deferred_evicted: Counter "l7_deferred_evicted" = "Connections forgotten because too many segments were held overall",
        malformed: Counter "l7_malformed" = "Packets on the L7 queue that were not readable TCP segments (dropped)",
        inject_errors: Counter "l7_inject_errors" = "Packets closing a denied connection that could not be sent",
        overflows: Counter "l7_overflows" = "Receive-buffer overflows of the L7 queue socket",
        verdict_errors: Counter "l7_verdict_errors" = "Verdicts the kernel did not accept",
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
        fqdn: Arc<FqdnMirror>,
        observers: Observers,
    ) -> Result<L7Worker, QueueError>
    where
        P: L7Policy + Send + Sync + 'static,
    {
        let queue = config.l7.queue;
        let setup = |step| QueueError::setup(queue, step);
        let socket = open_queue(
            queue,
            COPY_RANGE,
            QUEUE_MAX_LEN,
            config.fail_mode == FailMode::Open,
        )?;
        let injector = Injector::open().map_err(setup("raw sockets"))?;
        let stats = Arc::new(L7Stats::default());
        observers
            .metrics
            .counters()
            .register(queue, "L7 queue", vec![Arc::clone(&stats) as _]);
        let thread_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name(format!("nfqueue-l7-{queue}"))
            .spawn(move || {
                let shared = Shared {
                    policy: &policy,
                    fqdn: &fqdn,
                    stats: &thread_stats,
                    observers: &observers,
                };
                run(socket, injector, config, shared)
            })
            .map_err(setup("spawn"))?;
        Ok(L7Worker { queue, stats })
    }
}

/// What the worker thread reads and reports to.
struct Shared<'a, P> {
    policy: &'a ArcSwap<P>,
    fqdn: &'a FqdnMirror,
    stats: &'a L7Stats,
    observers: &'a Observers,
}

fn run<P: L7Policy>(
    mut socket: nfq::Queue,
    injector: Injector,
    config: L7WorkerConfig,
    shared: Shared<'_, P>,
) {
    let Shared {
        policy,
        fqdn,
        stats,
        observers,
    } = shared;
    let marks = config.marks;
    let max_flows = NonZeroUsize::new(config.l7.max_flows).unwrap_or(NonZeroUsize::MIN);
    let mut inspector = Inspector::new(
        max_flows,
        config.l7.idle_timeout,
        DEFAULT_MAX_HEAD,
        config.l7.deny_response,
    );
    // Segments of incomplete heads, per connection, in arrival order, with
    // when the first arrived.
    let mut deferred: HashMap<FlowKey, (Instant, Vec<nfq::Message>)> = HashMap::new();
    let mut deferred_total = 0usize;
    let mut consecutive_errors = 0;
    loop {
        let mut message = match socket.recv() {
            Ok(message) => message,
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                let lost = stats.overflows.fetch_add(1, Ordering::Relaxed) + 1;
                if lost.is_power_of_two() {
                    tracing::warn!(
                        queue = config.l7.queue,
                        overflows = lost,
                        "L7 queue overflow"
                    );
                }
                continue;
            }
            Err(error) => {
                consecutive_errors += 1;
                if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    tracing::error!(queue = config.l7.queue, %error, "L7 queue worker stopped");
                    return;
                }
                continue;
            }
        };
        consecutive_errors = 0;
        stats.segments.fetch_add(1, Ordering::Relaxed);
        let mark = message.get_nfmark();
        let packet_length = u32::try_from(message.get_payload().len()).unwrap_or(u32::MAX);
        // Verdicts to give, in order, beginning with released segments.
        let mut verdicts: Vec<(nfq::Message, nfq::Verdict)> = Vec::new();
        match parse_segment(message.get_payload()) {
            Err(_) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                verdicts.push((message, nfq::Verdict::Drop));
            }
            Ok(segment) if segment.syn_ack => {
                let key = segment.key.reversed();
                let policy = policy.load();
                // The SYN-ACK runs server→client: the Node's side of it is
                // the opposite side of the client→server flow.
                let local = LocalSide::of_hook(message.get_hook());
                let forgotten = inspector.handshake(
                    key,
                    segment.ack,
                    local.map(LocalSide::opposite),
                    (&**policy, &fqdn.lookup()),
                    Instant::now(),
                );
                if let Some(old) = forgotten {
                    drop_all(&mut verdicts, &mut deferred_total, deferred.remove(&old));
                }
                message.set_nfmark(marks.apply(mark, marks.l7_active()));
                verdicts.push((message, nfq::Verdict::Repeat));
            }
            Ok(segment) => {
                let key = segment.key;
                let reset = segment.rst;
                let inspection = inspector.inspect(&segment, Instant::now());
                for record in &inspection.requests {
                    record_request(stats, observers, &key, record, packet_length);
                }
                match inspection.action {
                    L7Action::Pass => verdicts.push((message, nfq::Verdict::Accept)),
                    L7Action::Defer => {
                        stats.deferred.fetch_add(1, Ordering::Relaxed);
                        let now = Instant::now();
                        deferred
                            .entry(key)
                            .or_insert_with(|| (now, Vec::new()))
                            .1
                            .push(message);
                        deferred_total += 1;
                        if deferred_total > MAX_DEFERRED_TOTAL {
                            let oldest = deferred
                                .iter()
                                .min_by_key(|(_, (since, _))| *since)
                                .map(|(k, _)| *k);
                            if let Some(oldest) = oldest {
                                stats.deferred_evicted.fetch_add(1, Ordering::Relaxed);
                                inspector.forget(&oldest);
                                let held = deferred.remove(&oldest);
                                drop_all(&mut verdicts, &mut deferred_total, held);
                            }
                        }
                    }
                    L7Action::Release => {
                        let held = deferred
                            .remove(&key)
                            .map(|(_, held)| held)
                            .unwrap_or_default();
                        deferred_total -= held.len();
                        verdicts.extend(held.into_iter().map(|m| (m, nfq::Verdict::Accept)));
                        verdicts.push((message, nfq::Verdict::Accept));
                    }
                    L7Action::Hold => {
                        stats.held.fetch_add(1, Ordering::Relaxed);
                        verdicts.push((message, nfq::Verdict::Drop));
                    }
                    L7Action::Deny(denial) => {
                        if !matches!(denial.reason, crate::l7::DenyReason::Request { .. }) {
                            stats.resets.fetch_add(1, Ordering::Relaxed);
                        }
                        drop_all(&mut verdicts, &mut deferred_total, deferred.remove(&key));
                        for injection in deny_packets(&segment, &denial) {
                            if injector.send(&injection).is_err() {
                                stats.inject_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        message.set_nfmark(marks.apply(mark, marks.l7_denied()));
                        verdicts.push((message, nfq::Verdict::Repeat));
                    }
                }
                if reset {
                    // The inspector forgot the connection: nothing held
                    // for it will ever be released.
                    drop_all(&mut verdicts, &mut deferred_total, deferred.remove(&key));
                }
            }
        }
        inspector.sweep(Instant::now(), |key| {
            drop_all(&mut verdicts, &mut deferred_total, deferred.remove(&key));
        });
        let flows = inspector.len() as u64;
        stats.flows.store(flows, Ordering::Relaxed);
        for (mut message, verdict) in verdicts {
            message.set_verdict(verdict);
            if socket.verdict(message).is_err() {
                stats.verdict_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Drops a connection's held segments.
fn drop_all(
    verdicts: &mut Vec<(nfq::Message, nfq::Verdict)>,
    total: &mut usize,
    held: Option<(Instant, Vec<nfq::Message>)>,
) {
    if let Some((_, held)) = held {
        *total -= held.len();
        verdicts.extend(held.into_iter().map(|m| (m, nfq::Verdict::Drop)));
    }
}

/// Where every L7 request decision passes: counted, and written to the
/// audit log when the deciding rule has `enableLogging` (a denied request
/// as `Reject`: the client is answered).
fn record_request(
    stats: &L7Stats,
    observers: &Observers,
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
    let (Some(audit), Some((rule, Some(endpoint)))) = (&observers.audit, &record.rule) else {
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
