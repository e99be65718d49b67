//! The one NFQUEUE loop: binds a queue, owns each message until its verdict,
//! asks a [`Handler`] by packet id, and counts packets, overflows, verdict
//! errors and withheld packets once for every worker. It also supervises
//! its worker: the loop beats the queue's [`Heartbeat`] with every packet,
//! and a worker that panics (or whose receives keep failing) is restarted
//! in-process after a back-off, on a new socket with a new handler, while
//! `/livez` says why it is down. No handler sees an `nfq` type; nothing
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

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::histogram::Histogram;

use crate::audit::Timestamp;
use crate::packet::{Action, LocalSide, PacketId, Queued};
use crate::telemetry::counters::{counters, CounterSet};
use crate::telemetry::{kernel, Heartbeat, Metrics};

/// Consecutive receive errors after which a worker is restarted.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 1000;
/// First wait before a worker that stopped is restarted; it doubles with
/// every restart in a row, up to [`MAX_RESTART_DELAY`].
pub const RESTART_DELAY: Duration = Duration::from_secs(1);
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A worker that ran this long before it stopped starts over at
/// [`RESTART_DELAY`].
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);

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
}

counters! {
    /// What the loop of one queue counts, whatever its handler.
    pub struct QueueCounters: one per queue {
        packets: Counter "queue_packets" = "Packets received from the queue by its worker",
        overflows: Counter "queue_overflows" = "Receive-buffer overflows of the worker socket (ENOBUFS): the kernel lost queued packets",
        verdict_errors: Counter "queue_verdict_errors" = "Verdicts the kernel did not accept",
        withheld: Gauge "queue_withheld" = "Packets whose verdict the worker holds back",
        restarts: Counter "worker_restarts" = "Times the queue's worker was restarted after a panic or failing receives (the packets it held were dropped)",
    }
}

/// A bound queue, as the loop needs it: [`Queue`] over the `nfq` crate
/// today, a netlink queue of tollgate's own or a fake tomorrow.
pub trait Socket {
    type Message;
    fn spec(&self) -> &QueueSpec;
    fn recv(&mut self) -> std::io::Result<Self::Message>;
    /// The packet a message carries.
    fn packet(message: &Self::Message) -> Queued<'_>;
    fn verdict(&mut self, message: Self::Message, action: Action) -> std::io::Result<()>;
}

/// One NFQUEUE queue on its own netlink socket, through the `nfq` crate
/// (blocking: it exposes no descriptor for an event loop).
pub struct Queue {
    socket: nfq::Queue,
    spec: QueueSpec,
}

impl Queue {
    /// Binds the queue in the calling thread's network namespace: copies up
    /// to `copy_range` bytes of each packet, lets up to `max_len` wait,
    /// sets fail-open, and has socket overflows (ENOBUFS) reported instead
    /// of hidden.
    pub fn open(spec: QueueSpec) -> Result<Queue, QueueError> {
        let queue = spec.queue;
        let setup = |step| QueueError::setup(queue, step);
        let mut socket = nfq::Queue::open().map_err(setup("open"))?;
        socket.bind(queue).map_err(|error| {
            // The kernel answers EPERM both without CAP_NET_ADMIN and when
            // another socket holds the queue; only the latter lists it.
            let held = error.raw_os_error() == Some(libc::EPERM)
                && kernel::read().iter().any(|(bound, _)| *bound == queue);
            if held {
                QueueError::InUse { queue }
            } else {
                setup("bind")(error)
            }
        })?;
        socket
            .set_copy_range(queue, spec.copy_range)
            .map_err(setup("copy range"))?;
        socket
            .set_queue_max_len(queue, spec.max_len)
            .map_err(setup("queue length"))?;
        socket
            .set_fail_open(queue, spec.fail_open)
            .map_err(setup("fail-open flag"))?;
        socket
            .set_recv_enobufs(true)
            .map_err(setup("overflow reporting"))?;
        Ok(Queue { socket, spec })
    }
}

impl Socket for Queue {
    type Message = nfq::Message;

    fn spec(&self) -> &QueueSpec {
        &self.spec
    }

    fn recv(&mut self) -> std::io::Result<nfq::Message> {
        self.socket.recv()
    }

    fn packet(message: &nfq::Message) -> Queued<'_> {
        Queued {
            id: message.get_packet_id(),
            payload: message.get_payload(),
            mark: message.get_nfmark(),
            local: LocalSide::of_hook(message.get_hook()),
            indev: message.get_indev(),
        }
    }

    fn verdict(&mut self, mut message: nfq::Message, action: Action) -> std::io::Result<()> {
        let verdict = match action {
            Action::Accept => nfq::Verdict::Accept,
            Action::AcceptRewritten(rewrite) => match rewrite.apply(message.get_payload_mut()) {
                Ok(()) => nfq::Verdict::Accept,
                Err(_) => nfq::Verdict::Drop,
            },
            Action::Drop => nfq::Verdict::Drop,
            Action::Repeat { mark } => {
                message.set_nfmark(mark);
                nfq::Verdict::Repeat
            }
        };
        message.set_verdict(verdict);
        self.socket.verdict(message)
    }
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

    /// Time-driven work (expiry, idle state), after each packet's verdicts.
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

/// The messages waiting for their verdict, with when each was received.
type Held<M> = HashMap<PacketId, (M, Instant)>;

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
    let mut held: Held<S::Message> = HashMap::new();
    let mut out = Verdicts::default();
    let mut consecutive_errors = 0;
    loop {
        let message = match socket.recv() {
            Ok(message) => message,
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                let lost = counters.overflows.fetch_add(1, Ordering::Relaxed) + 1;
                if lost.is_power_of_two() {
                    let QueueSpec { queue, name, .. } = *socket.spec();
                    tracing::warn!(queue, overflows = lost, "{name} overflow");
                }
                continue;
            }
            Err(error) => {
                consecutive_errors += 1;
                if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                    return error;
                }
                continue;
            }
        };
        consecutive_errors = 0;
        let _nth = counters.packets.fetch_add(1, Ordering::Relaxed) + 1;
        #[cfg(debug_assertions)]
        super::fault::at_packet(socket.spec().queue, _nth);
        let received = Instant::now();
        let id = S::packet(&message).id;
        handler.packet(S::packet(&message), received, &mut out);
        let mut current = Some((id, message, received));
        give(socket, &mut out, &mut current, &mut held, counters, latency);
        if let Some((id, message, received)) = current {
            held.insert(id, (message, received));
        }
        handler.tick(received, &mut out);
        give(socket, &mut out, &mut None, &mut held, counters, latency);
        let withheld = held.len() as u64;
        counters.withheld.store(withheld, Ordering::Relaxed);
        heartbeat.beat(withheld);
    }
}

/// Hands the kernel the verdicts in `out`, in order: for the `current`
/// packet or a withheld one.
fn give<S: Socket>(
    socket: &mut S,
    out: &mut Verdicts,
    current: &mut Option<(PacketId, S::Message, Instant)>,
    held: &mut Held<S::Message>,
    counters: &QueueCounters,
    latency: &Histogram,
) {
    for (id, action) in out.0.drain(..) {
        let message = match current {
            Some((current_id, ..)) if *current_id == id => {
                current.take().map(|(_, message, at)| (message, at))
            }
            _ => held.remove(&id),
        };
        let Some((message, received)) = message else {
            debug_assert!(
                false,
                "a verdict for packet {id}, which the loop does not hold"
            );
            continue;
        };
        if socket.verdict(message, action).is_err() {
            counters.verdict_errors.fetch_add(1, Ordering::Relaxed);
        }
        latency.observe(received.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests;
