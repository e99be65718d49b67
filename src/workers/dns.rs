//! The DNS queue's handler: snoop (a reply's in-interface checked against
//! the route to its server) → the pure [`FqdnTable::on_packet`] step, which
//! remembers queries and learns from the replies that answer them → its set
//! writes into the [`SetWriteQueue`], which the handler writes over netlink
//! in shared batches after every wake-up's packets (and sooner when it is
//! full) → only then, at each batch's acknowledgement, the release of the
//! replies it covers; expiry (of learned addresses and of unanswered
//! queries) runs on [`Handler::tick`]. Queries over UDP are not queued:
//! their copies arrive on the worker's NFLOG socket ([`QueryLog`]) and go
//! through the same snoop and step. The kernel puts a query's copy in the
//! socket before the query leaves, so before any reply to it is queued:
//! the handler reads the copies waiting before it judges a reply whose id
//! no outstanding query has (and at least every [`READ_EVERY`], so that
//! they do not pile up). A reply whose query's copy was lost (the socket was full) answers
//! no outstanding query: it is released unlearned, and counted apart
//! while a loss is recent. It never drops a packet except a TCP segment
//! after a gap, never releases a reply before its writes are
//! acknowledged, and never logs per packet.
#![allow(clippy::disallowed_methods)] // the DNS worker expires learned addresses on the clock.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fqdn_sets::FqdnSets;
use super::nflog::QueryLog;
use super::nfqueue::Queue;
use super::route::Routes;
use super::runtime::{self, Handler, QueueError, QueueSpec, Verdicts};
use crate::config::FqdnConfig;
use crate::fqdn::{
    Direction, DnsCounters, DnsSnooper, FqdnTable, OutstandingQueries, Pushed, Release, ReplyPath,
    SetWriteQueue, DEFAULT_MAX_TCP_FLOWS, DEFAULT_MAX_TCP_MESSAGE,
};
use crate::marks::FailMode;
use crate::packet::{Action, PacketId, Queued};
use crate::telemetry::Metrics;

/// Bytes copied per queued reply: a whole packet (the kernel segments
/// GSO packets for a queue without the GSO flag).
const DNS_COPY_RANGE: u16 = u16::MAX;
/// Replies the kernel holds; past them it drops new ones (fail-closed, the
/// default) or lets them through unlearned (`datapath.failMode: open`).
const DNS_QUEUE_MAX_LEN: u32 = 4096;
/// Index of `lo` in every network namespace: what a reply made on the node
/// is taken to come in on, and where the route to a local server leaves.
const LOOPBACK_INDEX: u32 = 1;
/// How often the query copies are read at the latest (a reply whose
/// query's copy is unread has them read at once): often enough that
/// copies of unanswered queries do not fill the socket's buffer.
const READ_EVERY: Duration = Duration::from_millis(100);
/// How often the table forgets timed-out entries.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// The running DNS worker thread (detached, like the connection workers).
pub struct DnsWorker {
    pub queue: u16,
    /// Its counters, which the resolve-ahead thread adds to.
    pub stats: Arc<DnsCounters>,
}

impl DnsWorker {
    /// Binds the queue and opens the ipset socket (errors are returned
    /// here), then starts the thread, counting into `stats` (registered by
    /// the agent at its start, so exported before this worker runs).
    pub fn spawn(
        config: &FqdnConfig,
        fail_mode: FailMode,
        table: Arc<FqdnTable>,
        stats: Arc<DnsCounters>,
        metrics: Arc<Metrics>,
    ) -> Result<DnsWorker, QueueError> {
        let queue = config.dns_queue;
        let spec = QueueSpec {
            queue,
            name: "dns",
            copy_range: DNS_COPY_RANGE,
            max_len: DNS_QUEUE_MAX_LEN,
            // A reply let through unlearned leaves an FQDN Drop rule
            // without its address: the queue fails as the datapath does.
            fail_open: fail_mode == FailMode::Open,
            // One DNS message per datagram, read whole.
            gso: false,
            receive_buffer: 0,
        };
        let trusted = config.trusted_servers.clone();
        let bounds = config.query_bounds();
        let write_queue = config.write_queue;
        let (log_group, log_buffer) = (config.dns_log_group, config.query_log_buffer);
        let query_timeout = Duration::from_secs(u64::from(config.query_timeout));
        let handler_stats = Arc::clone(&stats);
        let open = move || {
            let socket = Queue::open(spec)?;
            let sets = FqdnSets::open().map_err(|e| QueueError::Setup {
                queue,
                step: "ipset netlink socket",
                source: std::io::Error::other(e.to_string()),
            })?;
            let routes = Routes::open().map_err(QueueError::setup(
                queue,
                "route netlink sockets (a request and a subscription)",
            ))?;
            let log = QueryLog::open(log_group, log_buffer)
                .map_err(QueueError::setup(
                    queue,
                    "NFLOG group of DNS query copies (fqdn.dnsLogGroup; EPERM: held by another process, or no CAP_NET_ADMIN)",
                ))?;
            let handler = Replies {
                snooper: DnsSnooper::new(
                    trusted.clone(),
                    DEFAULT_MAX_TCP_FLOWS,
                    DEFAULT_MAX_TCP_MESSAGE,
                ),
                queries: OutstandingQueries::new(bounds),
                log,
                lost_at: None,
                last_read: Instant::now(),
                query_timeout,
                routes,
                table: Arc::clone(&table),
                sets,
                writes: SetWriteQueue::new(write_queue),
                stats: Arc::clone(&handler_stats),
                epoch: Instant::now(),
                last_expire: Instant::now(),
            };
            Ok((socket, handler))
        };
        runtime::spawn(open, Arc::clone(&stats) as _, &metrics)?;
        Ok(DnsWorker { queue, stats })
    }
}

