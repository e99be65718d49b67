//! The DNS worker's set-write queue: the FQDN set writes learned from
//! replies that arrive together go to the kernel in shared batches (one
//! `sendmsg` each), and each held reply is released by the acknowledgement
//! of the batch that carries the last write queued before it — never
//! earlier, so no client sees an answer whose addresses are not yet in the
//! kernel sets. The queue is bounded (`fqdn.writeQueue`): a reply whose
//! writes do not fit waits until the queue has been written (it is
//! delayed, never dropped, never released early). Pure: it decides what
//! goes into which batch and which replies each acknowledgement releases;
//! it never writes a set or reads a clock (times are passed in, in
//! microseconds on the caller's monotonic clock).

use std::collections::VecDeque;

use super::{DnsCounts, SetWrite};

/// Default bound on set writes queued and not yet acknowledged.
pub const DEFAULT_WRITE_QUEUE: usize = 4096;
/// Most set writes in one batch: one netlink message per write, ~90 bytes
/// each, so a batch stays well within a netlink socket's default send
/// buffer (208 KiB) and its acknowledgements within the receive buffer.
pub const MAX_WRITE_BATCH: usize = 512;

/// A batch of writes to send in one `sendmsg`; hand it back to
/// [`SetWriteQueue::acknowledged`] once the kernel has answered every
/// write in it (or the wait for the answers has failed).
#[derive(Debug, PartialEq, Eq)]
pub struct WriteBatch {
    pub writes: Vec<SetWrite>,
    /// How many writes have been queued since the start, up to and
    /// including this batch's last.
    through: u64,
}

/// What [`SetWriteQueue::push`] did with a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed<R> {
    /// Nothing is queued or in flight ahead of it and it brought no
    /// writes: release it now.
    Release(R),
    /// Held until the batch carrying its last write (or the last write
    /// queued before it) is acknowledged.
    Held,
}

/// A reply waiting for its writes.
#[derive(Debug)]
struct Waiting<R> {
    reply: R,
    /// It goes when this many writes (since the start) are acknowledged.
    after: u64,
    /// When it was held (µs).
    since_us: u64,
}

/// The write queue of one DNS worker; `R` is what releases a reply (the
/// packet id and its verdict).
#[derive(Debug)]
pub struct SetWriteQueue<R> {
    bound: usize,
    /// Writes queued and not yet handed out in a batch, oldest first.
    queued: VecDeque<SetWrite>,
    /// Held replies, oldest first (so their `after` only grows).
    waiting: VecDeque<Waiting<R>>,
    /// Writes queued since the start.
    pushed: u64,
    /// Writes handed out in batches since the start.
    sent: u64,
    /// Writes acknowledged since the start.
    acked: u64,
    queue_peak: u64,
    batch_peak: u64,
    /// Counted since the last [`SetWriteQueue::take_counts`].
    counts: DnsCounts,
}

impl<R> SetWriteQueue<R> {
    /// A queue that holds at most `bound` writes (at least 1) before a
    /// reply has to wait for it to be written.
    pub fn new(bound: usize) -> SetWriteQueue<R> {
        SetWriteQueue {
            bound: bound.max(1),
            queued: VecDeque::new(),
            waiting: VecDeque::new(),
            pushed: 0,
            sent: 0,
            acked: 0,
            queue_peak: 0,
            batch_peak: 0,
            counts: DnsCounts::default(),
        }
    }

    /// Writes queued or in flight, not yet acknowledged.
    pub fn depth(&self) -> usize {
        (self.pushed - self.acked) as usize
    }

