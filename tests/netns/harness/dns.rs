//! A tiny authoritative DNS server (UDP) for FQDN scenarios, bound inside a
//! lab namespace, and a stub resolver probe. In-process for the same reasons
//! as [`super::server`]: listening before the call returns, exact answers
//! (TTLs, CNAME chains) chosen by the test, and no dnsmasq dependency.
//!
//! Names are matched case-insensitively without the trailing dot; an entry
//! `*.example.test` answers every name under `example.test`. Unknown names
//! get NXDOMAIN; a known name without a record of the asked type gets an
//! empty NOERROR answer, unless the zone says to refuse that type or leave
//! it unanswered. A [`LiveZone`] server ([`DnsServer`]) lets the test
//! change the records while it serves and tells who asked for what.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::netns::Netns;
use super::probe::{wire_error, WireError};

/// One record the server knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsRecord {
    /// An A or AAAA record (by the address family).
    Address { name: String, ip: IpAddr, ttl: u32 },
    /// `name` is an alias of `target`.
    Cname {
        name: String,
        target: String,
        ttl: u32,
    },
    /// Queries of `record_type` for `name` are answered REFUSED (dnsmasq
    /// without an upstream does so for a type it has no record of).
    Refused {
        name: String,
        record_type: RecordType,
    },
    /// Queries of `record_type` for `name` get no answer at all.
    Silent {
        name: String,
        record_type: RecordType,
    },
}

impl DnsRecord {
    pub fn address(name: &str, ip: impl Into<IpAddr>, ttl: u32) -> Self {
        DnsRecord::Address {
            name: normalize(name),
            ip: ip.into(),
            ttl,
        }
    }

    pub fn cname(name: &str, target: &str, ttl: u32) -> Self {
        DnsRecord::Cname {
            name: normalize(name),
            target: normalize(target),
            ttl,
        }
    }

    pub fn refused(name: &str, record_type: RecordType) -> Self {
        DnsRecord::Refused {
            name: normalize(name),
            record_type,
        }
    }

    pub fn silent(name: &str, record_type: RecordType) -> Self {
        DnsRecord::Silent {
            name: normalize(name),
            record_type,
        }
    }

    fn owner(&self) -> &str {
        match self {
            DnsRecord::Address { name, .. }
            | DnsRecord::Cname { name, .. }
            | DnsRecord::Refused { name, .. }
            | DnsRecord::Silent { name, .. } => name,
        }
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether zone entry `owner` (possibly `*.suffix`) covers `name`.
fn covers(owner: &str, name: &str) -> bool {
    match owner.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        None => owner == name,
    }
}

/// Records the test may replace while they are served, and every question
/// the server was asked: `(source address, name)`.
#[derive(Clone, Default)]
pub struct LiveZone {
    records: Arc<Mutex<Vec<DnsRecord>>>,
    asked: Arc<Mutex<Vec<(IpAddr, String)>>>,
}

impl LiveZone {
    pub fn new(records: Vec<DnsRecord>) -> LiveZone {
        LiveZone {
            records: Arc::new(Mutex::new(records)),
            asked: Arc::default(),
        }
    }

    /// Serves `records` from the next query on.
    pub fn set(&self, records: Vec<DnsRecord>) {
        *self.records.lock().expect("zone lock") = records;
    }

    /// The names `source` asked for so far, in order (IPv4 sources as
    /// plain IPv4).
    pub fn asked_by(&self, source: IpAddr) -> Vec<String> {
        self.asked
            .lock()
            .expect("zone lock")
            .iter()
            .filter(|(from, _)| *from == source)
            .map(|(_, name)| name.clone())
            .collect()
    }
}

/// A [`LiveZone`] served on UDP in a namespace; stops when dropped (drop
/// it before the lab, i.e. bind it after the lab).
pub struct DnsServer {
    pub zone: LiveZone,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DnsServer {
    /// Serves `zone` on UDP `port` (all addresses) in `ns`.
    pub fn start(ns: &Netns, port: u16, zone: LiveZone) -> DnsServer {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = serve_live_dns(ns, port, zone.clone(), Arc::clone(&stop));
        DnsServer {
            zone,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `zone` on UDP `port` (all addresses) in `ns` until `stop`.
pub fn serve_dns(
    ns: &Netns,
    port: u16,
    zone: Vec<DnsRecord>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    serve_live_dns(ns, port, LiveZone::new(zone), stop)
}

/// Serves `zone` as it is at each query, noting who asked what.
fn serve_live_dns(ns: &Netns, port: u16, zone: LiveZone, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let socket = ns
        .enter(move || UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))))
        .unwrap_or_else(|e| panic!("bind DNS [::]:{port} in {}: {e}", ns.name()));
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::SeqCst) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            if let Some(name) = Message::from_vec(&buf[..n])
                .ok()
                .and_then(|m| m.queries.first().map(|q| normalize(&q.name.to_ascii())))
            {
                let source = from.ip().to_canonical();
                zone.asked.lock().expect("zone lock").push((source, name));
            }
            let records = zone.records.lock().expect("zone lock").clone();
            if let Some(reply) = answer(&records, &buf[..n]) {
                let _ = socket.send_to(&reply, from);
            }
        }
    })
}

