//! The resolve-ahead threads: a pool of `fqdn.resolveConcurrency` threads,
//! each asking the configured resolvers the one query the pure
//! [`ResolveSchedule`] hands it (one name, one record type), and learning
//! the answer into the shared table and the kernel's FQDN sets like a
//! snooped one. The schedule decides which query goes next (round robin
//! over the policies, within their shares, rates and backoffs), so a slow
//! or failing name holds one thread for at most its timeout, never the
//! others. Each query uses a UDP socket of its own, bound to a
//! kernel-chosen ephemeral port and connected to one resolver (the kernel
//! delivers only that address and port), with a random message id; an
//! answer is used only if its id and question equal the query's. It never
//! blocks policy application (its threads are its own) and never logs per
//! query: a name and type is logged once when it starts going without
//! addresses.
//!
//! ```text
//! → 10.96.0.10:53  id=0x5c1e  www.example.com. IN A
//! ← 10.96.0.10:53  id=0x5c1e  www.example.com. IN A 203.0.113.7 ttl 30
//!   ipset add -exist tollgate-fqdn-…-v4 203.0.113.7 timeout 30
//!   asked again 27 s later, while the selector exists
//! → 10.96.0.10:53  id=0x0e41  www.example.com. IN AAAA   (its own query)
//! ← REFUSED: the A answer stands; AAAA asked again after 30 s, 60 s, …
//! ```
#![allow(clippy::disallowed_methods)] // the resolver thread times its queries and schedule on the clock.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

use super::fqdn_sets::FqdnSets;
use crate::dns::{self, DnsQuery, Resolution};
use crate::fqdn::{
    DnsCounters, FqdnPattern, FqdnTable, QueryType, ResolveBounds, ResolveOutcome, ResolveQuery,
    ResolveSchedule, Source,
};

/// How long one resolver has to answer one query.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait of a thread when nothing is due (they are woken when
/// selectors are added or a query ends).
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// Largest DNS message read (EDNS is not offered: answers fit 512 bytes
/// or come truncated, and the truncated part is used).
const MAX_MESSAGE: usize = 4096;

/// Why a query could not be answered by one resolver.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{name:?} is not a DNS name")]
    Name { name: String },
    #[error("no resolver configured")]
    NoResolver,
    #[error("{server}: {source}")]
    Socket {
        server: SocketAddr,
        source: std::io::Error,
    },
    #[error("{server}: no answer within {timeout:?}")]
    Timeout {
        server: SocketAddr,
        timeout: Duration,
    },
    #[error("{server}: answered with response code {rcode}")]
    Refused { server: SocketAddr, rcode: u16 },
}

/// A resolver's answer to one query.
#[derive(Debug)]
enum Answer {
    Addresses(Vec<Resolution>),
    /// No address of the type: NXDOMAIN or no record; the SOA negative
    /// TTL when the answer carried one.
    Negative {
        nxdomain: bool,
        ttl: Option<u32>,
    },
}

struct Shared {
    schedule: Mutex<ResolveSchedule>,
    /// Signalled when selectors are added or a query ends.
    wake: Condvar,
    table: Arc<FqdnTable>,
    servers: Vec<SocketAddr>,
    /// The resolver that answered last: tried first.
    preferred: AtomicUsize,
    stats: Arc<DnsCounters>,
}

impl Shared {
    fn schedule(&self) -> MutexGuard<'_, ResolveSchedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running resolve-ahead threads (detached, like the workers).
pub struct Resolver {
    shared: Arc<Shared>,
}

impl Resolver {
    /// Opens one ipset socket per thread (an error is returned here) and
    /// starts `bounds.concurrency` threads asking `servers`; no query is
    /// due until [`Resolver::reselect`].
    pub fn spawn(
        servers: Vec<SocketAddr>,
        mut bounds: ResolveBounds,
        table: Arc<FqdnTable>,
        stats: Arc<DnsCounters>,
    ) -> std::io::Result<Resolver> {
        let sets = (0..bounds.concurrency)
            .map(|_| FqdnSets::open().map_err(|e| std::io::Error::other(e.to_string())))
            .collect::<std::io::Result<Vec<_>>>()?;
        // A query asks each resolver in turn: it is lost only well after.
        let asking = RESOLVE_TIMEOUT.as_millis() as u64 * servers.len().max(1) as u64;
        bounds.lease_ms = bounds.lease_ms.max(asking.saturating_mul(2));
        let shared = Arc::new(Shared {
            schedule: Mutex::new(ResolveSchedule::new(bounds)),
            wake: Condvar::new(),
            table,
            servers,
            preferred: AtomicUsize::new(0),
            stats,
        });
        for (i, sets) in sets.into_iter().enumerate() {
            let thread = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("fqdn-resolve-{i}"))
                .spawn(move || run(&thread, sets))?;
        }
        Ok(Resolver { shared })
    }