    /// Replies held for their writes.
    pub fn held(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a reply bringing `writes` writes must wait for the queue to
    /// be written first (it would not fit; a reply alone larger than the
    /// bound fits an empty queue). Counts the reply as delayed when so.
    pub fn must_wait(&mut self, writes: usize) -> bool {
        let full = writes > 0 && self.depth() > 0 && self.depth() + writes > self.bound;
        if full {
            self.counts.replies_delayed += 1;
        }
        full
    }

    /// Queues `reply` with its `writes` (in order), at `now_us`. A reply
    /// with no writes still waits behind the writes queued before it: an
    /// earlier reply may have taught the addresses it answers.
    pub fn push(&mut self, reply: R, writes: Vec<SetWrite>, now_us: u64) -> Pushed<R> {
        if writes.is_empty() && self.depth() == 0 {
            return Pushed::Release(reply);
        }
        self.pushed += writes.len() as u64;
        self.queued.extend(writes);
        self.waiting.push_back(Waiting {
            reply,
            after: self.pushed,
            since_us: now_us,
        });
        self.queue_peak = self.queue_peak.max(self.depth() as u64);
        Pushed::Held
    }

    /// The next batch to send: the oldest queued writes, at most
    /// [`MAX_WRITE_BATCH`]; none when nothing is queued. Batches are
    /// acknowledged in the order they were handed out.
    pub fn next_batch(&mut self) -> Option<WriteBatch> {
        if self.queued.is_empty() {
            return None;
        }
        let n = self.queued.len().min(MAX_WRITE_BATCH);
        let writes: Vec<SetWrite> = self.queued.drain(..n).collect();
        self.sent += n as u64;
        self.counts.write_batches += 1;
        self.counts.write_entries += n as u64;
        self.batch_peak = self.batch_peak.max(n as u64);
        Some(WriteBatch {
            writes,
            through: self.sent,
        })
    }

    /// The kernel has answered every write of `batch` (at `now_us`): the
    /// held replies it covers, oldest first. A write the kernel refused
    /// still releases its reply (the table has learned; the refusal is
    /// counted by the caller), as does a lost acknowledgement.
    pub fn acknowledged(&mut self, batch: WriteBatch, now_us: u64) -> Vec<R> {
        self.acked = self.acked.max(batch.through);
        let mut released = Vec::new();
        while self.waiting.front().is_some_and(|w| w.after <= self.acked) {
            let Some(waiting) = self.waiting.pop_front() else {
                break;
            };
            self.counts.replies_held += 1;
            self.counts.held_micros += now_us.saturating_sub(waiting.since_us);
            released.push(waiting.reply);
        }
        released
    }

    /// What was counted since the last call, with the gauges now.
    pub fn take_counts(&mut self) -> DnsCounts {
        let mut counts = std::mem::take(&mut self.counts);
        counts.write_queue = Some(self.depth() as u64);
        counts.write_queue_peak = Some(self.queue_peak);
        counts.write_batch_peak = Some(self.batch_peak);
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fqdn::FqdnPattern;

    fn add(n: u8) -> SetWrite {
        SetWrite::Add {
            pattern: FqdnPattern::new("*.example.test"),
            address: std::net::IpAddr::from([10, 0, 0, n]),
            timeout_secs: 30,
        }
    }

    fn adds(range: std::ops::Range<u8>) -> Vec<SetWrite> {
        range.map(add).collect()
    }

    /// Sends every batch and acknowledges it at `now_us`: what each ack
    /// released, and each batch's size.
    fn drain(
        queue: &mut SetWriteQueue<&'static str>,
        now_us: u64,
    ) -> Vec<(usize, Vec<&'static str>)> {
        let mut rounds = Vec::new();
        while let Some(batch) = queue.next_batch() {
            let size = batch.writes.len();
            rounds.push((size, queue.acknowledged(batch, now_us)));
        }
        rounds
    }

    #[test]
    fn replies_that_arrive_together_share_one_batch_and_go_at_its_ack() {
        let mut queue = SetWriteQueue::new(DEFAULT_WRITE_QUEUE);
        assert_eq!(queue.push("a", adds(0..8), 100), Pushed::Held);
        assert_eq!(queue.push("b", adds(8..16), 110), Pushed::Held);
        assert_eq!(queue.push("c", adds(16..24), 120), Pushed::Held);
        assert_eq!(queue.depth(), 24);
        let batch = queue.next_batch().unwrap();
        assert_eq!(batch.writes, adds(0..24), "in order, in one batch");
        assert!(queue.next_batch().is_none());
        assert_eq!(queue.held(), 3, "nothing goes before the ack");
        assert_eq!(queue.acknowledged(batch, 150), ["a", "b", "c"]);
        let counts = queue.take_counts();
        assert_eq!((counts.write_batches, counts.write_entries), (1, 24));
        assert_eq!((counts.replies_held, counts.held_micros), (3, 50 + 40 + 30));
        assert_eq!(counts.write_queue, Some(0));
        assert_eq!(counts.write_queue_peak, Some(24));
        assert_eq!(counts.write_batch_peak, Some(24));
    }

    #[test]
    fn a_reply_goes_only_with_the_ack_of_the_batch_holding_its_last_write() {
        let mut queue = SetWriteQueue::new(DEFAULT_WRITE_QUEUE);
        let big = (0..=255u8)
            .chain(0..=255)
            .chain(0..10)
            .map(add)
            .collect::<Vec<_>>();
        queue.push("big", big, 0);
        queue.push("small", adds(20..22), 0);
        let first = queue.next_batch().unwrap();
        assert_eq!(first.writes.len(), MAX_WRITE_BATCH);
        let second = queue.next_batch().unwrap();
        assert_eq!(second.writes.len(), 12);
        assert!(
            queue.acknowledged(first, 5).is_empty(),
            "the first batch carries only part of big's writes"
        );
        assert_eq!(queue.acknowledged(second, 9), ["big", "small"]);
    }

    #[test]
    fn a_reply_without_writes_waits_behind_earlier_writes_and_goes_at_once_otherwise() {
        let mut queue = SetWriteQueue::new(DEFAULT_WRITE_QUEUE);
        assert_eq!(queue.push("query", vec![], 0), Pushed::Release("query"));
        queue.push("teaches", adds(0..2), 0);
        // The same answer again: the table knows the addresses already, so
        // it brings no writes, but its client must not connect before the
        // first reply's writes are in.
        assert_eq!(queue.push("repeat", vec![], 1), Pushed::Held);
        assert_eq!(drain(&mut queue, 3), [(2, vec!["teaches", "repeat"])]);
        assert_eq!(queue.push("later", vec![], 4), Pushed::Release("later"));
    }

    #[test]
    fn a_full_queue_delays_the_reply_that_does_not_fit_and_drops_none() {
        let mut queue = SetWriteQueue::new(8);
        assert!(!queue.must_wait(8), "an empty queue takes a whole reply");
        queue.push("a", adds(0..8), 0);
        assert!(queue.must_wait(8), "full: b waits for a's writes");
        assert_eq!(drain(&mut queue, 10), [(8, vec!["a"])]);
        assert!(!queue.must_wait(8));
        queue.push("b", adds(8..16), 0);
        assert!(!queue.must_wait(0), "a reply without writes never waits");
        assert!(
            !SetWriteQueue::<()>::new(4).must_wait(8),
            "a reply larger than the bound fits an empty queue"
        );
        assert_eq!(drain(&mut queue, 20), [(8, vec!["b"])]);
        let counts = queue.take_counts();
        assert_eq!(counts.replies_delayed, 1);
        assert_eq!(counts.replies_held, 2);
        assert_eq!(counts.write_batches, 2);
        assert_eq!(
            queue.take_counts().replies_delayed,
            0,
            "counts are taken once"
        );
    }

    #[test]
    fn every_reply_is_released_once_in_order_whatever_the_bound() {
        for bound in [1, 3, 8, 100] {
            let mut queue = SetWriteQueue::new(bound);
            let mut released = Vec::new();
            for (n, reply) in ["a", "b", "c", "d", "e", "f"].into_iter().enumerate() {
                let writes = adds(0..(n as u8 % 3) * 4);
                if queue.must_wait(writes.len()) {
                    released.extend(drain(&mut queue, 0).into_iter().flat_map(|(_, r)| r));
                    assert_eq!(queue.depth(), 0);
                }
                if let Pushed::Release(reply) = queue.push(reply, writes, 0) {
                    released.push(reply);
                }
                assert!(queue.depth() <= bound.max(8), "bound {bound}");
            }
            released.extend(drain(&mut queue, 0).into_iter().flat_map(|(_, r)| r));
            assert_eq!(released, ["a", "b", "c", "d", "e", "f"], "bound {bound}");
            assert_eq!(queue.held(), 0);
        }
    }
}
