//! Per-connection stream following and request decisions. Each tracked
//! connection keeps what its client stream is (HTTP, followed by a
//! [`RequestTracker`]; or TLS, whose ClientHello server name is matched
//! against `tls` rules), the L7 requirements in force at its handshake,
//! and the next client sequence number expected; state lives in an LRU
//! map with a capacity and an idle timeout. Pure: time is passed in,
//! nothing here sends or logs.
//!
//! Urgent data: a client segment with URG set or a non-zero urgent pointer
//! (even without payload: the pointer may name a later byte) resets the
//! connection ([`UrgentData::Reset`]) before anything of it is followed, or
//! is followed as the in-band bytes it carries and accepted with URG and
//! the pointer cleared ([`UrgentData::Strip`], [`Inspection::rewrite`]), so
//! the server reads exactly the stream inspected.
//!
//! Normalisation: tollgate judges the bytes the server will accept and
//! nothing else. Before anything of a segment is read, one the receiver
//! would throw away is dropped, the connection left as it was
//! ([`L7Action::Discard`]): what the segment alone shows
//! ([`Segment::discard`]: checksum, TCP options, IP extensions, flags),
//! and, on a connection with state, a timestamp older than the newest its
//! client sent (PAWS; the first is the one the server's SYN-ACK echoes) or
//! an acknowledgment older than the newest (the first: the SYN-ACK's
//! sequence number + 1), both counted only from segments let through. A
//! RST is not held to the last two (a receiver judges it by its sequence
//! number). What the receiver decides from state tollgate never sees (the
//! timestamp of a pure ACK kept in the kernel, an acknowledgment of data
//! the server never sent, a full receive window) is covered by pinning:
//! every byte already judged, passed or withheld, may only come again
//! unchanged, so whichever copy the server keeps is the judged one.
//!
//! Segment handling (the stream is only ever advanced in order):
//! - in order: fed to the tracker. A segment that leaves a request head
//!   incomplete is *deferred* (its verdict withheld) until the head is
//!   complete; then every deferred segment is released together, or
//!   dropped with the rest if the request is denied. So no byte of a
//!   denied request head ever reaches the server;
//!   Deferral keeps denied heads out of the server entirely (not even a
//!   partial head reaches it) as long as the client can send the whole
//!   head without acknowledgments (its congestion window: 10 segments on
//!   a new Linux connection);
//! - entirely before the expected sequence number: a copy of bytes
//!   already judged (passed or deferred) is not fed again, and must repeat
//!   them: Content-Length body bytes may differ (their content changes
//!   nothing), any other byte must come in a remembered segment repeated
//!   whole and unchanged (keyed hash), or the connection is reset. (The
//!   server may never have kept the original: beyond its window, or a
//!   segment it discarded for a reason tollgate cannot see; an altered copy
//!   would be a request tollgate never judged.) A faithful copy of passed
//!   bytes passes. One of bytes still deferred is dropped when it comes
//!   soon (a tail loss probe); after [`STALL`] it means the client is
//!   stalled waiting for their acknowledgment, and the deferred segments
//!   are released with it (a partial head holds no request; the rest is
//!   still decided before it passes);
//! - overlapping the expected sequence number: the old bytes are checked as
//!   above, only the new ones are fed;
//! - after a gap: dropped without closing, so the client retransmits and
//!   the bytes arrive in order.
//!
//! State is created from the server's SYN-ACK, never from payload: a
//! connection whose state is gone (evicted, idle too long, the agent
//! restarted) is reset on its next payload, so tollgate never starts
//! inspecting in the middle of a stream.
//!
//! State ends with the connection: the client's RST forgets it at once; its
//! FIN after [`CLOSE_GRACE`] (a retransmission of the FIN's payload still
//! finds it; a bare FIN passes without state); a connection that falls
//! silent after [`Inspector::sweep`] finds it idle past the idle timeout.
//! So the table holds the connections that are open, not every connection
//! ever inspected.

