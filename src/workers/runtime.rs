//! The one NFQUEUE loop: binds a queue, owns each message until its verdict,
//! asks a [`Handler`] by packet id, and counts packets, overflows, verdict
//! errors and withheld packets once for every worker. No handler sees an
//! `nfq` type; nothing here decides a verdict or logs per packet.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::histogram::Histogram;

use crate::audit::Timestamp;
use crate::packet::{Action, LocalSide, PacketId, Queued};
use crate::telemetry::counters::{counters, CounterSet};
use crate::telemetry::Metrics;

/// Consecutive receive errors after which a worker gives up.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 1000;

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
        socket.bind(queue).map_err(setup("bind"))?;
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

/// Starts a thread running `handler` over `queue` until the process exits
/// (the kernel drops what is still queued when the socket closes). The
/// handler's counter set and the loop's own are registered for the queue,
/// in that order.
pub fn spawn<S, H>(
    mut queue: S,
    mut handler: H,
    handler_counters: Arc<dyn CounterSet>,
    metrics: &Metrics,
) -> Result<(), QueueError>
where
    S: Socket + Send + 'static,
    H: Handler + Send + 'static,
{
    let spec = *queue.spec();
    let counters = Arc::new(QueueCounters::default());
    metrics.counters().register(
        spec.queue,
        spec.name,
        vec![handler_counters, Arc::clone(&counters) as _],
    );
    let latency = metrics.queue_latency(spec.queue);
    std::thread::Builder::new()
        .name(format!("nfqueue-{}", spec.queue))
        .spawn(move || {
            let error = run(&mut queue, &mut handler, &counters, &latency);
            tracing::error!(queue = spec.queue, %error, "{} worker stopped", spec.name);
        })
        .map_err(QueueError::setup(spec.queue, "spawn"))?;
    Ok(())
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
    counters: &QueueCounters,
    latency: &Histogram,
) -> std::io::Error {
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
        counters.packets.fetch_add(1, Ordering::Relaxed);
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
        counters
            .withheld
            .store(held.len() as u64, Ordering::Relaxed);
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
