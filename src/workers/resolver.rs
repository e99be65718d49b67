//! The resolve-ahead thread: asks the configured resolvers for the exact
//! names the pure [`ResolveSchedule`] says are due, and learns the answers
//! into the shared table and the kernel's FQDN sets like snooped ones. Each
//! resolution uses a UDP socket of its own, bound to a kernel-chosen
//! ephemeral port and connected to one resolver (the kernel delivers only
//! that address and port), with random message ids; an answer is used only
//! if its id and question equal a query sent on it. It never blocks policy
//! application (it runs on its own thread) and never logs per query: a
//! name is logged once when it starts failing.
//!
//! ```text
//! → 10.96.0.10:53  id=0x5c1e  www.example.com. IN A     (and AAAA)
//! ← 10.96.0.10:53  id=0x5c1e  www.example.com. IN A 203.0.113.7 ttl 30
//!   ipset add -exist tollgate-fqdn-…-v4 203.0.113.7 timeout 30
//!   asked again 27 s later, while the selector exists
//! ```
#![allow(clippy::disallowed_methods)] // the resolver thread times its queries and schedule on the clock.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

use super::fqdn_sets::FqdnSets;
use crate::dns::{self, DnsQuery, Resolution};
use crate::fqdn::DnsCounters;
use crate::fqdn::{FqdnPattern, FqdnTable, ResolveBounds, ResolveOutcome, ResolveSchedule, Source};

/// How long one resolver has to answer both queries of a name.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait of the thread when nothing is due (it is woken when
/// selectors are added).
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// Largest DNS message read (EDNS is not offered: answers fit 512 bytes
/// or come truncated, and the truncated part is used).
const MAX_MESSAGE: usize = 4096;

/// Why a name could not be resolved by one resolver.
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

struct Shared {
    schedule: Mutex<ResolveSchedule>,
    wake: Condvar,
    table: Arc<FqdnTable>,
}

