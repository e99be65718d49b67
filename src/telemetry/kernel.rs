//! The kernel's counters of every bound NFQUEUE queue, from [`PROC_QUEUES`]
//! of the current network namespace: the one place that reads them, for
//! [`super::Registry::snapshot`]. A missing file means no queue is bound.

use std::sync::atomic::AtomicU64;

use crate::counters;

/// Path of the kernel's per-queue counters in the current namespace.
pub const PROC_QUEUES: &str = "/proc/net/netfilter/nfnetlink_queue";

counters! {
    /// The kernel's counters of one queue.
    pub struct KernelCounters: one per queue {
        kernel_waiting: Gauge "queue_waiting" = "Packets waiting in the kernel queue for a verdict",
        kernel_queue_dropped: Counter "queue_kernel_dropped" = "Packets the kernel dropped because the queue was full",
        kernel_user_dropped: Counter "queue_kernel_user_dropped" = "Packets the kernel could not deliver to the worker socket",
        kernel_queued: Counter "queue_kernel_queued" = "Packets the kernel handed to the worker socket (its id sequence, 32 bits): minus what the worker received and what is waiting, the packets lost in the socket buffer (dropped when fail-closed, accepted without a verdict when fail-open)",
    }
}

/// The counters of every queue bound in this namespace.
pub fn read() -> Vec<(u16, KernelCounters)> {
    std::fs::read_to_string(PROC_QUEUES)
        .map(|text| parse(&text))
        .unwrap_or_default()
}

/// Parses [`PROC_QUEUES`]: `queue peer_portid waiting copy_mode copy_range
/// queue_dropped user_dropped id_sequence 1` per bound queue.
pub fn parse(text: &str) -> Vec<(u16, KernelCounters)> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| fields.get(i)?.parse::<u64>().ok().map(AtomicU64::new);
            Some((
                fields.first()?.parse().ok()?,
                KernelCounters {
                    kernel_waiting: num(2)?,
                    kernel_queue_dropped: num(5)?,
                    kernel_user_dropped: num(6)?,
                    kernel_queued: num(7)?,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn kernel_counters_from_proc() {
        let text = "  100  12345     0 2   128      3      7        42  1\n  101 0 1 2 128 0 0 9 1\nbogus\n";
        let values = |k: &KernelCounters| {
            [
                &k.kernel_waiting,
                &k.kernel_queue_dropped,
                &k.kernel_user_dropped,
                &k.kernel_queued,
            ]
            .map(|c| c.load(Ordering::Relaxed))
        };
        let parsed: Vec<(u16, [u64; 4])> = parse(text)
            .iter()
            .map(|(queue, k)| (*queue, values(k)))
            .collect();
        assert_eq!(parsed, [(100, [0, 3, 7, 42]), (101, [1, 0, 0, 9])]);
    }
}
