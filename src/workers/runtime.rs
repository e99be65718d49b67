//! The one NFQUEUE loop: binds a queue, owns each message until its verdict
//! has reached the kernel, asks a [`Handler`] by packet id, and counts
//! packets, overflows, unreadable buffers, verdict errors and withheld
//! packets once for every worker. It takes every packet one wake-up
//! brings, hands the kernel each round of verdicts at once (oldest packet
//! first, so the socket can batch them; verdicts whose send failed go
//! again in the next round, so that a later batch never gives their
//! packets another verdict, and count as withheld until then), and ticks
//! the handler at least every [`TICK`], packets or not. It also supervises
//! its worker: the loop beats the queue's [`Heartbeat`] with every batch,
//! and a worker that panics (or whose receives keep failing) is restarted
//! in-process after a back-off, on a new socket with a new handler, while
//! `/livez` says why it is down. No handler sees a netlink message; nothing
//! here decides a verdict or logs per packet.
//!
//! Why restart in-process rather than exit: a panic is a bug met on one
//! packet; unwinding closes the worker's socket, so the kernel drops what
//! the worker held (and what waited in its queue: an instance that goes
//! away drops its packets even when fail-open), and until the new socket
//! is bound the queue has no reader (fail-closed drops new connections,
//! fail-open lets them pass). Re-binding takes [`restart_delay`] (1 s the
//! first time), where a process restart goes through the kubelet's
//! CrashLoopBackOff (10 s, 20 s, … up to 5 min) and stops every other
//! queue too. A worker that is stuck (alive but not draining) cannot be
//! replaced in-process, since its socket keeps the queue bound: the
//! [`super::watchdog`] makes the process exit instead. (Restarting needs
//! unwinding, Rust's default: a build with `panic = "abort"` would end the
//! process at a worker's panic, leaving the restart to the service
//! manager.)
#![allow(clippy::disallowed_methods)] // the runtime stamps each received packet with the clock.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::histogram::Histogram;

use crate::audit::Timestamp;
use crate::packet::{Action, PacketId, Queued};

use crate::counters;
use crate::counters::CounterSet;
use crate::telemetry::{Heartbeat, Metrics};

/// Consecutive receive errors after which a worker is restarted.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 1000;
/// First wait before a worker that stopped is restarted; it doubles with
/// every restart in a row, up to [`MAX_RESTART_DELAY`].
pub const RESTART_DELAY: Duration = Duration::from_secs(1);
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A worker that ran this long before it stopped starts over at
/// [`RESTART_DELAY`].
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Longest wait for packets: a handler's [`Handler::tick`] runs at least
/// this often while its queue is idle.
pub const TICK: Duration = Duration::from_millis(100);

/// Why a queue could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {queue}: {step}: {source}")]
    Setup {
        queue: u16,
        step: &'static str,
        source: std::io::Error,
    },
    #[error("queue {queue} is already in use by another process (another tollgate agent?)")]
    InUse { queue: u16 },
    #[error("starting the queue watchdog: {0}")]
    Watchdog(std::io::Error),
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

/// How a queue is bound, and what its worker is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    pub queue: u16,
    /// The worker's name in logs and `tollgate status`: `queue` (new
    /// connections), `dns`, `L7 queue`.
    pub name: &'static str,
    /// Bytes of each packet copied to userspace.
    pub copy_range: u16,
    /// Packets the kernel holds before it drops (fail-closed) or accepts
    /// (fail-open) new ones.
    pub max_len: u32,
    /// The kernel accepts packets itself when the queue is full or unbound.
    pub fail_open: bool,
    /// The kernel may queue GSO packets whole, checksum not computed
    /// (`NFQA_CFG_F_GSO`): only for a worker that reads headers and never
    /// rewrites (see `docs/design/queue.md`).
    pub gso: bool,
    /// Bytes of socket receive buffer; 0 keeps the system's default.
    pub receive_buffer: usize,
}

counters! {
    /// What the loop of one queue counts, whatever its handler.
    pub struct QueueCounters: one per queue {
        packets: Counter "queue_packets" = "Packets received from the queue by its worker",
        overflows: Counter "queue_overflows" = "Receive-buffer overflows of the worker socket (ENOBUFS): the kernel lost queued packets",
        unreadable: Counter "queue_unreadable" = "Received buffers whose netlink messages could not be read to their end",
        verdict_errors: Counter "queue_verdict_errors" = "Verdicts the kernel refused, and verdicts whose send failed (those are sent again)",
        withheld: Gauge "queue_withheld" = "Packets whose verdict the worker holds back",
        restarts: Counter "worker_restarts" = "Times the queue's worker was restarted after a panic or failing receives (the packets it held were dropped)",
    }
}

/// What one receive reports besides its packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Receipt {
    /// Earlier verdicts the kernel refused (its error answers).
    pub refused: u64,
    /// Received buffers that did not read as netlink to their end.
    pub unreadable: u64,
}

