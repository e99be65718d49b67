//! The verdict cache writer: one thread that adds the connection workers'
//! cacheable verdicts to the kernel's cache sets, in batches over one
//! netlink socket (a batch is flushed when it is full or a few
//! milliseconds after its first entry). The workers hand entries over
//! without waiting; when the writer falls behind, entries are dropped and
//! counted (a missing entry only means the next connection with its key
//! is decided by a worker again). A tuple is written at its second
//! decision: one met once (a scan, a one-off client) would cost an insert
//! and save nothing. It never decides anything and never writes a set of
//! another generation than the decision's.

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
/// Tuples decided once, remembered until decided again (least recent
/// forgotten first). Only a tuple decided a second time is written: a
/// tuple met once (a scan, a one-off client: every connection from a new
/// address) would cost a kernel insert and a set entry and save nothing.
const SIGHTINGS: usize = 65_536;

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
    let mut sightings = Sightings::new();
    while let Ok(first) = receiver.recv() {
        if !sightings.second(&first) {
            continue;
        }
        let deadline = Instant::now() + FLUSH_AFTER;
        seen.clear();
        seen.insert((first.entry, first.cache.generation));
        batch.push(first);
        while batch.len() < BATCH {
            let wait = deadline.saturating_duration_since(Instant::now());
            match receiver.recv_timeout(wait) {
                // A flood of one key before its entry lands: one write.
                Ok(offer) => {
                    if sightings.second(&offer)
                        && seen.insert((offer.entry, offer.cache.generation))
                    {
                        batch.push(offer);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        flush(&mut socket, &mut batch);
    }
}

/// The tuples decided once and not yet again, per generation.
struct Sightings(lru::LruCache<(CacheEntry, u64), ()>);

impl Sightings {
    fn new() -> Sightings {
        Sightings(lru::LruCache::new(
            std::num::NonZeroUsize::new(SIGHTINGS).expect("SIGHTINGS > 0"),
        ))
    }

    /// Whether `offer` is its tuple's second decision: then it is written
    /// (and forgotten here); the first is only remembered.
    fn second(&mut self, offer: &Offer) -> bool {
        let key = (offer.entry, offer.cache.generation);
        if self.0.pop(&key).is_some() {
            return true;
        }
        self.0.put(key, ());
        false
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
