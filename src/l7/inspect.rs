//! Per-connection stream following and request decisions. Each tracked
//! connection keeps a [`RequestTracker`], the L7 requirements in force
//! when its first request arrived, and the next client sequence number
//! expected; state lives in an LRU map with a capacity and an idle
//! timeout. Pure: time is passed in, nothing here sends or logs.
//!
//! Segment handling (the stream is only ever advanced in order):
//! - in order: fed to the tracker, and passed unless a request is denied;
//! - entirely before the expected sequence number (a retransmission of
//!   bytes already inspected and passed): passed without being fed again;
//! - overlapping the expected sequence number: only the new bytes are fed;
//! - after a gap: held (dropped without closing), so the client
//!   retransmits and the bytes arrive in order.
//!
//! A connection whose state is gone (evicted, idle too long, or the agent
//! restarted) is reset on its next payload: tollgate never starts
//! inspecting in the middle of a stream.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::classify::NoFqdn;
use crate::compile::{RuleRef, Ruleset};
use crate::config::L7DenyResponse;
use crate::flow::{Flow, Verdict};
use crate::http::{HttpEvent, HttpRule, Malformed, RequestHead, RequestTracker};

use super::segment::{FlowKey, Segment};

/// One L7 rule that decided the connection: every request must match one
/// of its `http` alternatives.
#[derive(Clone, Debug)]
pub struct Requirement {
    pub rule: Arc<RuleRef>,
    alternatives: Vec<HttpRule>,
}

impl Requirement {
    /// The rule's `http` entries; `tls` entries allow no HTTP request.
    pub fn new(rule: Arc<RuleRef>) -> Requirement {
        let alternatives = rule
            .l7
            .iter()
            .filter_map(|p| p.http.as_ref().map(HttpRule::new))
            .collect();
        Requirement { rule, alternatives }
    }

    fn allows(&self, request: &RequestHead) -> bool {
        self.alternatives.iter().any(|rule| rule.matches(request))
    }
}

/// What the policy says about a connection when its first request arrives.
#[derive(Clone, Debug)]
pub enum Admission {
    /// Allowed subject to these L7 rules (at least one).
    Inspect(Vec<Requirement>),
    /// Allowed with no L7 rule deciding (the policy changed since the SYN).
    Allow,
    /// Not allowed any more.
    Deny,
}

/// The policy as the L7 worker asks it. Implemented by the ruleset.
pub trait L7Policy {
    fn admission(&self, flow: &Flow) -> Admission;
}

impl L7Policy for Ruleset {
    fn admission(&self, flow: &Flow) -> Admission {
        let decision = self.classify(flow, &NoFqdn);
        if decision.verdict != Verdict::Allow {
            return Admission::Deny;
        }
        let rules: Vec<Requirement> = [decision.egress.rule(), decision.ingress.rule()]
            .into_iter()
            .flatten()
            .filter(|rule| !rule.l7.is_empty())
            .map(|rule| Requirement::new(Arc::clone(rule)))
            .collect();
        if rules.is_empty() {
            Admission::Allow
        } else {
            Admission::Inspect(rules)
        }
    }
}

/// Whether the connection's mark says its stream is tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamMark {
    /// Accepted at SYN; no payload passed yet.
    New,
    /// Payload has passed: tollgate must hold its state.
    Tracked,
}

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
    /// Tracked connection without state: evicted, idle, or agent restart.
    StateLost,
    /// The policy no longer allows the connection.
    Policy,
}

/// A connection to close, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    pub reason: DenyReason,
    /// `Forbidden` only for a well-formed request that is not allowed.
    pub response: L7DenyResponse,
}

/// What to do with the queued segment.
#[derive(Clone, Debug, PartialEq)]
pub enum L7Action {
    /// Let it through.
    Pass,
    /// Let it through and mark the connection's stream as tracked.
    Start,
    /// Drop it, leaving the connection open (bytes after a gap).
    Hold,
    /// Drop it, answer as [`Denial::response`] says, and close.
    Deny(Denial),
}

/// One request decision, for the audit log.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub request: RequestHead,
    pub allowed: bool,
    /// The rule that denied it, or the first L7 rule that allowed it.
    pub rule: Option<Arc<RuleRef>>,
}

/// The result of one segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    pub action: L7Action,
    pub requests: Vec<RequestRecord>,
}

#[derive(Debug)]
struct FlowState {
    tracker: RequestTracker,
    /// `None`: no L7 rule decides the connection any more; all passes.
    requirements: Option<Arc<[Requirement]>>,
    next_seq: u32,
    last_seen: Instant,
}

