//! The queries clients sent and have not had answered yet
//! ([`OutstandingQueries`]): a reply is learned from only if it answers one
//! (same transport, client and server address and port, message id and
//! question section), and each query is answered once. Bounded in count
//! (the least recently asked is forgotten first) and in time. Pure: time
//! is passed in, nothing here sees a packet or a socket.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use lru::LruCache;

use crate::dns::{DnsQuery, Question};

/// Default bound on outstanding queries: at ~150 bytes each, ~10 MiB.
pub const DEFAULT_MAX_OUTSTANDING_QUERIES: usize = 65_536;
/// Default time a query waits for its answer: longer than any stub
/// resolver waits (glibc 5 s per try, dig 5 s) or a recursive resolver
/// works on one question.
pub const DEFAULT_QUERY_TIMEOUT_SECS: u32 = 30;

/// The transport a DNS message travelled on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Which way a message went: to the server (port 53) or back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Query,
    Reply,
}

/// The conversation a DNS message belongs to, from the client's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DnsFlow {
    pub transport: Transport,
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub direction: Direction,
}

/// What identifies a query among those outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct QueryKey {
    transport: Transport,
    client: SocketAddr,
    server: SocketAddr,
    id: u16,
}

impl QueryKey {
    fn new(flow: &DnsFlow, id: u16) -> QueryKey {
        QueryKey {
            transport: flow.transport,
            client: flow.client,
            server: flow.server,
            id,
        }
    }
}

struct Pending {
    questions: Vec<Question>,
    expires_ms: u64,
}

/// How a reply relates to the outstanding queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// It answers an outstanding query, which is now forgotten.
    Matched,
    /// No query with its id is outstanding on its flow (never asked,
    /// answered already, timed out or forgotten at the bound).
    Unasked,
    /// A query with its id is outstanding on its flow, but it asked
    /// another question; the query stays outstanding.
    OtherQuestion,
}

/// Bounds of the outstanding-query table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryBounds {
    pub max_outstanding: usize,
    pub timeout_secs: u32,
}

impl Default for QueryBounds {
    fn default() -> Self {
        QueryBounds {
            max_outstanding: DEFAULT_MAX_OUTSTANDING_QUERIES,
            timeout_secs: DEFAULT_QUERY_TIMEOUT_SECS,
        }
    }
}

/// Outstanding queries, least recently asked first out.
pub struct OutstandingQueries {
    pending: LruCache<QueryKey, Pending>,
    timeout_ms: u64,
}

impl OutstandingQueries {
    pub fn new(bounds: QueryBounds) -> OutstandingQueries {
        OutstandingQueries {
            pending: LruCache::new(
                NonZeroUsize::new(bounds.max_outstanding).unwrap_or(NonZeroUsize::MIN),
            ),
            timeout_ms: u64::from(bounds.timeout_secs) * 1000,
        }
    }

    /// Queries outstanding (some may have timed out since the last
    /// [`expire`](OutstandingQueries::expire)).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Remembers `query`, sent on `flow` at `now_ms` (a retransmission
    /// with the same id restarts its wait). Returns whether another query
    /// was forgotten to stay within the bound.
    pub fn asked(&mut self, flow: &DnsFlow, query: DnsQuery, now_ms: u64) -> bool {
        let key = QueryKey::new(flow, query.id);
        let pending = Pending {
            questions: query.questions,
            expires_ms: now_ms.saturating_add(self.timeout_ms),
        };
        matches!(self.pending.push(key, pending), Some((old, _)) if old != key)
    }

    /// Forgets the queries whose wait ended by `now_ms`. Every query waits
    /// as long, so the least recently asked end first: this stops at the
    /// first one still waiting.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let mut expired = 0;
        while self
            .pending
            .peek_lru()
            .is_some_and(|(_, p)| p.expires_ms <= now_ms)
        {
            self.pending.pop_lru();
            expired += 1;
        }
        expired
    }

    /// Whether every message of `replies` (carried on `flow`) has the id
    /// of a query outstanding on its flow: if not, a query it answers may
    /// not have been read yet. Changes nothing (the least recently asked
    /// stays first).
    pub fn awaits_all(&self, flow: &DnsFlow, replies: &[Vec<u8>]) -> bool {
        replies.iter().all(|message| match message.as_slice() {
            [high, low, ..] => self
                .pending
                .contains(&QueryKey::new(flow, u16::from_be_bytes([*high, *low]))),
            _ => false,
        })
    }

    /// Whether `reply` (carried on `flow`) answers an outstanding query at
    /// `now_ms`; a matched query is forgotten, so a second reply to it is
    /// [`Answered::Unasked`].
    pub fn answered(&mut self, flow: &DnsFlow, reply: &DnsQuery, now_ms: u64) -> Answered {
        let key = QueryKey::new(flow, reply.id);
        let Some(pending) = self.pending.peek(&key) else {
            return Answered::Unasked;
        };
        if pending.expires_ms <= now_ms {
            self.pending.pop(&key);
            return Answered::Unasked;
        }
        if pending.questions != reply.questions {
            return Answered::OtherQuestion;
        }
        self.pending.pop(&key);
        Answered::Matched
    }
}

#[cfg(test)]
mod tests;
