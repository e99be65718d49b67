//! Waiting for a condition in the no-root watcher tests: poll with a
//! deadline, never a fixed sleep. Included with `#[path]`.

use std::time::{Duration, Instant};

/// Polls `ok` (at most 20 s); on timeout fails naming `what` and
/// `context()`.
pub fn poll_until(what: &str, mut ok: impl FnMut() -> bool, context: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