/// The L7 inspection state of one worker.
pub struct Inspector {
    flows: LruCache<FlowKey, FlowState>,
    idle_timeout: Duration,
    max_head: usize,
    deny_response: L7DenyResponse,
}

impl Inspector {
    pub fn new(
        max_flows: NonZeroUsize,
        idle_timeout: Duration,
        max_head: usize,
        deny_response: L7DenyResponse,
    ) -> Inspector {
        Inspector {
            flows: LruCache::new(max_flows),
            idle_timeout,
            max_head,
            deny_response,
        }
    }

    /// Connections tracked.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Decides one client→server segment.
    pub fn inspect<P: L7Policy + ?Sized>(
        &mut self,
        segment: &Segment<'_>,
        mark: StreamMark,
        policy: &P,
        now: Instant,
    ) -> Inspection {
        let mut requests = Vec::new();
        let action = if segment.payload.is_empty() {
            L7Action::Pass
        } else {
            match mark {
                StreamMark::New => self.start(segment, policy, now, &mut requests),
                StreamMark::Tracked => self.follow(segment, now, &mut requests),
            }
        };
        if matches!(action, L7Action::Deny(_)) {
            self.flows.pop(&segment.key);
        }
        Inspection { action, requests }
    }

    /// First payload of a connection: state is created (replacing any left
    /// by an earlier connection with the same addresses and ports).
    fn start<P: L7Policy + ?Sized>(
        &mut self,
        segment: &Segment<'_>,
        policy: &P,
        now: Instant,
        requests: &mut Vec<RequestRecord>,
    ) -> L7Action {
        let requirements = match policy.admission(&segment.key.flow()) {
            Admission::Deny => return self.deny(DenyReason::Policy),
            Admission::Allow => None,
            Admission::Inspect(rules) => Some(Arc::from(rules)),
        };
        let mut state = FlowState {
            tracker: RequestTracker::new(self.max_head),
            requirements,
            next_seq: segment.seq,
            last_seen: now,
        };
        match self.advance(&mut state, segment.payload, requests) {
            Some(denial) => L7Action::Deny(denial),
            None => {
                state.next_seq = segment.seq.wrapping_add(segment.payload.len() as u32);
                self.flows.push(segment.key, state);
                L7Action::Start
            }
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
        let action = if start > 0 {
            L7Action::Hold
        } else if end <= 0 {
            L7Action::Pass
        } else {
            // `end` > 0 new bytes at the tail of the payload.
            let fresh = &segment.payload[segment.payload.len() - end as usize..];
            match self.advance(&mut state, fresh, requests) {
                Some(denial) => return L7Action::Deny(denial),
                None => {
                    state.next_seq = state.next_seq.wrapping_add(end as u32);
                    L7Action::Pass
                }
            }
        };
        state.last_seen = now;
        self.flows.push(segment.key, state);
        action
    }

    /// Feeds in-order bytes; returns the denial if one is due.
    fn advance(
        &self,
        state: &mut FlowState,
        bytes: &[u8],
        requests: &mut Vec<RequestRecord>,
    ) -> Option<Denial> {
        let Some(requirements) = &state.requirements else {
            return None;
        };
        for event in state.tracker.feed(bytes) {
            let request = match event {
                HttpEvent::Request(request) => request,
                HttpEvent::NotHttp => return Some(self.reset(DenyReason::NotHttp)),
                HttpEvent::Oversized => return Some(self.reset(DenyReason::Oversized)),
                HttpEvent::Malformed(why) => return Some(self.reset(DenyReason::Malformed(why))),
            };
            match requirements.iter().find(|r| !r.allows(&request)) {
                Some(failed) => {
                    requests.push(RequestRecord {
                        request: request.clone(),
                        allowed: false,
                        rule: Some(Arc::clone(&failed.rule)),
                    });
                    return Some(Denial {
                        reason: DenyReason::Request {
                            request,
                            rule: Arc::clone(&failed.rule),
                        },
                        response: self.deny_response,
                    });
                }
                None => requests.push(RequestRecord {
                    request,
                    allowed: true,
                    rule: requirements.first().map(|r| Arc::clone(&r.rule)),
                }),
            }
        }
        None
    }

    fn reset(&self, reason: DenyReason) -> Denial {
        Denial {
            reason,
            response: L7DenyResponse::Reset,
        }
    }

    fn deny(&self, reason: DenyReason) -> L7Action {
        L7Action::Deny(self.reset(reason))
    }
}