impl Shared {
    fn schedule(&self) -> MutexGuard<'_, ResolveSchedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running resolve-ahead thread (detached, like the workers).
pub struct Resolver {
    shared: Arc<Shared>,
}

impl Resolver {
    /// Opens the ipset socket (its error is returned here) and starts the
    /// thread asking `servers`; no name is due until
    /// [`Resolver::reselect`].
    pub fn spawn(
        servers: Vec<SocketAddr>,
        bounds: ResolveBounds,
        table: Arc<FqdnTable>,
        stats: Arc<DnsCounters>,
    ) -> std::io::Result<Resolver> {
        let sets = FqdnSets::open().map_err(|e| std::io::Error::other(e.to_string()))?;
        let shared = Arc::new(Shared {
            schedule: Mutex::new(ResolveSchedule::new(bounds)),
            wake: Condvar::new(),
            table,
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("fqdn-resolver".into())
            .spawn(move || run(&thread, &servers, sets, &stats))?;
        Ok(Resolver { shared })
    }

    /// Resolves the exact names of `selectors` (whose kernel sets exist):
    /// new ones at once; names of gone selectors are no longer asked.
    pub fn reselect(&self, selectors: &[FqdnPattern]) {
        let now = self.shared.table.millis(Instant::now());
        if self.shared.schedule().reselect(selectors, now) {
            self.shared.wake.notify_one();
        }
    }
}

fn run(shared: &Shared, servers: &[SocketAddr], mut sets: FqdnSets, stats: &DnsCounters) {
    let mut preferred = 0;
    loop {
        let due = {
            let mut schedule = shared.schedule();
            loop {
                let now = shared.table.millis(Instant::now());
                let due = schedule.due(now);
                if !due.is_empty() {
                    break due;
                }
                let wait = schedule
                    .next_due()
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
        };
        for name in due {
            let result = resolve(servers, &mut preferred, &name, RESOLVE_TIMEOUT, stats);
            let now = shared.table.millis(Instant::now());
            let outcome = match result {
                Ok(resolutions) => {
                    stats.resolved.fetch_add(1, Ordering::Relaxed);
                    let learned = shared
                        .table
                        .learn_answers(&resolutions, Source::Resolved, now);
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
                        stats.ipset_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    ResolveOutcome::Answered {
                        min_ttl_secs: resolutions.iter().map(|r| r.ttl).min(),
                    }
                }
                Err(error) => {
                    stats.resolve_failed.fetch_add(1, Ordering::Relaxed);
                    if shared
                        .schedule()
                        .outcome(&name, ResolveOutcome::Failed, now)
                    {
                        tracing::warn!(name, %error, "resolving an fqdn selector failed; retrying with backoff");
                    }
                    continue;
                }
            };
            shared.schedule().outcome(&name, outcome, now);
        }
    }
}

/// Asks `servers` for `name`'s A and AAAA records, starting with the one
/// that answered last (`preferred`, updated), so a dead resolver costs its
/// timeout once, not on every name; the first that answers wins.
fn resolve(
    servers: &[SocketAddr],
    preferred: &mut usize,
    name: &str,
    timeout: Duration,
    stats: &DnsCounters,
) -> Result<Vec<Resolution>, ResolveError> {
    let mut last = ResolveError::NoResolver;
    for i in rotation(servers.len(), *preferred) {
        let Some(&server) = servers.get(i) else {
            continue;
        };
        match ask(server, name, timeout, stats) {
            Ok(resolutions) => {
                *preferred = i;
                return Ok(resolutions);
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

/// Asks `server` for `name`'s A and AAAA records on a fresh connected
/// socket. Succeeds when both are answered, or one is and the time is up.
fn ask(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
    stats: &DnsCounters,
) -> Result<Vec<Resolution>, ResolveError> {
    let io = |source| ResolveError::Socket { server, source };
    let mut pending = Vec::new();
    let mut wires = Vec::new();
    for record_type in [RecordType::A, RecordType::AAAA] {
        let (wire, asked) = query(name, record_type)?;
        wires.push(wire);
        pending.push(asked);
    }
    let local: SocketAddr = match server.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).map_err(io)?;
    socket.connect(server).map_err(io)?;
    for wire in &wires {
        socket.send(wire).map_err(io)?;
    }
    let deadline = Instant::now() + timeout;
    let mut resolutions = Vec::new();
    let mut answered = false;
    let mut buf = vec![0u8; MAX_MESSAGE];
    while !pending.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        socket.set_read_timeout(Some(left)).map_err(io)?;
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) => return Err(io(e)),
        };
        let Some(bytes) = buf.get(..n) else { continue };
        match dns::parse_reply(bytes) {
            Ok(reply) => match pending.iter().position(|q| q == reply.query()) {
                Some(i) => {
                    pending.swap_remove(i);
                    answered = true;
                    resolutions.extend(reply.resolved());
                }
                None => {
                    stats.resolve_mismatched.fetch_add(1, Ordering::Relaxed);
                }
            },
            Err(dns::DnsError::UnusableResponseCode { rcode }) => {
                // Only an answer to one of ours fails the server.
                let ours = Message::from_vec(bytes)
                    .is_ok_and(|m| pending.iter().any(|q| q.id == m.metadata.id));
                if ours {
                    return Err(ResolveError::Refused { server, rcode });
                }
                stats.resolve_mismatched.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                stats.resolve_mismatched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if answered {
        Ok(resolutions)
    } else {
        Err(ResolveError::Timeout { server, timeout })
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

    /// A resolver on loopback that answers each query of `ask` after the
    /// `forged` messages `forge` makes from it (and one from another port).
    fn fake_resolver(
        forge: impl Fn(&Message) -> Vec<Message> + Send + 'static,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        use hickory_proto::rr::rdata::{A, AAAA};
        use hickory_proto::rr::{RData, Record};
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            for _ in 0..2 {
                let (n, from) = socket.recv_from(&mut buf).unwrap();
                let query = Message::from_vec(&buf[..n]).unwrap();
                let question = query.queries[0].clone();
                let mut reply =
                    Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
                reply.add_query(question.clone());
                let data = match question.query_type {
                    RecordType::A => RData::A(A::new(192, 0, 2, 7)),
                    _ => RData::AAAA(AAAA::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7)),
                };
                reply.add_answer(Record::from_rdata(question.name.clone(), 30, data));
                // The right answer from another port first: never delivered.
                other.send_to(&reply.to_vec().unwrap(), from).unwrap();
                for forged in forge(&query) {
                    socket.send_to(&forged.to_vec().unwrap(), from).unwrap();
                }
                socket.send_to(&reply.to_vec().unwrap(), from).unwrap();
            }
        });
        (address, thread)
    }

    #[test]
    fn answers_count_only_when_id_question_and_server_match() {
        use hickory_proto::rr::rdata::A;
        use hickory_proto::rr::{RData, Record};
        let (server, thread) = fake_resolver(|query| {
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
        });
        let stats = DnsCounters::default();
        let got = ask(server, "www.example.test", Duration::from_secs(5), &stats).unwrap();
        thread.join().unwrap();
        let addresses: Vec<IpAddr> = got.iter().map(|r| r.address).collect();
        assert_eq!(
            addresses,
            [
                "192.0.2.7".parse::<IpAddr>().unwrap(),
                "2001:db8::7".parse().unwrap()
            ]
        );
        assert!(got
            .iter()
            .all(|r| r.names == ["www.example.test"] && r.ttl == 30));
        // Two forged messages per query; the other port's never arrived.
        assert_eq!(stats.resolve_mismatched.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_silent_or_refusing_resolver_is_an_error_in_time() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let stats = DnsCounters::default();
        let started = Instant::now();
        let timeout = Duration::from_millis(300);
        let error = ask(silent.local_addr().unwrap(), "a.test", timeout, &stats).unwrap_err();
        assert!(matches!(error, ResolveError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nothing listening: ICMP port unreachable ends it at once.
        let closed = silent.local_addr().unwrap();
        drop(silent);
        let error = ask(closed, "a.test", Duration::from_secs(5), &stats).unwrap_err();
        assert!(matches!(error, ResolveError::Socket { .. }), "{error}");
        let mut preferred = 0;
        let error = resolve(&[], &mut preferred, "a.test", timeout, &stats).unwrap_err();
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
