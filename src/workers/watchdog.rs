//! The stall watch's thread: every [`WATCH_EVERY`] (or a quarter of the
//! stall timeout, if shorter) it reads the kernel's `waiting` count of
//! every queue and the workers' heartbeats ([`StallWatch`]); a queue with
//! packets waiting for a worker that took none for the stall timeout makes
//! the process exit with [`STALL_EXIT`]. A stuck worker still holds its
//! socket, so the queue cannot be re-bound in-process; the service manager
//! (kubelet, systemd) restarts the agent, and the kernel rules stay. It
//! never touches a queue or a packet.
#![allow(clippy::disallowed_methods)] // the watchdog measures stalls on the clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::QueueError;
use crate::telemetry::health::StallWatch;
use crate::telemetry::{kernel, Metrics};

/// Longest time between two looks.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Exit code of an agent that stopped because a worker stalled.
pub const STALL_EXIT: i32 = 3;

/// Starts the watch; it runs until the process exits.
pub fn spawn(metrics: Arc<Metrics>, stall_timeout: Duration) -> Result<(), QueueError> {
    let every = (stall_timeout / 4).clamp(Duration::from_millis(100), WATCH_EVERY);
    let mut watch = StallWatch::new(stall_timeout);
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            let waiting: Vec<(u16, u64)> = kernel::read()
                .iter()
                .map(|(queue, k)| (*queue, k.kernel_waiting.load(std::sync::atomic::Ordering::Relaxed)))
                .collect();
            let stalls = watch.observe(metrics.health(), &waiting, Instant::now());
            if stalls.is_empty() {
                continue;
            }
            for stall in &stalls {
                tracing::error!(
                    queue = stall.queue,
                    waiting = stall.waiting,
                    "{} worker stalled: no packet taken for {:?}; exiting so that the agent is restarted (the kernel rules stay)",
                    stall.name,
                    stall.for_
                );
            }
            std::process::exit(STALL_EXIT);
        })
        .map_err(QueueError::Watchdog)?;
    Ok(())
}
