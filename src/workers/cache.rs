//! The verdict cache writer: one thread that adds the connection workers'
//! cacheable verdicts to the kernel's cache sets, in batches over one
//! netlink socket (a batch is flushed when it is full or a few
//! milliseconds after its first entry). The workers hand entries over
//! without waiting; when the writer falls behind, entries are dropped and
//! counted (a missing entry only means the next connection with its key
//! is decided by a worker again). A worker offers a tuple from its second
//! decision on ([`Sightings`]): one met once (a scan, a one-off client)
//! would cost an insert and save nothing. It never decides anything and
//! never writes a set of another generation than the decision's.
#![allow(clippy::disallowed_methods)] // the cache writer flushes batches on a deadline.

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::datapath::cache::{insert_op, set_of};
use crate::datapath::ipset_netlink::{IpsetSocket, NetlinkError, IPSET_ERR_HASH_FULL};
use crate::decide::CacheEntry;
use crate::ruleset::VerdictCache;

/// Entries waiting for the writer before workers drop new ones.
const BACKLOG: usize = 4096;
/// Most entries in one netlink batch.
const BATCH: usize = 256;
/// How long the first entry of a batch waits for company.
const FLUSH_AFTER: Duration = Duration::from_millis(2);
/// Tuples one worker remembers having decided (least recent forgotten
/// first). Only a tuple decided before is offered: a tuple met once (a
/// scan, a one-off client: every connection from a new address) would cost
/// a kernel insert and a set entry and save nothing.
const SIGHTINGS: usize = 32_768;

/// What became of an offered verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Added to its set, or its entry refreshed.
    Inserted,
    /// Refused: the set holds `verdictCache.maxEntries`.
    Full,
    /// Its set was replaced meanwhile, or the write failed.
    Failed,
    /// Not written: the writer was behind.
    Dropped,
}

/// Where the fate of an offered verdict is counted (the offering queue's
/// counters).
pub trait CountFate: Send + Sync {
    fn count(&self, fate: Fate);
}

/// One cacheable verdict and where to count what became of it.
struct Offer {
    entry: CacheEntry,
    cache: VerdictCache,
    stats: Arc<dyn CountFate>,
}

/// Hands cacheable verdicts to the writer thread. Cheap to clone.
#[derive(Clone)]
pub struct CacheSink {
    sender: SyncSender<Offer>,
}

impl CacheSink {
    /// Queues `entry` for the sets of `cache`'s generation; never blocks.
    pub fn offer(&self, entry: CacheEntry, cache: VerdictCache, stats: Arc<dyn CountFate>) {
        let offer = Offer {
            entry,
            cache,
            stats,
        };
        match self.sender.try_send(offer) {
            Ok(()) => {}
            Err(TrySendError::Full(offer) | TrySendError::Disconnected(offer)) => {
                offer.stats.count(Fate::Dropped);
            }
        }
    }
}

/// Opens the netlink socket (errors are returned here) and starts the
/// writer thread, which runs until every sink is dropped.
pub fn spawn() -> Result<CacheSink, NetlinkError> {
    let socket = IpsetSocket::open()?;
    let (sender, receiver) = mpsc::sync_channel(BACKLOG);
    std::thread::Builder::new()
        .name("verdict-cache".into())
        .spawn(move || write(socket, &receiver))
        .map_err(NetlinkError::Socket)?;
    Ok(CacheSink { sender })
}

