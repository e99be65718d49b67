//! The socket loop of one NFQUEUE worker: an OS thread bound to one queue
//! with the `nfq` crate (blocking; the crate exposes no file descriptor for
//! an event loop). It reads the current policy lock-free from an
//! [`ArcSwap`] for every packet, and the FQDN mirror (a read lock, only
//! when a rule with an `fqdn` peer is evaluated); it counts outcomes in its
//! [`QueueStats`] and [`WorkerMetrics`], and hands the step's audit records
//! to the audit writer without waiting (a full channel skips the record).
//! It never logs per packet.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;

use crate::audit::{AuditSink, Timestamp};
use crate::config::{FailMode, MarkLayout};
use crate::packet::flow::Verdict;
use crate::telemetry::counters::counters;
use crate::telemetry::{Metrics, WorkerMetrics};

use super::dns::FqdnMirror;
use crate::decide::{step, Outcome, Policy, StepConfig};
use crate::packet::{Action, LocalSide, Queued};

/// Bytes of each packet copied to userspace: IPv4/IPv6 header with
/// extension headers and the transport header.
pub const COPY_RANGE: u16 = 128;
/// Packets the kernel holds per queue before it drops (fail-closed) or
/// accepts (fail-open) new ones.
pub const QUEUE_MAX_LEN: u32 = 4096;
/// Consecutive receive errors after which a worker gives up.
const MAX_CONSECUTIVE_ERRORS: u32 = 1000;

/// Why a queue could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {queue}: {step}: {source}")]
    Setup {
        queue: u16,
        step: &'static str,
        source: std::io::Error,
    },
}

impl QueueError {
    /// Maps an I/O error of one setup step of `queue`.
    pub fn setup(queue: u16, step: &'static str) -> impl Fn(std::io::Error) -> QueueError {
        move |source| QueueError::Setup {
            queue,
            step,
            source,
        }
    }
}

/// Binds NFQUEUE `queue` on a new netlink socket: copies up to `copy_range`
/// bytes of each packet, lets up to `max_len` packets wait, lets the kernel
/// accept packets itself when the queue is full or unbound if `fail_open`,
/// and reports socket overflows (ENOBUFS) instead of hiding them.
pub fn open_queue(
    queue: u16,
    copy_range: u16,
    max_len: u32,
    fail_open: bool,
) -> Result<nfq::Queue, QueueError> {
    let setup = |step| QueueError::setup(queue, step);
    let mut socket = nfq::Queue::open().map_err(setup("open"))?;
    socket.bind(queue).map_err(setup("bind"))?;
    socket
        .set_copy_range(queue, copy_range)
        .map_err(setup("copy range"))?;
    socket
        .set_queue_max_len(queue, max_len)
        .map_err(setup("queue length"))?;
    socket
        .set_fail_open(queue, fail_open)
        .map_err(setup("fail-open flag"))?;
    socket
        .set_recv_enobufs(true)
        .map_err(setup("overflow reporting"))?;
    Ok(socket)
}

/// How a worker handles its queue.
#[derive(Clone, Copy, Debug)]
pub struct WorkerConfig {
    pub queue: u16,
    pub marks: MarkLayout,
    pub fail_mode: FailMode,
}

counters! {
    /// What one connection queue's worker did.
    pub struct QueueStats: one per queue {
        allowed: Counter "queue_allowed" = "New connections allowed",
        dropped: Counter "queue_dropped" = "New connections dropped",
        rejected: Counter "queue_rejected" = "New connections rejected",
        malformed: Counter "queue_malformed" = "Queued packets that could not be parsed (fail mode applied)",
        bypassed: Counter "queue_bypassed" = "Queued packets accepted without a decision (malformed, fail-open)",
        packets: Counter "queue_packets" = "Packets received from the queue by its worker",
        overflows: Counter "queue_overflows" = "Receive-buffer overflows of the worker socket (ENOBUFS): the kernel lost queued packets",
        verdict_errors: Counter "queue_verdict_errors" = "Verdicts the kernel did not accept",
    }
}