use std::collections::VecDeque;
use std::hash::RandomState;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::fqdn::FqdnLookup;
use crate::http::{Ambiguity, FramingPolicy, HttpEvent, Malformed, RequestHead, RequestTracker};
use crate::l7::DenyResponse as L7DenyResponse;
use crate::l7::UrgentData;
use crate::packet::flow::{Flow, LocalSide};
use crate::ruleset::{Endpoint, RuleRef};
use crate::tls::{client_hello_sni, TlsError, MAX_CLIENT_HELLO};

use crate::packet::segment::{Discard, FlowKey, Rewrite, Segment};

use super::admission::{Admission, L7Policy, Requirement};
use super::judged::Judged;
pub use super::judged::{BODY_RANGES_KEPT, SENSITIVE_KEPT};

/// Why a connection is closed.
#[derive(Clone, Debug, PartialEq)]
pub enum DenyReason {
    /// A request no alternative of this rule allows.
    Request {
        request: RequestHead,
        rule: Arc<RuleRef>,
    },
    NotHttp,
    Oversized,
    Malformed(Malformed),
    /// Payload on a connection without state: evicted, idle, agent
    /// restart, or data before the handshake completed.
    StateLost,
    /// One request head sent in more than [`MAX_DEFERRED`] segments.
    TooManySegments,
    /// A ClientHello whose server name no `tls` alternative of this rule
    /// allows.
    ServerName {
        sni: Option<String>,
        rule: Arc<RuleRef>,
    },
    /// A TLS stream whose ClientHello cannot be read.
    Tls(TlsError),
    /// A copy of judged bytes (passed or deferred) that are not
    /// Content-Length body does not repeat them exactly (or cannot be
    /// checked).
    Retransmission,
    /// The policy no longer allows the connection.
    Policy,
    /// A request strict framing refuses (its head, when it was read, is in
    /// the [`RequestRecord`]).
    Framing {
        why: Ambiguity,
        rule: Arc<RuleRef>,
    },
    /// A client segment with urgent data ([`UrgentData::Reset`]).
    UrgentData,
}

/// A connection to close, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    pub reason: DenyReason,
    /// `Forbidden` only for a well-formed request that is not allowed.
    pub response: L7DenyResponse,
    /// Sequence number of the first byte the server has not been given
    /// (the first deferred byte, or the first new byte of the denied
    /// segment): the one it expects next. `None`: the segment's own.
    pub unsent_from: Option<u32>,
}

/// What to do with the queued segment.
#[derive(Clone, Debug, PartialEq)]
pub enum L7Action {
    /// Let it through.
    Pass,
    /// Keep its verdict back: it carries part of an incomplete head.
    Defer,
    /// Let every deferred segment of the connection through, in order,
    /// then this one: the head they carried is complete and allowed.
    Release,
    /// Drop it, leaving the connection open (bytes after a gap).
    Hold,
    /// Drop it unread, leaving the connection as it was: its receiver
    /// would throw it away.
    Discard(Discard),
    /// Drop it and every deferred segment, answer as
    /// [`Denial::response`] says, and close.
    Deny(Denial),
}

/// What an audit line says beyond the rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Detail {
    /// A request refused by strict framing.
    Framing(Ambiguity),
    /// A segment with urgent data: the connection reset, or (`stripped`)
    /// URG and the urgent pointer cleared.
    UrgentData { stripped: bool },
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detail::Framing(why) => write!(f, "{why}"),
            Detail::UrgentData { stripped: false } => f.write_str("urgent data: reset"),
            Detail::UrgentData { stripped: true } => f.write_str("urgent data: URG cleared"),
        }
    }
}

