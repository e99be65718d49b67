//! Whether the agent is live and ready, as the probes ask it: one
//! [`Heartbeat`] per queue, beaten by the runtime loop (progress with
//! every packet received, down while its worker restarts), and the
//! [`StallWatch`] that tells a queue that stopped draining from one with
//! nothing to do. Pure: the time and the kernel's counts are passed in; it
//! starts no thread, reads no clock and imports no worker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a probe asks: `live` (every worker alive and draining) or `ready`
/// (a complete snapshot applied and the kernel matching it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "camelCase")]
pub enum Check {
    Live,
    Ready,
}

/// Answers the probes: `Err(why)` when the agent is not live or not ready.
pub trait Probes: Send + Sync {
    fn check(&self, check: Check) -> Result<(), String>;
}

/// The signs of life of one queue's worker.
#[derive(Debug)]
pub struct Heartbeat {
    pub queue: u16,
    /// The worker's name: `queue`, `dns`, `L7 queue`.
    pub name: &'static str,
    /// Packets received so far: the progress the watch looks for.
    progress: AtomicU64,
    /// Packets whose verdict the worker holds back on purpose: waiting in
    /// the kernel, but not for the worker.
    withheld: AtomicU64,
    /// Why the worker is not running; `None` while it runs.
    down: Mutex<Option<String>>,
    /// Why the queue counts as stalled; `None` while it drains.
    stalled: Mutex<Option<String>>,
}

impl Heartbeat {
    fn new(queue: u16, name: &'static str) -> Heartbeat {
        Heartbeat {
            queue,
            name,
            progress: AtomicU64::new(0),
            withheld: AtomicU64::new(0),
            down: Mutex::new(None),
            stalled: Mutex::new(None),
        }
    }

    /// A packet was received; `withheld` packets wait for a later verdict.
    pub fn beat(&self, withheld: u64) {
        self.progress.fetch_add(1, Ordering::Relaxed);
        self.withheld.store(withheld, Ordering::Relaxed);
    }

    /// The worker stopped (`why`) and is not reading its queue.
    pub fn down(&self, why: String) {
        *lock(&self.down) = Some(why);
        self.withheld.store(0, Ordering::Relaxed);
    }

    /// The worker reads its queue (again).
    pub fn up(&self) {
        *lock(&self.down) = None;
    }

    fn is_up(&self) -> bool {
        lock(&self.down).is_none()
    }

    /// Why this worker is not live, if it is not.
    fn problem(&self) -> Option<String> {
        let why = lock(&self.down)
            .clone()
            .or_else(|| lock(&self.stalled).clone())?;
        Some(format!("{} {}: {why}", self.name, self.queue))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every worker's heartbeat, in the order the workers started.
#[derive(Debug, Default)]
pub struct Health {
    beats: RwLock<Vec<Arc<Heartbeat>>>,
}

impl Health {
    /// The heartbeat of `queue`'s worker, up from the start.
    pub fn register(&self, queue: u16, name: &'static str) -> Arc<Heartbeat> {
        let beat = Arc::new(Heartbeat::new(queue, name));
        self.beats
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&beat));
        beat
    }