/// The handler of the DNS queue.
struct Replies {
    snooper: DnsSnooper,
    queries: OutstandingQueries,
    /// The copies of the queries over UDP.
    log: QueryLog,
    /// When the kernel last reported copies lost.
    lost_at: Option<Instant>,
    /// When the copies were last read.
    last_read: Instant,
    /// How long a lost copy's query could still be answered.
    query_timeout: Duration,
    routes: Routes,
    table: Arc<FqdnTable>,
    sets: FqdnSets,
    /// Replies held for their set writes, and the writes not yet written.
    writes: SetWriteQueue<(PacketId, Action)>,
    stats: Arc<DnsCounters>,
    /// Origin of the write queue's microseconds.
    epoch: Instant,
    last_expire: Instant,
}

impl Replies {
    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// Reads the copies of the queries sent since the last read into the
    /// outstanding queries, through the same snoop and step as a queued
    /// query (only queries: a copy of anything else is ignored).
    fn read_queries(&mut self, now: Instant) {
        self.last_read = now;
        let now_ms = self.table.millis(now);
        let (snooper, queries, table, stats) = (
            &mut self.snooper,
            &mut self.queries,
            &self.table,
            &self.stats,
        );
        let drained = self.log.drain(|copy| {
            // A query is never judged by its path: no route is asked.
            let snooped = snooper.snoop_via(copy.payload, |_| ReplyPath {
                arrived: copy.indev,
                route: None,
            });
            if snooped
                .flow
                .is_some_and(|flow| flow.direction == Direction::Query)
            {
                table
                    .on_packet(&snooped, queries, now_ms)
                    .counts
                    .add_to(stats);
            }
        });
        self.stats
            .query_copies
            .fetch_add(drained.copies, Ordering::Relaxed);
        // A copy that does not read as NFLOG is a query not understood.
        self.stats
            .queries_failed
            .fetch_add(drained.unreadable, Ordering::Relaxed);
        if drained.lost {
            self.stats.query_copies_lost.fetch_add(1, Ordering::Relaxed);
            self.lost_at = Some(now);
        }
    }

    /// Whether copies were lost recently enough that a query among them
    /// may still be answered.
    fn recent_loss(&self, now: Instant) -> bool {
        self.lost_at
            .is_some_and(|at| now.saturating_duration_since(at) < self.query_timeout)
    }

    /// Writes every queued set write, one batch per `sendmsg`, and
    /// releases the replies each acknowledged batch covers.
    fn flush(&mut self, out: &mut Verdicts) {
        while let Some(batch) = self.writes.next_batch() {
            if self.sets.write(&batch.writes).is_err() {
                self.stats.ipset_errors.fetch_add(1, Ordering::Relaxed);
            }
            let now = self.micros(Instant::now());
            for (id, action) in self.writes.acknowledged(batch, now) {
                out.give(id, action);
            }
        }
        self.writes.take_counts().add_to(&self.stats);
    }
}

impl Handler for Replies {
    fn packet(&mut self, packet: Queued<'_>, now: Instant, out: &mut Verdicts) {
        let routes = &mut self.routes;
        let snooped = self.snooper.snoop_via(packet.payload, |server| ReplyPath {
            // Made on the node (OUTPUT): as if from `lo`.
            arrived: match packet.indev {
                0 => LOOPBACK_INDEX,
                indev => indev,
            },
            route: routes.output_interface(server),
        });
        // A reply to a query whose copy is still unread: read the copies
        // first (the kernel wrote it before the query left).
        if let Some(flow) = snooped
            .flow
            .filter(|flow| flow.direction == Direction::Reply)
        {
            if !self.queries.awaits_all(&flow, &snooped.messages) {
                self.read_queries(now);
            }
        }
        let step = self
            .table
            .on_packet(&snooped, &mut self.queries, self.table.millis(now));
        step.counts.add_to(&self.stats);
        if step.counts.unasked > 0 && self.recent_loss(now) {
            self.stats
                .unasked_after_loss
                .fetch_add(step.counts.unasked, Ordering::Relaxed);
        }
        let action = match step.release {
            Release::Accept => Action::Accept,
            Release::Drop => Action::Drop,
        };
        // Back-pressure: a reply whose writes do not fit waits for the
        // queue to be written first.
        if self.writes.must_wait(step.writes.len()) {
            self.flush(out);
        }
        let held = self.micros(now);
        if let Pushed::Release((id, action)) =
            self.writes.push((packet.id, action), step.writes, held)
        {
            out.give(id, action);
        }
    }

    /// After every wake-up's packets: their writes, in shared batches,
    /// then the release of the replies they cover.
    fn tick(&mut self, now: Instant, out: &mut Verdicts) {
        self.flush(out);
        if now.saturating_duration_since(self.last_read) >= READ_EVERY {
            self.read_queries(now);
        }
        if now.saturating_duration_since(self.last_expire) < EXPIRE_EVERY {
            return;
        }
        self.last_expire = now;
        let now_ms = self.table.millis(now);
        let unanswered = self.queries.expire(now_ms);
        self.stats
            .queries_unanswered
            .fetch_add(unanswered as u64, Ordering::Relaxed);
        self.stats
            .outstanding
            .store(self.queries.len() as u64, Ordering::Relaxed);
        let expired = self.table.expire(now_ms);
        self.stats
            .expired
            .fetch_add(expired.expired, Ordering::Relaxed);
        self.stats
            .addresses
            .store(expired.addresses, Ordering::Relaxed);
    }
}