/// One request decision (or urgent-data event), for the metrics and the
/// audit log.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    /// `None` when no head was read (a refusal before it, urgent data).
    pub request: Option<RequestHead>,
    pub allowed: bool,
    /// Why, beyond the rule, when more than the rule decided.
    pub detail: Option<Detail>,
    /// The rule that denied it, or the first L7 rule that allowed it, and
    /// the endpoint that rule applies to.
    pub rule: Option<(Arc<RuleRef>, Option<Endpoint>)>,
}

/// The result of one segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    pub action: L7Action,
    pub requests: Vec<RequestRecord>,
    /// The change to make to the segment if it is accepted, now or when
    /// released (urgent data under [`UrgentData::Strip`]).
    pub rewrite: Option<Rewrite>,
}

/// Most segments deferred for one connection; a head sent in more pieces
/// is reset (bounds what one client can keep in the kernel's queue).
pub const MAX_DEFERRED: usize = 32;

/// How long deferred bytes must have waited before their retransmission
/// is read as a stalled client (a retransmission timeout, at least 200 ms
/// on Linux) rather than a tail loss probe (from 10 ms), which is dropped.
pub const STALL: Duration = Duration::from_millis(150);

/// How long the state of a connection whose client sent FIN is kept for
/// retransmissions of its last segments. The client sends no new bytes
/// after FIN; a copy of its last payload retransmitted after this is reset.
pub const CLOSE_GRACE: Duration = Duration::from_secs(30);

/// What the policy said when the handshake was seen.
#[derive(Debug)]
enum Access {
    /// Every request must satisfy these rules.
    Rules(Arc<[Requirement]>),
    /// No L7 rule decides the connection any more: everything passes.
    Unrestricted,
    /// The policy no longer allows the connection: reset on first payload.
    Denied,
}

/// What the client stream turned out to be.
#[derive(Debug)]
enum Stream {
    /// No payload yet.
    Unknown,
    Http(RequestTracker),
    /// A TLS handshake (first byte 22, and a `tls` rule applies): the
    /// ClientHello collected so far.
    Tls(Vec<u8>),
    /// The ClientHello was allowed: the rest is encrypted and passes.
    Allowed,
}

/// TLS record type of a handshake: how a TLS client stream starts.
const TLS_HANDSHAKE: u8 = 22;

#[derive(Debug)]
struct FlowState {
    judged: Judged,
    stream: Stream,
    access: Access,
    next_seq: u32,
    /// The newest acknowledgment the client sent on a segment let through
    /// (at first the SYN-ACK's sequence number + 1).
    acked: u32,
    /// The newest timestamp (`TSval`) the client sent on a segment let
    /// through (at first its SYN's, which the SYN-ACK echoes); `None`: the
    /// connection does not use timestamps.
    timestamp: Option<u32>,
    last_seen: Instant,
    /// When the client's FIN was seen.
    closed_at: Option<Instant>,
    /// Sequence number of the first deferred byte, segments deferred, and
    /// when the first was.
    deferred: Option<(u32, usize, Instant)>,
}

impl FlowState {
    /// Why the receiver would discard `segment` given what the client
    /// sent before: a timestamp or an acknowledgment older than the
    /// newest. A RST is judged by its sequence number alone.
    fn stale(&self, segment: &Segment<'_>) -> Option<Discard> {
        if segment.rst {
            return None;
        }
        let older = |newest: u32, value: u32| newest.wrapping_sub(value) as i32 > 0;
        let paws = match (self.timestamp, segment.timestamp) {
            (Some(newest), Some(ts)) => older(newest, ts.value),
            _ => false,
        };
        if paws {
            Some(Discard::Paws)
        } else if older(self.acked, segment.ack) {
            Some(Discard::StaleAck)
        } else {
            None
        }
    }

    /// Notes what a segment let through shows: its client's newest
    /// timestamp and acknowledgment.
    fn let_through(&mut self, segment: &Segment<'_>) {
        let newer = |newest: u32, value: u32| value.wrapping_sub(newest) as i32 > 0;
        if let (Some(newest), Some(ts)) = (self.timestamp, segment.timestamp) {
            if newer(newest, ts.value) {
                self.timestamp = Some(ts.value);
            }
        }
        if newer(self.acked, segment.ack) {
            self.acked = segment.ack;
        }
    }

