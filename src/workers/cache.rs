//! The verdict cache writer: one thread that adds the connection workers'
//! cacheable verdicts to the kernel's cache sets, in batches over one
//! netlink socket (a batch is flushed when it is full or a few
//! milliseconds after its first entry). The workers hand entries over
//! without waiting; when the writer falls behind, entries are dropped and
//! counted (a missing entry only means the next connection with its key
//! is decided by a worker again). It never decides anything and never
//! writes a set of another generation than the decision's.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::ConnectionCounters;
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

/// One cacheable verdict and where to count what became of it.
struct Offer {
    entry: CacheEntry,
    cache: VerdictCache,
    stats: Arc<ConnectionCounters>,
}

/// Hands cacheable verdicts to the writer thread. Cheap to clone.
#[derive(Clone)]
pub struct CacheSink {
    sender: SyncSender<Offer>,
}

impl CacheSink {
    /// Queues `entry` for the sets of `cache`'s generation; never blocks.
    pub fn offer(&self, entry: CacheEntry, cache: VerdictCache, stats: &Arc<ConnectionCounters>) {
        let offer = Offer {
            entry,
            cache,
            stats: Arc::clone(stats),
        };
        match self.sender.try_send(offer) {
            Ok(()) => {}
            Err(TrySendError::Full(offer) | TrySendError::Disconnected(offer)) => {
                offer.stats.cache_dropped.fetch_add(1, Ordering::Relaxed);
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
                let counter = match code {
                    0 => &offer.stats.cache_inserted,
                    IPSET_ERR_HASH_FULL => &offer.stats.cache_full,
                    // A set of a generation already replaced (destroyed or
                    // no longer referenced): nothing to cache any more.
                    _ => &offer.stats.cache_failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(_) => {
            for offer in batch.iter() {
                offer.stats.cache_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    batch.clear();
}