    fn beats(&self) -> Vec<Arc<Heartbeat>> {
        self.beats.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Live when every worker runs and none has stalled; otherwise why
    /// not, one clause per worker.
    pub fn live(&self) -> Result<(), String> {
        let problems: Vec<String> = self.beats().iter().filter_map(|b| b.problem()).collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// A queue found stalled by [`StallWatch::observe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    pub queue: u16,
    pub name: &'static str,
    /// Packets waiting for the worker (the kernel's count less those the
    /// worker withholds).
    pub waiting: u64,
    /// How long none was taken.
    pub for_: Duration,
}

/// What the watch saw of one queue last time.
#[derive(Clone, Copy, Debug)]
struct Seen {
    progress: u64,
    stuck_since: Option<Instant>,
}

/// Tells a queue that stopped draining: packets wait for its worker (the
/// kernel's `waiting` less what the worker withholds on purpose) and the
/// worker took none for `after`. An idle queue (nothing waiting) never
/// stalls, however long it is quiet.
#[derive(Debug)]
pub struct StallWatch {
    after: Duration,
    seen: HashMap<u16, Seen>,
}

impl StallWatch {
    pub fn new(after: Duration) -> StallWatch {
        StallWatch {
            after,
            seen: HashMap::new(),
        }
    }

    /// Compares every running worker's progress with the last observation
    /// and the kernel's `waiting` count of its queue (`(queue, waiting)`,
    /// from [`super::kernel::read`]); marks and returns the stalled ones.
    pub fn observe(&mut self, health: &Health, waiting: &[(u16, u64)], now: Instant) -> Vec<Stall> {
        let mut stalls = Vec::new();
        for beat in health.beats() {
            let progress = beat.progress.load(Ordering::Relaxed);
            let in_kernel = waiting
                .iter()
                .find(|(queue, _)| *queue == beat.queue)
                .map_or(0, |(_, n)| *n);
            let pending = in_kernel.saturating_sub(beat.withheld.load(Ordering::Relaxed));
            let seen = self.seen.entry(beat.queue).or_insert(Seen {
                progress,
                stuck_since: None,
            });
            let stuck = beat.is_up() && pending > 0 && progress == seen.progress;
            seen.progress = progress;
            seen.stuck_since = if stuck {
                Some(seen.stuck_since.unwrap_or(now))
            } else {
                None
            };
            let stalled_for = seen
                .stuck_since
                .map(|since| now.saturating_duration_since(since))
                .filter(|stuck| *stuck >= self.after);
            *lock(&beat.stalled) = stalled_for.map(|stuck| {
                format!(
                    "stalled: {pending} packets waiting, none taken for {}s",
                    stuck.as_secs()
                )
            });
            if let Some(for_) = stalled_for {
                stalls.push(Stall {
                    queue: beat.queue,
                    name: beat.name,
                    waiting: pending,
                    for_,
                });
            }
        }
        stalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_until_a_worker_is_down_and_again_when_it_is_up() {
        let health = Health::default();
        assert_eq!(health.live(), Ok(()), "no worker yet");
        let q = health.register(100, "queue");
        let dns = health.register(101, "dns");
        q.beat(0);
        assert_eq!(health.live(), Ok(()));
        q.down("panicked: boom; restarting in 1s".into());
        dns.down("receive failed".into());
        assert_eq!(
            health.live(),
            Err("queue 100: panicked: boom; restarting in 1s; dns 101: receive failed".into())
        );
        q.up();
        dns.up();
        assert_eq!(health.live(), Ok(()));
    }

    #[test]
    fn a_queue_stalls_only_when_packets_wait_for_a_worker_that_takes_none() {
        let health = Health::default();
        let q = health.register(100, "queue");
        let l7 = health.register(102, "L7 queue");
        let mut watch = StallWatch::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        // Idle for ever: nothing waits.
        assert!(watch.observe(&health, &[], at(0)).is_empty());
        assert!(watch.observe(&health, &[(100, 0)], at(60)).is_empty());
        // Packets wait, the worker takes them: draining.
        q.beat(0);
        assert!(watch.observe(&health, &[(100, 3)], at(61)).is_empty());
        q.beat(0);
        assert!(watch.observe(&health, &[(100, 3)], at(75)).is_empty());
        // The L7 worker withholds two packets on purpose and sees no new
        // ones: not stalled.
        l7.beat(2);
        for s in [76, 90, 200] {
            assert!(watch.observe(&health, &[(102, 2)], at(s)).is_empty());
        }
        // Now packets wait and none is taken: stuck from 201, stalled
        // once ten seconds have passed.
        assert!(watch.observe(&health, &[(100, 5)], at(201)).is_empty());
        assert!(watch.observe(&health, &[(100, 5)], at(210)).is_empty());
        assert_eq!(health.live(), Ok(()));
        let stalls = watch.observe(&health, &[(100, 5), (102, 4)], at(211));
        assert_eq!(
            stalls,
            [Stall {
                queue: 100,
                name: "queue",
                waiting: 5,
                for_: Duration::from_secs(10)
            }]
        );
        assert_eq!(
            health.live(),
            Err("queue 100: stalled: 5 packets waiting, none taken for 10s".into())
        );
        // The L7 queue got two more than it withholds at 211: stuck since.
        // Progress clears both.
        q.beat(0);
        l7.beat(4);
        assert!(watch
            .observe(&health, &[(100, 5), (102, 4)], at(230))
            .is_empty());
        assert_eq!(health.live(), Ok(()));
        // A worker that is down (restarting) is not watched for stalls.
        q.down("restarting".into());
        assert!(watch.observe(&health, &[(100, 9)], at(300)).is_empty());
        assert!(watch.observe(&health, &[(100, 9)], at(400)).is_empty());
    }
}