/// A bound queue, as the loop needs it: `workers::nfqueue::Queue` (tollgate's own
/// netlink queue) or a fake in tests.
pub trait Socket {
    type Message;
    fn spec(&self) -> &QueueSpec;
    /// Waits up to `timeout` for packets and appends every one a single
    /// wake-up brought (none when the wait timed out); says what else it
    /// met since the last receive.
    fn recv(
        &mut self,
        timeout: Duration,
        into: &mut Vec<Self::Message>,
    ) -> std::io::Result<Receipt>;
    /// The message's place in the kernel's queue order (oldest first).
    fn key(message: &Self::Message) -> u64;
    /// The packet a message carries.
    fn packet(message: &Self::Message) -> Queued<'_>;
    /// Hands the kernel one round of verdicts, oldest packet first;
    /// `oldest_left` is the key of the oldest packet still held without a
    /// verdict. Returns the verdicts that did not reach the kernel (a send
    /// failed), in the round's order: their packets are still queued in
    /// the kernel, so the loop sends them again with its next round and
    /// counts them as held until then.
    fn verdicts(
        &mut self,
        round: Vec<(Self::Message, Action)>,
        oldest_left: Option<u64>,
    ) -> Vec<(Self::Message, Action)>;
}

/// The verdicts a handler gives, by packet id, in the order the kernel is
/// to get them.
#[derive(Debug, Default)]
pub struct Verdicts(Vec<(PacketId, Action)>);

impl Verdicts {
    pub fn give(&mut self, id: PacketId, action: Action) {
        self.0.push((id, action));
    }
}

/// What a worker does with the packets of its queue. A packet that gets no
/// verdict while [`Handler::packet`] runs is withheld by the loop until a
/// later verdict names its id.
pub trait Handler {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts);

    /// Time-driven work (expiry, idle state), after each received batch's
    /// verdicts, and every [`TICK`] while no packet arrives.
    fn tick(&mut self, _now: Instant, _out: &mut Verdicts) {}
}

/// Opens a worker: binds its queue and builds its handler.
pub trait Open<S, H>: FnMut() -> Result<(S, H), QueueError> + Send + 'static {}
impl<S, H, F: FnMut() -> Result<(S, H), QueueError> + Send + 'static> Open<S, H> for F {}

/// What the loop of one queue reports into.
struct Reports {
    counters: Arc<QueueCounters>,
    latency: Histogram,
    heartbeat: Arc<Heartbeat>,
}

/// Opens the worker once (errors are returned here, before any thread
/// runs) and starts a thread that runs it until the process exits,
/// opening it again with `open` after a panic or failing receives. The
/// handler's counter set (shared by every incarnation) and the loop's own
/// are registered for the queue, in that order, and so is its heartbeat.
pub fn spawn<S, H>(
    mut open: impl Open<S, H>,
    handler_counters: Arc<dyn CounterSet>,
    metrics: &Metrics,
) -> Result<(), QueueError>
where
    S: Socket + Send + 'static,
    H: Handler + Send + 'static,
{
    let first = open()?;
    let spec = *first.0.spec();
    let counters = Arc::new(QueueCounters::default());
    metrics.counters().register(
        spec.queue,
        spec.name,
        vec![handler_counters, Arc::clone(&counters) as _],
    );
    let reports = Reports {
        counters,
        latency: metrics.queue_latency(spec.queue),
        heartbeat: metrics.health().register(spec.queue, spec.name),
    };
    std::thread::Builder::new()
        .name(format!("nfqueue-{}", spec.queue))
        .spawn(move || supervise(spec, first, open, &reports))
        .map_err(QueueError::setup(spec.queue, "spawn"))?;
    Ok(())
}

/// Runs the worker, and again after each stop, for ever.
fn supervise<S: Socket, H: Handler>(
    spec: QueueSpec,
    first: (S, H),
    mut open: impl Open<S, H>,
    reports: &Reports,
) {
    let QueueSpec { queue, name, .. } = spec;
    let mut next = Some(first);
    let mut in_a_row = 0u32;
    loop {
        let restart = next.is_none();
        let worker = match next.take().map_or_else(&mut open, Ok) {
            Ok(worker) => worker,
            Err(error) => {
                in_a_row = in_a_row.saturating_add(1);
                let delay = restart_delay(in_a_row);
                reports
                    .heartbeat
                    .down(format!("{error}; retrying in {}s", delay.as_secs()));
                tracing::error!(queue, %error, "{name} worker could not be restarted; retrying in {delay:?}");
                std::thread::sleep(delay);
                continue;
            }
        };
        reports.heartbeat.up();
        if restart {
            tracing::info!(queue, "{name} worker restarted");
        }
        let started = Instant::now();
        let why = incarnation(worker, reports);
        if started.elapsed() >= HEALTHY_RUN {
            in_a_row = 0;
        }
        in_a_row = in_a_row.saturating_add(1);
        let delay = restart_delay(in_a_row);
        let restarts = reports.counters.restarts.fetch_add(1, Ordering::Relaxed) + 1;
        reports
            .heartbeat
            .down(format!("{why}; restarting in {}s", delay.as_secs()));
        tracing::error!(
            queue,
            restarts,
            "{name} worker {why}; the packets it held were dropped; restarting in {delay:?}"
        );
        std::thread::sleep(delay);
    }
}