    /// The rule an urgent-data event is audited under: the first L7 rule
    /// of the connection.
    fn first_rule(&self) -> Option<(Arc<RuleRef>, Option<Endpoint>)> {
        match &self.access {
            Access::Rules(rules) => rules
                .first()
                .map(|r| (Arc::clone(&r.rule), r.endpoint.clone())),
            Access::Unrestricted | Access::Denied => None,
        }
    }
}

/// The L7 inspection state of one worker.
pub struct Inspector {
    /// Least recently seen first: the order [`Inspector::sweep`] expires in.
    /// Unbounded for the `lru` crate, which would allocate room for
    /// `max_flows` up front (2 MiB per worker at the default 65,536, on
    /// every node, L7 rules or none): [`Inspector::handshake`] keeps it at
    /// `max_flows`, and it grows with the connections inspected.
    flows: LruCache<FlowKey, FlowState>,
    max_flows: NonZeroUsize,
    /// Connections whose client sent FIN, in the order of their FIN (at
    /// most one entry per tracked connection).
    closing: VecDeque<(Instant, FlowKey)>,
    /// Keyed per process, so retransmission checks cannot be steered.
    hasher: RandomState,
    idle_timeout: Duration,
    max_head: usize,
    deny_response: L7DenyResponse,
    urgent: UrgentData,
    framing: FramingPolicy,
}

impl Inspector {
    pub fn new(
        max_flows: NonZeroUsize,
        idle_timeout: Duration,
        max_head: usize,
        deny_response: L7DenyResponse,
    ) -> Inspector {
        Inspector {
            flows: LruCache::unbounded(),
            max_flows,
            closing: VecDeque::new(),
            hasher: RandomState::new(),
            idle_timeout,
            max_head,
            deny_response,
            urgent: UrgentData::default(),
            framing: FramingPolicy::default(),
        }
    }

    /// Sets what urgent data gets and how strictly requests are framed
    /// (by default: reset, strict).
    pub fn normalising(mut self, urgent: UrgentData, framing: FramingPolicy) -> Inspector {
        self.urgent = urgent;
        self.framing = framing;
        self
    }

    /// Drops a connection's state: its next payload resets it.
    pub fn forget(&mut self, key: &FlowKey) {
        self.flows.pop(key);
    }

    /// Connections tracked.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The server's SYN-ACK of a connection under L7 rules (`local`: the
    /// side of the client→server flow that is the Node itself): state is
    /// created fresh (replacing any left by an earlier connection with the
    /// same addresses and ports), expecting the client's first byte at the
    /// SYN-ACK's acknowledgment number, acknowledgments from its sequence
    /// number + 1 on, and timestamps from the one it echoes (if it carries
    /// one: the connection uses them). The policy (with the FQDN names
    /// learned so far) is asked here, once per connection. The client
    /// cannot send an acceptable byte before this SYN-ACK reaches it, so no
    /// payload of this connection can be seen before its state exists.
    /// Returns the connection whose state was dropped to make room, or
    /// replaced (its deferred segments must be dropped).
    pub fn handshake<P: L7Policy + ?Sized>(
        &mut self,
        syn_ack: &Segment<'_>,
        local: Option<LocalSide>,
        (policy, fqdn): (&P, &dyn FqdnLookup),
        now: Instant,
    ) -> Option<FlowKey> {
        let key = syn_ack.key.reversed();
        let flow = Flow {
            local,
            ..key.flow()
        };
        let access = match policy.admission(&flow, fqdn) {
            Admission::Deny => Access::Denied,
            Admission::Allow => Access::Unrestricted,
            Admission::Inspect(rules) => Access::Rules(Arc::from(rules)),
        };
        let state = FlowState {
            judged: Judged::default(),
            stream: Stream::Unknown,
            access,
            next_seq: syn_ack.ack,
            acked: syn_ack.seq.wrapping_add(1),
            timestamp: syn_ack.timestamp.map(|ts| ts.echo),
            last_seen: now,
            closed_at: None,
            deferred: None,
        };
        let full = !self.flows.contains(&key) && self.flows.len() >= self.max_flows.get();
        let evicted = full.then(|| self.flows.pop_lru()).flatten();
        self.flows.push(key, state).or(evicted).map(|(old, _)| old)
    }