    /// Resolves the exact names of `owned` (a policy and a selector of its
    /// rules, whose kernel sets exist): new ones at once; names of gone
    /// selectors are no longer asked.
    pub fn reselect<P: AsRef<str>>(&self, owned: &[(P, &FqdnPattern)]) {
        let now = self.shared.table.millis(Instant::now());
        if self.shared.schedule().reselect(owned, now) {
            self.shared.wake.notify_all();
        }
    }
}

fn run(shared: &Shared, mut sets: FqdnSets) {
    loop {
        let query = next_query(shared);
        let result = resolve(
            &shared.servers,
            &shared.preferred,
            &query,
            RESOLVE_TIMEOUT,
            &shared.stats,
        );
        let now = shared.table.millis(Instant::now());
        let outcome = outcome(shared, &mut sets, &result, now);
        let first = shared.schedule().outcome(&query, outcome, now);
        shared.wake.notify_all();
        if first {
            log_first(&query, &result);
        }
    }
}

/// Waits for the schedule to hand out a query.
fn next_query(shared: &Shared) -> ResolveQuery {
    let mut schedule = shared.schedule();
    loop {
        let now = shared.table.millis(Instant::now());
        if let Some(query) = schedule.next(now) {
            return query;
        }
        let wait = schedule
            .next_due(now)
            .map_or(IDLE_WAIT, |at| {
                Duration::from_millis(at.saturating_sub(now))
            })
            .clamp(Duration::from_millis(1), IDLE_WAIT);
        schedule = shared
            .wake
            .wait_timeout(schedule, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Learns what `result` taught (table, kernel sets, counters) and says
/// how it went for the schedule.
fn outcome(
    shared: &Shared,
    sets: &mut FqdnSets,
    result: &Result<Answer, ResolveError>,
    now: u64,
) -> ResolveOutcome {
    let stats = &shared.stats;
    let count = |counter: &std::sync::atomic::AtomicU64| counter.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(Answer::Addresses(resolutions)) => {
            count(&stats.resolved);
            let learned = shared
                .table
                .learn_answers(resolutions, Source::Resolved, now);
            stats
                .resolve_learned
                .fetch_add(learned.learned, Ordering::Relaxed);
            stats.learned.fetch_add(learned.learned, Ordering::Relaxed);
            stats
                .refreshed
                .fetch_add(learned.refreshed, Ordering::Relaxed);
            stats.evicted.fetch_add(learned.evicted, Ordering::Relaxed);
            stats.addresses.store(learned.addresses, Ordering::Relaxed);
            if sets.write(&learned.writes).is_err() {
                count(&stats.ipset_errors);
            }
            ResolveOutcome::Answered {
                min_ttl_secs: resolutions.iter().map(|r| r.ttl).min().unwrap_or(0),
            }
        }
        Ok(Answer::Negative { nxdomain, ttl }) => {
            count(if *nxdomain {
                &stats.resolve_nxdomain
            } else {
                &stats.resolve_nodata
            });
            ResolveOutcome::Negative { ttl_secs: *ttl }
        }
        Err(ResolveError::Refused { .. }) => {
            count(&stats.resolve_refused);
            ResolveOutcome::Negative { ttl_secs: None }
        }
        Err(ResolveError::Timeout { .. }) => {
            count(&stats.resolve_timeout);
            ResolveOutcome::Failed
        }
        Err(_) => {
            count(&stats.resolve_failed);
            ResolveOutcome::Failed
        }
    }
}

/// The one line for a query that starts going without addresses: a
/// missing record of one type is ordinary (debug), a missing name worth
/// knowing (info), no usable answer a warning.
fn log_first(query: &ResolveQuery, result: &Result<Answer, ResolveError>) {
    let (name, qtype) = (query.name.as_str(), query.qtype.as_str());
    match result {
        Ok(Answer::Addresses(_)) => {}
        Ok(Answer::Negative {
            nxdomain: false, ..
        }) => {
            tracing::debug!(name, qtype, "an fqdn selector has no record of this type");
        }
        Ok(Answer::Negative { nxdomain: true, .. }) => {
            tracing::info!(
                name,
                qtype,
                "an fqdn selector does not exist (NXDOMAIN); asking again with backoff"
            );
        }
        Err(error) => {
            tracing::warn!(name, qtype, %error, "resolving an fqdn selector failed; retrying with backoff");
        }
    }
}

/// Asks `servers` for `query`, starting with the one that answered last
/// (`preferred`, updated), so a dead resolver costs its timeout once, not
/// on every query; the first that answers wins.
fn resolve(
    servers: &[SocketAddr],
    preferred: &AtomicUsize,
    query: &ResolveQuery,
    timeout: Duration,
    stats: &DnsCounters,
) -> Result<Answer, ResolveError> {
    let mut last = ResolveError::NoResolver;
    for i in rotation(servers.len(), preferred.load(Ordering::Relaxed)) {
        let Some(&server) = servers.get(i) else {
            continue;
        };
        match ask(server, query, timeout, stats) {
            Ok(answer) => {
                preferred.store(i, Ordering::Relaxed);
                return Ok(answer);
            }
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Indices `0..len`, starting at `first`.
fn rotation(len: usize, first: usize) -> impl Iterator<Item = usize> {
    (0..len).map(move |i| (first + i) % len)
}

/// One query of `record_type` for `name` with a random id: its wire form
/// and what its answer must echo.
fn query(name: &str, record_type: RecordType) -> Result<(Vec<u8>, DnsQuery), ResolveError> {
    let bad = || ResolveError::Name { name: name.into() };
    let id = getrandom::u32().map_err(|_| bad())? as u16;
    let qname = Name::from_ascii(format!("{name}.")).map_err(|_| bad())?;
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(qname, record_type));
    let wire = message.to_vec().map_err(|_| bad())?;
    let asked = dns::parse_query(&wire).map_err(|_| bad())?;
    Ok((wire, asked))
}

/// Asks `server` for `query` on a fresh connected socket.
fn ask(
    server: SocketAddr,
    query: &ResolveQuery,
    timeout: Duration,
    stats: &DnsCounters,
) -> Result<Answer, ResolveError> {
    let io = |source| ResolveError::Socket { server, source };
    let record_type = match query.qtype {
        QueryType::A => RecordType::A,
        QueryType::Aaaa => RecordType::AAAA,
    };
    let (wire, asked) = self::query(&query.name, record_type)?;
    let local: SocketAddr = match server.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).map_err(io)?;
    socket.connect(server).map_err(io)?;
    socket.send(&wire).map_err(io)?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ResolveError::Timeout { server, timeout });
        }
        socket.set_read_timeout(Some(left)).map_err(io)?;
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ResolveError::Timeout { server, timeout })
            }
            Err(e) => return Err(io(e)),
        };
        let Some(bytes) = buf.get(..n) else { continue };
        match dns::parse_reply(bytes) {
            Ok(reply) if reply.query() == &asked => {
                let resolutions = reply.resolved();
                return Ok(if resolutions.is_empty() {
                    Answer::Negative {
                        nxdomain: reply.nxdomain(),
                        ttl: reply.negative_ttl(),
                    }
                } else {
                    Answer::Addresses(resolutions)
                });
            }
            Err(dns::DnsError::UnusableResponseCode { rcode })
                if Message::from_vec(bytes).is_ok_and(|m| m.metadata.id == asked.id) =>
            {
                // Only an answer to ours fails the server.
                return Err(ResolveError::Refused { server, rcode });
            }
            _ => {
                stats.resolve_mismatched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The nameservers of a resolv.conf text (port 53), in order; entries
/// that are not plain addresses (a scoped `fe80::1%eth0`) are skipped.
pub fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next()?.parse::<IpAddr>().ok())
                .flatten()
        })
        .map(|ip| SocketAddr::new(ip, crate::fqdn::DNS_PORT))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_are_read_in_order_and_odd_entries_skipped() {
        let text = "# comment\nsearch example.test\nnameserver 10.0.0.2\n\
                    nameserver fe80::1%eth0\nnameserver  fd00::53 \noptions ndots:5\nnameserver\n";
        assert_eq!(
            nameservers(text),
            [
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[fd00::53]:53".parse().unwrap()
            ]
        );
    }

    /// A resolver on loopback that answers `queries` queries, each after
    /// the messages `forge` makes from it (and the right answer from
    /// another port, which must never be delivered); `answer` makes the
    /// reply.
    fn fake_resolver(
        queries: usize,
        answer: impl Fn(&Message) -> Message + Send + 'static,
        forge: impl Fn(&Message) -> Vec<Message> + Send + 'static,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            for _ in 0..queries {
                let (n, from) = socket.recv_from(&mut buf).unwrap();
                let query = Message::from_vec(&buf[..n]).unwrap();
                let reply = answer(&query).to_vec().unwrap();
                other.send_to(&reply, from).unwrap();
                for forged in forge(&query) {
                    socket.send_to(&forged.to_vec().unwrap(), from).unwrap();
                }
                socket.send_to(&reply, from).unwrap();
            }
        });
        (address, thread)
    }

    /// The reply to `query` with `records` (type by address family).
    fn reply(query: &Message, records: &[(&str, u32)]) -> Message {
        use hickory_proto::rr::rdata::{A, AAAA};
        use hickory_proto::rr::{RData, Record};
        let question = query.queries[0].clone();
        let mut reply = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
        reply.add_query(question.clone());
        for (address, ttl) in records {
            let data = match address.parse::<IpAddr>().unwrap() {
                IpAddr::V4(v4) => RData::A(A(v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
            };
            reply.add_answer(Record::from_rdata(question.name.clone(), *ttl, data));
        }
        reply
    }

    fn q(name: &str, qtype: QueryType) -> ResolveQuery {
        ResolveQuery {
            name: name.into(),
            qtype,
        }
    }

    #[test]
    fn answers_count_only_when_id_question_and_server_match() {
        use hickory_proto::rr::rdata::A;
        use hickory_proto::rr::{RData, Record};
        let (server, thread) = fake_resolver(
            2,
            |query| match query.queries[0].query_type {
                RecordType::A => reply(query, &[("192.0.2.7", 30)]),
                _ => reply(query, &[("2001:db8::7", 40)]),
            },
            |query| {
                let forged = |id, name: &str| {
                    let mut m = Message::new(id, MessageType::Response, OpCode::Query);
                    let name = Name::from_ascii(name).unwrap();
                    m.add_query(Query::query(name.clone(), query.queries[0].query_type));
                    m.add_answer(Record::from_rdata(
                        name,
                        86_400,
                        RData::A(A::new(203, 0, 113, 66)),
                    ));
                    m
                };
                vec![
                    forged(query.metadata.id.wrapping_add(1), "www.example.test."),
                    forged(query.metadata.id, "evil.example.test."),
                ]
            },
        );
        let stats = DnsCounters::default();
        let timeout = Duration::from_secs(5);
        let mut got = Vec::new();
        for qtype in QueryType::BOTH {
            match ask(server, &q("www.example.test", qtype), timeout, &stats).unwrap() {
                Answer::Addresses(resolutions) => got.extend(resolutions),
                other => panic!("{other:?}"),
            }
        }
        thread.join().unwrap();
        let addresses: Vec<(IpAddr, u32)> = got.iter().map(|r| (r.address, r.ttl)).collect();
        assert_eq!(
            addresses,
            [
                ("192.0.2.7".parse::<IpAddr>().unwrap(), 30),
                ("2001:db8::7".parse().unwrap(), 40)
            ]
        );
        assert!(got.iter().all(|r| r.names == ["www.example.test"]));
        // Two forged messages per query; the other port's never arrived.
        assert_eq!(stats.resolve_mismatched.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn each_record_type_is_its_own_query_and_answer() {
        use hickory_proto::op::ResponseCode;
        use hickory_proto::rr::rdata::SOA;
        use hickory_proto::rr::{RData, Record};
        // A answered, AAAA refused (dnsmasq without an upstream); then a
        // missing name with an SOA, then a name without AAAA records.
        let (server, thread) = fake_resolver(
            4,
            |query| {
                let name = query.queries[0].name.to_ascii();
                let mut m = match (name.as_str(), query.queries[0].query_type) {
                    ("a-only.test.", RecordType::A) => reply(query, &[("192.0.2.9", 60)]),
                    _ => reply(query, &[]),
                };
                match name.as_str() {
                    "a-only.test." if query.queries[0].query_type == RecordType::AAAA => {
                        m.metadata.response_code = ResponseCode::Refused;
                    }
                    "gone.test." => {
                        m.metadata.response_code = ResponseCode::NXDomain;
                        m.add_authority(Record::from_rdata(
                            Name::from_ascii("test.").unwrap(),
                            600,
                            RData::SOA(SOA::new(
                                Name::from_ascii("ns.test.").unwrap(),
                                Name::from_ascii("admin.test.").unwrap(),
                                1,
                                3600,
                                600,
                                86_400,
                                120,
                            )),
                        ));
                    }
                    _ => {}
                }
                m
            },
            |_| Vec::new(),
        );
        let stats = DnsCounters::default();
        let timeout = Duration::from_secs(5);
        let a = ask(server, &q("a-only.test", QueryType::A), timeout, &stats);
        assert!(
            matches!(&a, Ok(Answer::Addresses(r)) if r.len() == 1 && r[0].ttl == 60),
            "{a:?}"
        );
        let aaaa = ask(server, &q("a-only.test", QueryType::Aaaa), timeout, &stats);
        assert!(
            matches!(aaaa, Err(ResolveError::Refused { rcode: 5, .. })),
            "{aaaa:?}"
        );
        let gone = ask(server, &q("gone.test", QueryType::A), timeout, &stats);
        assert!(
            matches!(
                gone,
                Ok(Answer::Negative {
                    nxdomain: true,
                    ttl: Some(120)
                })
            ),
            "{gone:?}"
        );
        let nodata = ask(server, &q("v4.test", QueryType::Aaaa), timeout, &stats);
        assert!(
            matches!(
                nodata,
                Ok(Answer::Negative {
                    nxdomain: false,
                    ttl: None
                })
            ),
            "{nodata:?}"
        );
        thread.join().unwrap();
        assert_eq!(stats.resolve_mismatched.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_silent_or_refusing_resolver_is_an_error_in_time() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let stats = DnsCounters::default();
        let started = Instant::now();
        let timeout = Duration::from_millis(300);
        let query = q("a.test", QueryType::A);
        let error = ask(silent.local_addr().unwrap(), &query, timeout, &stats).unwrap_err();
        assert!(matches!(error, ResolveError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nothing listening: ICMP port unreachable ends it at once.
        let closed = silent.local_addr().unwrap();
        drop(silent);
        let error = ask(closed, &query, Duration::from_secs(5), &stats).unwrap_err();
        assert!(matches!(error, ResolveError::Socket { .. }), "{error}");
        let preferred = AtomicUsize::new(0);
        let error = resolve(&[], &preferred, &query, timeout, &stats).unwrap_err();
        assert!(matches!(error, ResolveError::NoResolver), "{error}");
    }

    #[test]
    fn resolvers_are_tried_from_the_last_that_answered() {
        assert_eq!(rotation(3, 0).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(rotation(3, 2).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(rotation(0, 0).count(), 0);
    }

    #[test]
    fn queries_carry_random_ids_and_the_asked_question() {
        let (wire, asked) = query("www.example.test", RecordType::AAAA).unwrap();
        assert_eq!(dns::parse_query(&wire).unwrap(), asked);
        assert_eq!(asked.questions[0].name, "www.example.test");
        assert_eq!(asked.questions[0].qtype, u16::from(RecordType::AAAA));
        let ids: std::collections::BTreeSet<u16> = (0..16)
            .map(|_| query("a.test", RecordType::A).unwrap().1.id)
            .collect();
        assert!(ids.len() > 8, "{ids:?}");
        assert!(query("bad name with spaces..", RecordType::A).is_err());
    }
}
