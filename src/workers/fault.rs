//! Test-only fault switches, compiled only into debug builds
//! (`cfg(debug_assertions)`): a release build a user runs has none. The
//! e2e tests set them in the agent's environment:
//!
//! - `TOLLGATE_FAULT_PANIC=<queue>:<n>`: the worker of NFQUEUE `queue`
//!   panics when its `n`-th packet arrives (once: the packet count goes on
//!   across restarts);
//! - `TOLLGATE_FAULT_STALL=<queue>:<n>`: it stops taking packets at its
//!   `n`-th, for ever (a stuck worker).
//!
//! It never acts unless one of these variables is set.

use std::sync::OnceLock;

/// Where each switch fires: (queue, n-th packet).
struct Switches {
    panic: Option<(u16, u64)>,
    stall: Option<(u16, u64)>,
}

fn switches() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| Switches {
        panic: parse(std::env::var("TOLLGATE_FAULT_PANIC").ok().as_deref()),
        stall: parse(std::env::var("TOLLGATE_FAULT_STALL").ok().as_deref()),
    })
}

/// `<queue>:<n>`.
fn parse(value: Option<&str>) -> Option<(u16, u64)> {
    let (queue, n) = value?.split_once(':')?;
    Some((queue.trim().parse().ok()?, n.trim().parse().ok()?))
}

/// Called by the loop of `queue` as its `nth` packet arrives.
pub(crate) fn at_packet(queue: u16, nth: u64) {
    let switches = switches();
    if switches.panic == Some((queue, nth)) {
        panic!("TOLLGATE_FAULT_PANIC: queue {queue}, packet {nth}");
    }
    if switches.stall == Some((queue, nth)) {
        tracing::warn!(
            queue,
            "TOLLGATE_FAULT_STALL: the worker stops taking packets"
        );
        loop {
            std::thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_name_a_queue_and_a_packet() {
        assert_eq!(parse(Some("100:3")), Some((100, 3)));
        assert_eq!(parse(Some(" 7 : 1 ")), Some((7, 1)));
        for bad in [
            None,
            Some(""),
            Some("100"),
            Some("x:1"),
            Some("70000:1"),
            Some("1:-1"),
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