    /// Decides one client→server segment.
    pub fn inspect(&mut self, segment: &Segment<'_>, now: Instant) -> Inspection {
        let stale = || self.flows.peek(&segment.key)?.stale(segment);
        if let Some(reason) = segment.discard.or_else(stale) {
            return Inspection {
                action: L7Action::Discard(reason),
                requests: Vec::new(),
                rewrite: None,
            };
        }
        let mut requests = Vec::new();
        let mut rewrite = None;
        if segment.urgent {
            let state = self.flows.peek(&segment.key);
            let stripped = self.urgent == UrgentData::Strip;
            requests.push(RequestRecord {
                request: None,
                allowed: stripped,
                detail: Some(Detail::UrgentData { stripped }),
                rule: state.and_then(FlowState::first_rule),
            });
            if stripped {
                rewrite = Some(Rewrite::ClearUrgent);
            }
        }
        let action = if segment.urgent && self.urgent == UrgentData::Reset {
            let unsent_from = self
                .flows
                .peek(&segment.key)
                .and_then(|state| state.deferred)
                .map(|(from, _, _)| from);
            L7Action::Deny(Denial {
                unsent_from,
                ..self.reset(DenyReason::UrgentData)
            })
        } else if segment.payload.is_empty() {
            L7Action::Pass
        } else {
            self.follow(segment, now, &mut requests)
        };
        if matches!(action, L7Action::Deny(_)) || segment.rst {
            self.flows.pop(&segment.key);
        } else if let Some(state) = self.flows.peek_mut(&segment.key) {
            if matches!(action, L7Action::Pass | L7Action::Defer | L7Action::Release) {
                state.let_through(segment);
            }
            if segment.fin && state.closed_at.is_none() {
                state.closed_at = Some(now);
                self.closing.push_back((now, segment.key));
            }
        }
        Inspection {
            action,
            requests,
            rewrite,
        }
    }

    /// Forgets connections closed by their client more than
    /// [`CLOSE_GRACE`] ago and connections idle past the idle timeout,
    /// calling `forgotten` for each (their deferred segments must be
    /// dropped). Cheap when nothing is due: call it after every segment.
    pub fn sweep(&mut self, now: Instant, mut forgotten: impl FnMut(FlowKey)) {
        while let Some(&(closed_at, key)) = self.closing.front() {
            if now.saturating_duration_since(closed_at) < CLOSE_GRACE {
                break;
            }
            self.closing.pop_front();
            // Unless a new connection with the same addresses took its place.
            if self.flows.peek(&key).and_then(|s| s.closed_at) == Some(closed_at) {
                self.flows.pop(&key);
                forgotten(key);
            }
        }
        while let Some((&key, state)) = self.flows.peek_lru() {
            if now.saturating_duration_since(state.last_seen) <= self.idle_timeout {
                break;
            }
            self.flows.pop_lru();
            forgotten(key);
        }
    }

