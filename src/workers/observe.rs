//! The decisions `tollgate observe` shows, on their way out of the
//! workers: a worker hands each decision ([`Observed`]) to an
//! [`ObserveSink`] — a bounded channel; when it is full the decision is
//! skipped and counted, a packet never waits — and one thread (the hub),
//! which takes them at most every [`DRAIN_INTERVAL`] instead of being
//! woken for each (and sleeps without waking while none come), keeps the
//! latest [`HISTORY`] in a [`History`] and copies each to the clients
//! following, at most [`MAX_FOLLOWERS`], each through a bounded
//! queue of its own: a client that reads too slowly loses decisions
//! (counted, and told how many), never slows the hub or a worker. Nothing
//! here formats an event or touches a socket (that is the status
//! server's).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::counters;
use crate::observe::{History, Observed};

counters! {
    /// What became of the decisions `tollgate observe` shows. Registered
    /// by the agent in every mode.
    pub struct ObserveCounters: one per agent {
        recorded: Counter "observe_events" = "Decisions recorded for tollgate observe (its bounded history and the clients following)",
        dropped_hub_full: Counter "observe_events_dropped" { reason = "hub_full" } = "Decisions tollgate observe lost, by reason: hub_full (the workers' channel was full: the decision was skipped, the packet never waited), slow_reader (a following client read too slowly)",
        dropped_slow_reader: Counter "observe_events_dropped" { reason = "slow_reader" } = "Decisions tollgate observe lost, by reason: hub_full (the workers' channel was full: the decision was skipped, the packet never waited), slow_reader (a following client read too slowly)",
        followers: Gauge "observe_followers" = "tollgate observe clients following the decisions now",
    }
}

/// Decisions in flight between the workers and the hub.
pub const CHANNEL_CAPACITY: usize = 4096;
/// How long the hub lets decisions gather after the first one it waits
/// for. While decisions flow it is never woken for one, so a worker's
/// [`ObserveSink::offer`] is a push without a wake-up: woken per
/// decision, the hub cost the L7 workers a futex wake and two context
/// switches a request (keep-alive requests/s 0.44 of no firewall instead
/// of ~0.7). Only the first decision after an interval that brought none
/// wakes it, so an idle agent's hub does not wake at all (it woke every
/// interval, 50 times a second: 12–13 % of the samples of the scale
/// simulation's local agent). `observe -f` shows a decision at most this
/// much later; the channel holds [`CHANNEL_CAPACITY`] decisions an
/// interval (over 200,000 a second) before it skips any.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(20);
/// Decisions the hub keeps for `tollgate observe` without `-f`.
pub const HISTORY: usize = 4096;
/// Decisions waiting for one following client.
pub const FOLLOWER_QUEUE: usize = 1024;
/// Clients following at once (each holds one of the status server's
/// clients: the rest stay free for probes and commands).
pub const MAX_FOLLOWERS: usize = 4;

/// The workers' end. Cloned per worker.
#[derive(Clone)]
pub struct ObserveSink {
    tx: SyncSender<Observed>,
    counters: Arc<ObserveCounters>,
}