fn write(mut socket: IpsetSocket, receiver: &Receiver<Offer>) {
    let mut batch: Vec<Offer> = Vec::with_capacity(BATCH);
    let mut seen = HashSet::with_capacity(BATCH);
    while let Ok(first) = receiver.recv() {
        let deadline = Instant::now() + FLUSH_AFTER;
        seen.clear();
        seen.insert((first.entry, first.cache.generation));
        batch.push(first);
        while batch.len() < BATCH {
            let wait = deadline.saturating_duration_since(Instant::now());
            match receiver.recv_timeout(wait) {
                // A flood of one key before its entry lands: one write.
                Ok(offer) => {
                    if seen.insert((offer.entry, offer.cache.generation)) {
                        batch.push(offer);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        flush(&mut socket, &mut batch);
    }
}

/// The tuples one connection worker has decided, per generation: a
/// worker offers a cacheable verdict only when its tuple was decided
/// before. Kept in the worker, not the writer, so a connection whose tuple
/// is new (every one of them, for a client that never repeats) costs the
/// worker a map lookup and wakes no other thread. A tuple's connections
/// always reach the same worker: the connection queues are balanced by
/// the address pair, which is in the tuple.
pub struct Sightings(lru::LruCache<(CacheEntry, u64), ()>);

impl Sightings {
    pub fn new() -> Sightings {
        Sightings::with_capacity(SIGHTINGS)
    }

    fn with_capacity(capacity: usize) -> Sightings {
        Sightings(lru::LruCache::new(
            std::num::NonZeroUsize::new(capacity).expect("capacity > 0"),
        ))
    }

    /// Records a decision of `entry` under `generation`; whether its tuple
    /// was decided before (then it is worth caching). A tuple stays
    /// remembered, so one whose entry timed out in the kernel is cached
    /// again at its next decision.
    pub fn seen_before(&mut self, entry: &CacheEntry, generation: u64) -> bool {
        self.0.put((*entry, generation), ()).is_some()
    }
}

impl Default for Sightings {
    fn default() -> Self {
        Sightings::new()
    }
}

/// Writes `batch` (emptying it) and counts each entry against the queue
/// that offered it: inserted, refused because its set is full, or failed.
fn flush(socket: &mut IpsetSocket, batch: &mut Vec<Offer>) {
    let names: Vec<String> = batch.iter().map(|o| set_of(&o.entry, &o.cache)).collect();
    let ops: Vec<_> = batch
        .iter()
        .zip(&names)
        .map(|(offer, set)| insert_op(&offer.entry, &offer.cache, set))
        .collect();
    match socket.apply_each(&ops) {
        Ok(results) => {
            for (offer, code) in batch.iter().zip(results) {
                offer.stats.count(match code {
                    0 => Fate::Inserted,
                    IPSET_ERR_HASH_FULL => Fate::Full,
                    // A set of a generation already replaced (destroyed or
                    // no longer referenced): nothing to cache any more.
                    _ => Fate::Failed,
                });
            }
        }
        Err(_) => {
            for offer in batch.iter() {
                offer.stats.count(Fate::Failed);
            }
        }
    }
    batch.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::CacheKey;
    use crate::packet::flow::Verdict;

    fn entry(last: u8) -> CacheEntry {
        CacheEntry {
            key: CacheKey {
                local: None,
                src: [10, 0, 0, last].into(),
                dst: [10, 0, 1, 1].into(),
                protocol: 6,
                port: 80,
            },
            verdict: Verdict::Allow,
        }
    }

    #[test]
    fn a_tuple_is_offered_from_its_second_decision_on() {
        let mut sightings = Sightings::new();
        assert!(!sightings.seen_before(&entry(1), 7), "first decision");
        assert!(sightings.seen_before(&entry(1), 7), "second");
        assert!(
            sightings.seen_before(&entry(1), 7),
            "after its entry expired"
        );
        assert!(!sightings.seen_before(&entry(2), 7), "another tuple");
        assert!(!sightings.seen_before(&entry(1), 8), "another generation");
    }

    #[test]
    fn the_least_recently_decided_tuple_is_forgotten_first() {
        let mut sightings = Sightings::with_capacity(2);
        sightings.seen_before(&entry(1), 0);
        sightings.seen_before(&entry(2), 0);
        assert!(
            sightings.seen_before(&entry(1), 0),
            "1 is now the most recent"
        );
        sightings.seen_before(&entry(3), 0);
        assert!(!sightings.seen_before(&entry(2), 0), "2 was forgotten");
        assert!(sightings.seen_before(&entry(3), 0));
    }
}