    fn follow(
        &mut self,
        segment: &Segment<'_>,
        now: Instant,
        requests: &mut Vec<RequestRecord>,
    ) -> L7Action {
        let idle_timeout = self.idle_timeout;
        let Some(mut state) = self.flows.pop(&segment.key) else {
            return self.deny(DenyReason::StateLost);
        };
        if now.saturating_duration_since(state.last_seen) > idle_timeout {
            return self.deny(DenyReason::StateLost);
        }
        let len = segment.payload.len() as u32;
        // Signed distances in sequence space (RFC 1982 style).
        let start = segment.seq.wrapping_sub(state.next_seq) as i32;
        let end = segment.seq.wrapping_add(len).wrapping_sub(state.next_seq) as i32;
        // Bytes before the expected sequence number were judged (passed,
        // or deferred): a copy must repeat them. A deferred original may
        // never reach the server (it may discard it for a reason tollgate
        // cannot see), so its copy is held to it like a passed one.
        let old_len = (state.next_seq.wrapping_sub(segment.seq) as i32).clamp(0, len as i32);
        let old = &segment.payload[..old_len as usize];
        if !old.is_empty() && !state.judged.repeats(segment.seq, old, &self.hasher) {
            // The server expects the first deferred byte (or the next).
            let unsent_from = state.deferred.map_or(state.next_seq, |(from, _, _)| from);
            return L7Action::Deny(Denial {
                unsent_from: Some(unsent_from),
                ..self.reset(DenyReason::Retransmission)
            });
        }
        let action = if start > 0 {
            L7Action::Hold
        } else if end <= 0 {
            let repeats_deferred = state.deferred.and_then(|(from, _, since)| {
                let overlaps = segment.seq.wrapping_add(len).wrapping_sub(from) as i32 > 0;
                overlaps.then(|| now.saturating_duration_since(since))
            });
            match repeats_deferred {
                None => L7Action::Pass,
                // A tail loss probe: the original is still held.
                Some(waited) if waited < STALL => L7Action::Hold,
                // A retransmission timeout: the client waits for the
                // deferred bytes' acknowledgment (its window is full) and
                // would never send the rest of the head. Release them:
                // they hold no complete request, and the rest of the head
                // is still decided before it passes.
                Some(_) => {
                    state.deferred = None;
                    L7Action::Release
                }
            }
        } else {
            // `end` > 0 new bytes at the tail of the payload.
            let fresh = &segment.payload[segment.payload.len() - end as usize..];
            let fresh_seq = state.next_seq;
            let sensitive = match (&state.access, &state.stream) {
                (Access::Unrestricted, _) | (_, Stream::Allowed) => false,
                (_, Stream::Http(tracker)) => tracker
                    .body_remaining()
                    .is_none_or(|left| left < fresh.len() as u64),
                _ => true,
            };
            let incomplete = match self.advance(&mut state, fresh, requests) {
                Ok(incomplete) => incomplete,
                Err(mut denial) => {
                    let from = state.deferred.map_or(fresh_seq, |(from, _, _)| from);
                    denial.unsent_from = Some(from);
                    return L7Action::Deny(denial);
                }
            };
            state.next_seq = state.next_seq.wrapping_add(end as u32);
            if sensitive {
                state
                    .judged
                    .record_sensitive(segment.seq, segment.payload, &self.hasher);
            } else {
                state.judged.record_body(fresh_seq, state.next_seq);
            }
            if incomplete {
                // Part of a head is still missing: keep this segment back.
                let (from, count, since) = state.deferred.unwrap_or((fresh_seq, 0, now));
                if count + 1 > MAX_DEFERRED {
                    let mut denial = self.reset(DenyReason::TooManySegments);
                    denial.unsent_from = Some(from);
                    return L7Action::Deny(denial);
                }
                state.deferred = Some((from, count + 1, since));
                L7Action::Defer
            } else if state.deferred.take().is_some() {
                L7Action::Release
            } else {
                L7Action::Pass
            }
        };
        state.last_seen = now;
        self.flows.push(segment.key, state);
        action
    }