impl QueueStats {
    fn record(&self, outcome: &Outcome, action: Action) {
        let counter = match outcome {
            Outcome::Decided {
                verdict: Verdict::Allow,
                ..
            } => &self.allowed,
            Outcome::Decided {
                verdict: Verdict::Drop,
                ..
            } => &self.dropped,
            Outcome::Decided {
                verdict: Verdict::Reject,
                ..
            } => &self.rejected,
            Outcome::Malformed(_) => &self.malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if action == Action::Accept {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Where a worker reports what it decided: the metrics, and the audit log
/// when one is configured.
#[derive(Clone)]
pub struct Observers {
    pub metrics: Arc<Metrics>,
    pub audit: Option<AuditSink>,
}

/// A running worker thread (detached: it runs until the process exits,
/// and the kernel drops what is still queued when the socket closes).
pub struct Worker {
    pub queue: u16,
    pub stats: Arc<QueueStats>,
}

impl Worker {
    /// Binds the queue (errors are returned here, before any thread runs)
    /// and starts the thread. The thread runs until the process exits.
    pub fn spawn<P>(
        config: WorkerConfig,
        policy: Arc<ArcSwap<P>>,
        fqdn: Arc<FqdnMirror>,
        observers: Observers,
    ) -> Result<Worker, QueueError>
    where
        P: Policy + Send + Sync + 'static,
    {
        let queue = config.queue;
        let setup = |step| QueueError::setup(queue, step);
        let socket = open_queue(
            queue,
            COPY_RANGE,
            QUEUE_MAX_LEN,
            config.fail_mode == FailMode::Open,
        )?;
        let stats = Arc::new(QueueStats::default());
        observers
            .metrics
            .counters()
            .register(queue, "queue", vec![Arc::clone(&stats) as _]);
        let thread_stats = Arc::clone(&stats);
        std::thread::Builder::new()
            .name(format!("nfqueue-{queue}"))
            .spawn(move || run(socket, config, &policy, &fqdn, &thread_stats, &observers))
            .map_err(setup("spawn"))?;
        Ok(Worker { queue, stats })
    }
}

/// The wall-clock time audit records are stamped with.
pub(crate) fn wall_clock() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    Timestamp::from_unix_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

fn run<P: Policy>(
    mut socket: nfq::Queue,
    config: WorkerConfig,
    policy: &ArcSwap<P>,
    fqdn: &FqdnMirror,
    stats: &QueueStats,
    observers: &Observers,
) {
    let mut consecutive_errors = 0;
    let mut metrics = WorkerMetrics::new(Arc::clone(&observers.metrics), config.queue);
    loop {
        let mut message = match socket.recv() {
            Ok(message) => message,
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                let lost = stats.overflows.fetch_add(1, Ordering::Relaxed) + 1;
                if lost.is_power_of_two() {
                    tracing::warn!(queue = config.queue, overflows = lost, "queue overflow");
                }
                continue;
            }
            Err(error) => {
                consecutive_errors += 1;
                if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    tracing::error!(queue = config.queue, %error, "queue worker stopped");
                    return;
                }
                continue;
            }
        };
        consecutive_errors = 0;
        stats.packets.fetch_add(1, Ordering::Relaxed);
        let received = Instant::now();
        let outcome = step(
            &Queued {
                id: message.get_packet_id(),
                payload: message.get_payload(),
                mark: message.get_nfmark(),
                local: LocalSide::of_hook(message.get_hook()),
            },
            &**policy.load(),
            &fqdn.lookup(),
            &StepConfig {
                marks: config.marks,
                fail_mode: config.fail_mode,
            },
            wall_clock(),
        );
        match outcome.action {
            Action::Accept => message.set_verdict(nfq::Verdict::Accept),
            Action::Drop => message.set_verdict(nfq::Verdict::Drop),
            Action::Repeat { mark } => {
                message.set_nfmark(mark);
                message.set_verdict(nfq::Verdict::Repeat);
            }
        }
        if socket.verdict(message).is_err() {
            stats.verdict_errors.fetch_add(1, Ordering::Relaxed);
        }
        metrics.latency(received.elapsed());
        stats.record(&outcome.outcome, outcome.action);
        if let Outcome::Decided { verdict, by } = &outcome.outcome {
            metrics.decided(*verdict, by);
        }
        if let Some(audit) = &observers.audit {
            for record in outcome.audit {
                audit.offer(record);
            }
        }
    }
}