/// The wire reply to query `bytes`, or `None` for something unparseable
/// or a question to leave unanswered.
fn answer(zone: &[DnsRecord], bytes: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(bytes).ok()?;
    let question = query.queries.first()?.clone();
    let mut reply = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_query(question.clone());

    let mut name = normalize(&question.name.to_ascii());
    for record in zone.iter().filter(|r| covers(r.owner(), &name)) {
        match record {
            DnsRecord::Silent { record_type, .. } if *record_type == question.query_type => {
                return None;
            }
            DnsRecord::Refused { record_type, .. } if *record_type == question.query_type => {
                reply.metadata.response_code = ResponseCode::Refused;
                return reply.to_vec().ok();
            }
            _ => {}
        }
    }
    let mut known = false;
    // Follow CNAMEs within the zone; bounded against loops.
    for _ in 0..8 {
        let entries: Vec<&DnsRecord> = zone.iter().filter(|r| covers(r.owner(), &name)).collect();
        if entries.is_empty() {
            break;
        }
        known = true;
        let owner = Name::from_ascii(format!("{name}.")).ok()?;
        if let Some(DnsRecord::Cname { target, ttl, .. }) = entries
            .iter()
            .find(|r| matches!(r, DnsRecord::Cname { .. }))
            .copied()
        {
            let target_name = Name::from_ascii(format!("{target}.")).ok()?;
            reply.add_answer(Record::from_rdata(
                owner,
                *ttl,
                RData::CNAME(CNAME(target_name)),
            ));
            name = target.clone();
            continue;
        }
        for entry in entries {
            if let DnsRecord::Address { ip, ttl, .. } = entry {
                let rdata = match (ip, question.query_type) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                reply.add_answer(Record::from_rdata(owner.clone(), *ttl, rdata));
            }
        }
        break;
    }
    if !known {
        reply.metadata.response_code = ResponseCode::NXDomain;
    }
    reply.to_vec().ok()
}

/// What a stub resolution returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The addresses of the answer (CNAMEs followed by the server), with
    /// their TTLs.
    Addresses(Vec<(IpAddr, u32)>),
    NxDomain,
    /// No answer before the timeout.
    NoAnswer,
    /// ICMP port unreachable: nothing listens there.
    Refused,
    /// Another ICMP error (host or network unreachable, prohibited).
    Unreachable,
}

/// Asks `server` (UDP) from `ns` for `name`'s records of `record_type`.
pub fn resolve(
    ns: &Netns,
    server: SocketAddr,
    name: &str,
    record_type: RecordType,
    timeout: Duration,
) -> Resolution {
    let qname = Name::from_ascii(format!("{}.", normalize(name))).expect("valid name");
    let mut query = Message::new(0x7a11, MessageType::Query, OpCode::Query);
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(qname, record_type));
    let wire = query.to_vec().expect("encode query");
    let bytes = ns.enter(move || -> std::io::Result<Vec<u8>> {
        let local: SocketAddr = if server.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(server)?;
        socket.set_read_timeout(Some(timeout))?;
        socket.send(&wire)?;
        let mut buf = vec![0u8; 1500];
        let n = socket.recv(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    });
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(e) => {
            return match wire_error(&e, "DNS") {
                WireError::Refused => Resolution::Refused,
                WireError::Unreachable => Resolution::Unreachable,
                WireError::TimedOut => Resolution::NoAnswer,
            }
        }
    };
    let reply = Message::from_vec(&bytes)
        .unwrap_or_else(|e| panic!("unparseable DNS reply from {server}: {e}"));
    if reply.metadata.response_code == ResponseCode::NXDomain {
        return Resolution::NxDomain;
    }
    Resolution::Addresses(
        reply
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some((IpAddr::V4(a.0), r.ttl)),
                RData::AAAA(a) => Some((IpAddr::V6(a.0), r.ttl)),
                _ => None,
            })
            .collect(),
    )
}