    /// Feeds in-order bytes. Returns whether a head (or ClientHello) is
    /// left incomplete, or the denial that is due.
    fn advance(
        &self,
        state: &mut FlowState,
        bytes: &[u8],
        requests: &mut Vec<RequestRecord>,
    ) -> Result<bool, Denial> {
        let rules = match &state.access {
            Access::Rules(rules) => rules,
            Access::Unrestricted => return Ok(false),
            Access::Denied => return Err(self.reset(DenyReason::Policy)),
        };
        if matches!(state.stream, Stream::Unknown) {
            let tls_rule = rules.iter().any(|r| !r.tls.is_empty());
            state.stream = if tls_rule && bytes.first() == Some(&TLS_HANDSHAKE) {
                Stream::Tls(Vec::new())
            } else {
                Stream::Http(RequestTracker::with_framing(
                    self.max_head,
                    self.framing.clone(),
                ))
            };
        }
        match &mut state.stream {
            Stream::Unknown | Stream::Allowed => Ok(false),
            Stream::Tls(hello) => {
                hello.extend_from_slice(bytes);
                let sni = match client_hello_sni(hello) {
                    Err(TlsError::Incomplete) if hello.len() <= MAX_CLIENT_HELLO + 64 => {
                        return Ok(true)
                    }
                    Err(TlsError::Incomplete) => {
                        let max = MAX_CLIENT_HELLO;
                        let len = hello.len();
                        return Err(self.reset(DenyReason::Tls(TlsError::TooLarge { len, max })));
                    }
                    Err(error) => return Err(self.reset(DenyReason::Tls(error))),
                    Ok(sni) => sni,
                };
                if let Some(failed) = rules.iter().find(|r| !r.allows_sni(sni.as_deref())) {
                    return Err(self.reset(DenyReason::ServerName {
                        sni,
                        rule: Arc::clone(&failed.rule),
                    }));
                }
                state.stream = Stream::Allowed;
                Ok(false)
            }
            Stream::Http(tracker) => {
                for event in tracker.feed(bytes) {
                    let request = match event {
                        HttpEvent::Request(request) => request,
                        HttpEvent::NotHttp => return Err(self.reset(DenyReason::NotHttp)),
                        HttpEvent::Oversized => return Err(self.reset(DenyReason::Oversized)),
                        HttpEvent::Malformed(why) => {
                            return Err(self.reset(DenyReason::Malformed(why)))
                        }
                        HttpEvent::Ambiguous { request, why } => {
                            // `Admission::Inspect` holds at least one rule.
                            let Some(first) = rules.first() else {
                                return Err(self.reset(DenyReason::Policy));
                            };
                            requests.push(RequestRecord {
                                request,
                                allowed: false,
                                detail: Some(Detail::Framing(why.clone())),
                                rule: Some((Arc::clone(&first.rule), first.endpoint.clone())),
                            });
                            return Err(Denial {
                                reason: DenyReason::Framing {
                                    why,
                                    rule: Arc::clone(&first.rule),
                                },
                                response: self.deny_response,
                                unsent_from: None,
                            });
                        }
                    };
                    match rules.iter().find(|r| !r.allows(&request)) {
                        Some(failed) => {
                            requests.push(RequestRecord {
                                request: Some(request.clone()),
                                allowed: false,
                                detail: None,
                                rule: Some((Arc::clone(&failed.rule), failed.endpoint.clone())),
                            });
                            return Err(Denial {
                                reason: DenyReason::Request {
                                    request,
                                    rule: Arc::clone(&failed.rule),
                                },
                                response: self.deny_response,
                                unsent_from: None,
                            });
                        }
                        None => requests.push(RequestRecord {
                            request: Some(request),
                            allowed: true,
                            detail: None,
                            rule: rules
                                .first()
                                .map(|r| (Arc::clone(&r.rule), r.endpoint.clone())),
                        }),
                    }
                }
                Ok(tracker.buffered() > 0)
            }
        }
    }

    fn reset(&self, reason: DenyReason) -> Denial {
        Denial {
            reason,
            response: L7DenyResponse::Reset,
            unsent_from: None,
        }
    }

    fn deny(&self, reason: DenyReason) -> L7Action {
        L7Action::Deny(self.reset(reason))
    }
}
