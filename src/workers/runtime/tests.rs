//! The loop's bookkeeping against a fake socket: verdicts by id, withheld
//! packets, overflows, unreadable buffers, verdict errors, verdicts whose
//! send failed and the error budget.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use prometheus_client::metrics::histogram::exponential_buckets;

use super::*;

/// A queue fed from a script; it records the verdicts it is given and
/// fails the receive once the script is done.
#[derive(Default)]
struct FakeSocket {
    incoming: VecDeque<io::Result<(PacketId, Vec<u8>)>>,
    given: Vec<(PacketId, Action)>,
    /// Ids whose verdict the kernel refuses.
    refused: Vec<PacketId>,
    /// Each round's ids, and the oldest packet held after it.
    rounds: Vec<(Vec<PacketId>, Option<u64>)>,
    /// Rounds (1 for the first) whose send fails: none of their verdicts
    /// reaches the kernel.
    failing_rounds: Vec<usize>,
    /// Unreadable buffers reported with each receive.
    unreadable: u64,
}

impl FakeSocket {
    fn packets(payloads: &[(PacketId, &[u8])]) -> FakeSocket {
        FakeSocket {
            incoming: payloads
                .iter()
                .map(|(id, payload)| Ok((*id, payload.to_vec())))
                .collect(),
            ..FakeSocket::default()
        }
    }
}

impl Socket for FakeSocket {
    type Message = (PacketId, Vec<u8>);

    fn spec(&self) -> &QueueSpec {
        &SPEC
    }

    /// One scripted packet per receive, as a real queue may deliver.
    fn recv(&mut self, _timeout: Duration, into: &mut Vec<Self::Message>) -> io::Result<Receipt> {
        let message = self
            .incoming
            .pop_front()
            .unwrap_or_else(|| Err(io::Error::other("script done")))?;
        into.push(message);
        Ok(Receipt {
            refused: 0,
            unreadable: self.unreadable,
        })
    }

    fn key(message: &Self::Message) -> u64 {
        u64::from(message.0)
    }

    fn packet(message: &Self::Message) -> Queued<'_> {
        Queued {
            id: message.0,
            payload: &message.1,
            mark: 0,
            local: None,
            indev: 0,
        }
    }

    fn verdicts(
        &mut self,
        round: Vec<(Self::Message, Action)>,
        oldest_left: Option<u64>,
    ) -> Vec<(Self::Message, Action)> {
        self.rounds
            .push((round.iter().map(|((id, _), _)| *id).collect(), oldest_left));
        if self.failing_rounds.contains(&self.rounds.len()) {
            return round;
        }
        for ((id, _), action) in round {
            if !self.refused.contains(&id) {
                self.given.push((id, action));
            }
        }
        Vec::new()
    }
}

/// `a`: accept; `h`: hold; `r`: release every held packet, then drop this
/// one; `t`: hold, and drop it at the next tick.
#[derive(Default)]
struct Script {
    held: Vec<PacketId>,
    at_tick: Vec<PacketId>,
}

impl Handler for Script {
    fn packet(&mut self, packet: Queued<'_>, _now: Instant, out: &mut Verdicts) {
        match packet.payload {
            b"a" => out.give(packet.id, Action::Accept),
            b"p" => panic!("bad packet {}", packet.id),
            b"h" => self.held.push(packet.id),
            b"r" => {
                for id in self.held.drain(..) {
                    out.give(id, Action::Repeat { mark: 7 });
                }
                out.give(packet.id, Action::Drop);
            }
            _ => self.at_tick.push(packet.id),
        }
    }

    fn tick(&mut self, _now: Instant, out: &mut Verdicts) {
        for id in self.at_tick.drain(..) {
            out.give(id, Action::Drop);
        }
    }
}

const SPEC: QueueSpec = QueueSpec {
    queue: 7,
    name: "test",
    copy_range: 128,
    max_len: 16,
    fail_open: false,
    gso: false,
    receive_buffer: 0,
};

fn latency() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 2.0, 4))
}

fn reports() -> Reports {
    Reports {
        counters: Arc::new(QueueCounters::default()),
        latency: latency(),
        heartbeat: crate::telemetry::Health::default().register(SPEC.queue, SPEC.name),
    }
}

/// Runs `script` over `socket` until the loop gives up.
fn run_script(socket: &mut FakeSocket, script: &mut Script) -> (Arc<QueueCounters>, io::Error) {
    let reports = reports();
    let error = run(socket, script, &reports);
    (reports.counters, error)
}

fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

#[test]
fn verdicts_go_by_id_and_withheld_packets_wait_for_theirs() {
    let mut socket = FakeSocket::packets(&[(1, b"a"), (2, b"h"), (3, b"h"), (4, b"r"), (5, b"h")]);
    let mut script = Script::default();
    let (counters, error) = run_script(&mut socket, &mut script);
    assert_eq!(error.to_string(), "script done");
    assert_eq!(
        socket.given,
        [
            (1, Action::Accept),
            (2, Action::Repeat { mark: 7 }),
            (3, Action::Repeat { mark: 7 }),
            (4, Action::Drop),
        ]
    );
    assert_eq!(load(&counters.packets), 5);
    assert_eq!(load(&counters.withheld), 1, "packet 5 still waits");
}