impl ObserveSink {
    /// Hands a decision to the hub without waiting; a full channel skips
    /// (and counts) it.
    pub fn offer(&self, observed: Observed) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(observed)
        {
            self.counters
                .dropped_hub_full
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the hub shares with the status server.
struct Shared {
    history: History,
    followers: Vec<Follower>,
}

impl Shared {
    /// No decision yet, no follower.
    fn new() -> Shared {
        Shared {
            history: History::new(HISTORY),
            followers: Vec::new(),
        }
    }
}

struct Follower {
    tx: SyncSender<Observed>,
    lost: Arc<AtomicU64>,
    /// False once its [`Follow`] is dropped.
    alive: Arc<AtomicBool>,
}

/// The reading end: the history and the followers.
#[derive(Clone)]
pub struct Hub {
    shared: Arc<Mutex<Shared>>,
    counters: Arc<ObserveCounters>,
}

/// A client following the decisions: those after the history it was
/// given, in order; `lost` counts those it lost by reading too slowly.
/// Dropping it stops the copies.
pub struct Follow {
    pub history: History,
    pub decisions: Receiver<Observed>,
    pub lost: Arc<AtomicU64>,
    alive: Arc<AtomicBool>,
    counters: Arc<ObserveCounters>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Relaxed);
        self.counters.followers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts the hub thread; returns the workers' end and the reading end.
pub fn spawn(counters: Arc<ObserveCounters>) -> std::io::Result<(ObserveSink, Hub)> {
    let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
    let hub = Hub {
        shared: Arc::new(Mutex::new(Shared::new())),
        counters: Arc::clone(&counters),
    };
    let shared = Arc::clone(&hub.shared);
    let hub_counters = Arc::clone(&counters);
    std::thread::Builder::new()
        .name("observe".into())
        .spawn(move || run(&rx, &shared, &hub_counters))?;
    Ok((ObserveSink { tx, counters }, hub))
}

/// The hub: it waits for a decision, lets more gather for
/// [`DRAIN_INTERVAL`], and puts them, each into the history and to every
/// follower, under one lock, so a new follower's history and its first
/// copies neither overlap nor leave a gap. Ends when every worker's sink
/// is gone.
fn run(rx: &Receiver<Observed>, shared: &Mutex<Shared>, counters: &ObserveCounters) {
    let mut batch = Vec::new();
    loop {
        // Idle, this blocks without waking. While decisions flow, the
        // first of an interval wakes it (a worker pays at most one wake-up
        // an interval), or the last interval left some and it returns at
        // once.
        match rx.recv() {
            Ok(observed) => batch.push(observed),
            Err(_) => return,
        }
        std::thread::sleep(DRAIN_INTERVAL);
        let disconnected = loop {
            match rx.try_recv() {
                Ok(observed) => batch.push(observed),
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        if !batch.is_empty() {
            let mut shared = shared.lock().unwrap_or_else(|e| e.into_inner());
            for observed in batch.drain(..) {
                shared.followers.retain(|follower| {
                    if !follower.alive.load(Ordering::Relaxed) {
                        return false;
                    }
                    match follower.tx.try_send(observed.clone()) {
                        Ok(()) => true,
                        Err(TrySendError::Full(_)) => {
                            follower.lost.fetch_add(1, Ordering::Relaxed);
                            counters.dropped_slow_reader.fetch_add(1, Ordering::Relaxed);
                            true
                        }
                        Err(TrySendError::Disconnected(_)) => false,
                    }
                });
                shared.history.push(observed);
                counters.recorded.fetch_add(1, Ordering::Relaxed);
            }
        }
        if disconnected {
            return;
        }
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The decisions kept (a copy: the hub goes on meanwhile).
    pub fn history(&self) -> History {
        self.lock().history.clone()
    }

    /// Follows the decisions from now, with the history up to now; `Err`
    /// when [`MAX_FOLLOWERS`] clients follow already.
    pub fn follow(&self) -> Result<Follow, String> {
        let mut shared = self.lock();
        // Followers gone since the last decision are not counted.
        shared.followers.retain(|f| f.alive.load(Ordering::Relaxed));
        if shared.followers.len() >= MAX_FOLLOWERS {
            return Err(format!(
                "busy: {MAX_FOLLOWERS} clients follow the decisions already; try again"
            ));
        }
        let (tx, decisions) = mpsc::sync_channel(FOLLOWER_QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        shared.followers.push(Follower {
            tx,
            lost: Arc::clone(&lost),
            alive: Arc::clone(&alive),
        });
        self.counters.followers.fetch_add(1, Ordering::Relaxed);
        Ok(Follow {
            history: shared.history.clone(),
            decisions,
            lost,
            alive,
            counters: Arc::clone(&self.counters),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // the tests wait for the hub thread.
    use std::time::{Duration, Instant};

    use super::*;
    use crate::audit::Timestamp;
    use crate::packet::flow::{Flow, Transport, Verdict};
    use crate::ruleset::DecidedBy;

    fn observed(port: u16) -> Observed {
        Observed {
            time: Timestamp::from_unix_micros(0),
            flow: Flow {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                transport: Transport::Tcp {
                    src_port: 1,
                    dst_port: port,
                },
                local: None,
            },
            verdict: Verdict::Drop,
            by: DecidedBy::NoRule,
            request: None,
        }
    }

    fn wait(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_follower_gets_the_history_then_each_new_decision_once() {
        let counters = Arc::new(ObserveCounters::default());
        let (sink, hub) = spawn(Arc::clone(&counters)).unwrap();
        sink.offer(observed(1));
        wait("the first", || hub.history().len() == 1);
        let follow = hub.follow().unwrap();
        assert_eq!(follow.history.len(), 1);
        sink.offer(observed(2));
        let next = follow
            .decisions
            .recv_timeout(Duration::from_secs(10))
            .unwrap();
        assert_eq!(next.flow.transport.dst_port(), Some(2));
        assert!(follow.decisions.try_recv().is_err());
        assert_eq!(counters.followers.load(Ordering::Relaxed), 1);
        drop(follow);
        assert_eq!(counters.followers.load(Ordering::Relaxed), 0);
        wait("two recorded", || {
            counters.recorded.load(Ordering::Relaxed) == 2
        });
    }

    /// Mutation: `try_send` replaced by a blocking `send` in `run` — the
    /// hub waits for the follower that never reads, the history stops at
    /// the first decisions and the test times out.
    #[test]
    fn a_follower_that_never_reads_loses_decisions_and_slows_nothing() {
        let counters = Arc::new(ObserveCounters::default());
        let (sink, hub) = spawn(Arc::clone(&counters)).unwrap();
        let follow = hub.follow().unwrap();
        let sent = FOLLOWER_QUEUE + 100;
        for port in 0..sent {
            sink.offer(observed(port as u16));
            // Never more than the channel holds in flight.
            if port % 1000 == 0 {
                wait("the hub to drain", || {
                    counters.recorded.load(Ordering::Relaxed) as usize == port + 1
                });
            }
        }
        wait("every decision recorded", || {
            counters.recorded.load(Ordering::Relaxed) as usize == sent
        });
        let lost = follow.lost.load(Ordering::Relaxed);
        assert_eq!(lost, 100);
        assert_eq!(counters.dropped_slow_reader.load(Ordering::Relaxed), 100);
        assert_eq!(follow.decisions.try_iter().count(), FOLLOWER_QUEUE);
        assert_eq!(hub.history().len(), sent.min(HISTORY));
    }

    /// The voluntary context switches of thread `tid` of this process.
    fn switches(tid: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }

    /// Mutation (tried): `run` sleeping [`DRAIN_INTERVAL`] before it
    /// waits, as the hub did before (woken 50 times a second) — the hub
    /// never stays 40 ms without a switch, and the test fails waiting
    /// for it.
    #[test]
    fn an_idle_hub_sleeps_without_waking_and_wakes_for_a_decision() {
        let counters = Arc::new(ObserveCounters::default());
        let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
        let shared = Arc::new(Mutex::new(Shared::new()));
        let (tid_tx, tid_rx) = mpsc::channel();
        let hub = {
            let (shared, counters) = (Arc::clone(&shared), Arc::clone(&counters));
            std::thread::spawn(move || {
                let me = std::fs::read_link("/proc/thread-self").unwrap();
                let tid = me.file_name().unwrap().to_string_lossy().into_owned();
                tid_tx.send(tid).unwrap();
                run(&rx, &shared, &counters);
            })
        };
        let tid = tid_rx.recv().unwrap();
        let sink = ObserveSink {
            tx,
            counters: Arc::clone(&counters),
        };
        // Positive control first: the hub takes a decision, then idles.
        sink.offer(observed(1));
        wait("the first decision", || {
            counters.recorded.load(Ordering::Relaxed) == 1
        });
        wait("the hub to wait again", || {
            let before = switches(&tid);
            std::thread::sleep(DRAIN_INTERVAL * 2);
            switches(&tid) == before
        });
        let before = switches(&tid);
        std::thread::sleep(Duration::from_millis(300));
        let idle = switches(&tid) - before;
        assert!(idle <= 2, "an idle hub woke {idle} times in 300 ms");
        sink.offer(observed(2));
        wait("the next decision", || {
            counters.recorded.load(Ordering::Relaxed) == 2
        });
        drop(sink);
        hub.join().unwrap();
    }

    #[test]
    fn a_full_channel_skips_and_counts_and_followers_are_bounded() {
        let counters = Arc::new(ObserveCounters::default());
        // No hub thread: nothing drains the channel.
        let (tx, _rx) = mpsc::sync_channel(2);
        let sink = ObserveSink {
            tx,
            counters: Arc::clone(&counters),
        };
        for port in 0..5 {
            sink.offer(observed(port));
        }
        assert_eq!(counters.dropped_hub_full.load(Ordering::Relaxed), 3);
        let (_, hub) = spawn(Arc::clone(&counters)).unwrap();
        let follows: Vec<Follow> = (0..MAX_FOLLOWERS).map(|_| hub.follow().unwrap()).collect();
        assert!(hub.follow().err().is_some_and(|e| e.starts_with("busy")));
        drop(follows);
        assert!(hub.follow().is_ok());
    }
}