/// Runs one incarnation of a worker until it stops; says why. Its socket
/// is closed when this returns, so the kernel drops the packets it held.
fn incarnation<S: Socket, H: Handler>(
    (mut socket, mut handler): (S, H),
    reports: &Reports,
) -> String {
    let ended = catch_unwind(AssertUnwindSafe(|| run(&mut socket, &mut handler, reports)));
    match ended {
        Ok(error) => format!("stopped after {MAX_CONSECUTIVE_ERRORS} failed receives: {error}"),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            format!("panicked: {message}")
        }
    }
}

/// The wait before the `n`-th restart in a row (the first is 1).
pub fn restart_delay(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    RESTART_DELAY
        .saturating_mul(1 << doublings)
        .min(MAX_RESTART_DELAY)
}

/// The wall-clock time audit records are stamped with.
pub(crate) fn wall_clock() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    Timestamp::from_unix_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

/// The messages waiting for their verdict, in the kernel's queue order,
/// with when each was received; the order key of each held id; and the
/// verdicts given whose send failed, to be sent again.
struct Held<M> {
    by_key: BTreeMap<u64, (M, Instant)>,
    keys: HashMap<PacketId, u64>,
    undelivered: Vec<(M, Action, Instant)>,
}

impl<M> Held<M> {
    fn len(&self) -> usize {
        self.by_key.len() + self.undelivered.len()
    }
}

/// Receives and answers until [`MAX_CONSECUTIVE_ERRORS`] receives in a row
/// fail; returns the last error.
fn run<S: Socket, H: Handler>(
    socket: &mut S,
    handler: &mut H,
    reports: &Reports,
) -> std::io::Error {
    let Reports {
        counters,
        latency,
        heartbeat,
    } = reports;
    let mut held = Held {
        by_key: BTreeMap::new(),
        keys: HashMap::new(),
        undelivered: Vec::new(),
    };
    let mut batch = Vec::new();
    let mut out = Verdicts::default();
    let mut consecutive_errors = 0;
    loop {
        match socket.recv(TICK, &mut batch) {
            Ok(Receipt {
                refused,
                unreadable,
            }) => {
                consecutive_errors = 0;
                counters
                    .verdict_errors
                    .fetch_add(refused, Ordering::Relaxed);
                counters.unreadable.fetch_add(unreadable, Ordering::Relaxed);
            }
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                let lost = counters.overflows.fetch_add(1, Ordering::Relaxed) + 1;
                if lost.is_power_of_two() {
                    let QueueSpec { queue, name, .. } = *socket.spec();
                    tracing::warn!(queue, overflows = lost, "{name} overflow");
                }
            }
            Err(error) => {
                consecutive_errors += 1;
                if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    return error;
                }
                continue;
            }
        }
        let received = Instant::now();
        let any = !batch.is_empty();
        for message in batch.drain(..) {
            let _nth = counters.packets.fetch_add(1, Ordering::Relaxed) + 1;
            #[cfg(debug_assertions)]
            super::fault::at_packet(socket.spec().queue, _nth);
            let (id, key) = (S::packet(&message).id, S::key(&message));
            handler.packet(S::packet(&message), received, &mut out);
            held.keys.insert(id, key);
            held.by_key.insert(key, (message, received));
        }
        handler.tick(received, &mut out);
        give(socket, &mut out, &mut held, counters, latency);
        let withheld = held.len() as u64;
        counters.withheld.store(withheld, Ordering::Relaxed);
        if any {
            heartbeat.beat(withheld);
        }
    }
}

/// Hands the kernel the verdicts in `out` and those whose send failed
/// before as one round, oldest packet first; keeps what fails again.
fn give<S: Socket>(
    socket: &mut S,
    out: &mut Verdicts,
    held: &mut Held<S::Message>,
    counters: &QueueCounters,
    latency: &Histogram,
) {
    if out.0.is_empty() && held.undelivered.is_empty() {
        return;
    }
    let mut round = std::mem::take(&mut held.undelivered);
    for (id, action) in out.0.drain(..) {
        let message = held
            .keys
            .remove(&id)
            .and_then(|key| held.by_key.remove(&key));
        let Some((message, received)) = message else {
            debug_assert!(
                false,
                "a verdict for packet {id}, which the loop does not hold"
            );
            continue;
        };
        round.push((message, action, received));
    }
    round.sort_by_key(|(message, ..)| S::key(message));
    let oldest_left = held.by_key.keys().next().copied();
    let mut received: HashMap<u64, Instant> = round
        .iter()
        .map(|(message, _, at)| (S::key(message), *at))
        .collect();
    let round = round
        .into_iter()
        .map(|(message, action, _)| (message, action))
        .collect();
    let undelivered = socket.verdicts(round, oldest_left);
    counters
        .verdict_errors
        .fetch_add(undelivered.len() as u64, Ordering::Relaxed);
    for (message, action) in undelivered {
        let at = received
            .remove(&S::key(&message))
            .unwrap_or_else(Instant::now);
        held.undelivered.push((message, action, at));
    }
    for at in received.into_values() {
        latency.observe(at.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests;