#[test]
fn tick_verdicts_follow_the_packets() {
    let mut socket = FakeSocket::packets(&[(1, b"t"), (2, b"a")]);
    let (counters, _) = run_script(&mut socket, &mut Script::default());
    assert_eq!(socket.given, [(1, Action::Drop), (2, Action::Accept)]);
    assert_eq!(load(&counters.withheld), 0);
}

#[test]
fn overflows_unreadable_buffers_and_refused_verdicts_are_counted_not_fatal() {
    let mut socket = FakeSocket::packets(&[(1, b"a"), (2, b"a")]);
    socket
        .incoming
        .insert(1, Err(io::Error::from_raw_os_error(libc::ENOBUFS)));
    socket.refused = vec![1];
    socket.unreadable = 3;
    let (counters, _) = run_script(&mut socket, &mut Script::default());
    assert_eq!(socket.given, [(2, Action::Accept)]);
    assert_eq!(load(&counters.overflows), 1);
    assert_eq!(load(&counters.unreadable), 6, "3 with each of two receives");
    assert_eq!(load(&counters.packets), 2);
}

#[test]
fn a_verdict_whose_send_failed_is_held_and_sent_again_with_the_next_round() {
    // Packet 1 is dropped at the tick after it, but that round's send
    // fails; packet 2 waits; packet 3 is accepted.
    let mut socket = FakeSocket::packets(&[(1, b"t"), (2, b"h"), (3, b"a")]);
    socket.failing_rounds = vec![1];
    let (counters, _) = run_script(&mut socket, &mut Script::default());
    assert_eq!(
        socket.rounds,
        [(vec![1], None), (vec![1], Some(2)), (vec![3], Some(2))]
    );
    assert_eq!(socket.given, [(1, Action::Drop), (3, Action::Accept)]);
    assert_eq!(load(&counters.verdict_errors), 1);
    assert_eq!(load(&counters.withheld), 1, "packet 2 still waits");
}

#[test]
fn a_verdict_whose_send_failed_counts_as_withheld_until_it_is_sent() {
    let mut socket = FakeSocket::packets(&[(1, b"a"), (2, b"h")]);
    socket.failing_rounds = vec![1, 2];
    let (counters, _) = run_script(&mut socket, &mut Script::default());
    // Round 2 carries packet 1 again (packet 2 is older than nothing
    // else held, so it is `oldest_left`), and fails too.
    assert_eq!(socket.rounds, [(vec![1], None), (vec![1], Some(2))]);
    assert!(socket.given.is_empty());
    assert_eq!(load(&counters.verdict_errors), 2);
    assert_eq!(
        load(&counters.withheld),
        2,
        "packet 1 to send, packet 2 held"
    );
}

#[test]
fn the_error_budget_counts_consecutive_errors_only() {
    let mut socket = FakeSocket::default();
    let failures = |n| (0..n).map(|_| Err(io::Error::other("transient")));
    socket.incoming.extend(failures(MAX_CONSECUTIVE_ERRORS - 1));
    socket.incoming.push_back(Ok((1, b"a".to_vec())));
    socket.incoming.extend(failures(MAX_CONSECUTIVE_ERRORS - 1));
    socket.incoming.push_back(Ok((2, b"a".to_vec())));
    socket.incoming.extend(failures(MAX_CONSECUTIVE_ERRORS));
    socket.incoming.push_back(Ok((3, b"a".to_vec())));
    let (counters, error) = run_script(&mut socket, &mut Script::default());
    assert_eq!(error.to_string(), "transient");
    assert_eq!(socket.given, [(1, Action::Accept), (2, Action::Accept)]);
    assert_eq!(socket.incoming.len(), 1, "stopped before packet 3");
    assert_eq!(load(&counters.packets), 2);
}

#[test]
fn a_panicking_worker_ends_its_incarnation_with_the_reason() {
    let socket = FakeSocket::packets(&[(1, b"a"), (2, b"p"), (3, b"a")]);
    let reports = reports();
    let why = incarnation((socket, Script::default()), &reports);
    assert_eq!(why, "panicked: bad packet 2");
    assert_eq!(load(&reports.counters.packets), 2);
    let socket = FakeSocket::packets(&[(1, b"a")]);
    let why = incarnation((socket, Script::default()), &reports);
    assert_eq!(
        why,
        format!("stopped after {MAX_CONSECUTIVE_ERRORS} failed receives: script done")
    );
}

#[test]
fn restarts_back_off_from_one_second_to_thirty() {
    let delays: Vec<u64> = (1..=7).map(|n| restart_delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(restart_delay(u32::MAX), MAX_RESTART_DELAY);
}
