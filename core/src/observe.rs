//! `tollgate observe`'s pure part: what one decision of a worker is when
//! it leaves the worker ([`Observed`]: copied, never formatted there), the
//! event a client reads ([`FlowEvent`], its endpoints named from the
//! ruleset in force), which events a client asked for ([`ObserveFilter`])
//! and the bounded history of the latest decisions ([`History`]). No I/O,
//! no clock, no channel: the agent moves the records.

use std::collections::VecDeque;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::audit::Timestamp;
use crate::http::RequestHead;
use crate::packet::flow::{Flow, Verdict};
use crate::ruleset::{DecidedBy, Ruleset};

/// One decision as a worker hands it over: a copy of the flow, the
/// verdict and the rule (an `Arc`), stamped with the time.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub time: Timestamp,
    pub flow: Flow,
    pub verdict: Verdict,
    pub by: DecidedBy,
    /// The HTTP request an L7 rule decided; `None` for a connection.
    pub request: Option<Box<RequestHead>>,
}

/// One side of an observed flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSide {
    pub address: IpAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The inventory endpoint: `namespace/name`, or `node:NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The HTTP request of an L7 decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSummary {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub path: String,
}

/// A decision as `tollgate observe` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowEvent {
    /// RFC 3339, UTC, microseconds.
    pub time: String,
    /// `Allow`, `Drop` or `Reject`.
    pub verdict: String,
    /// `TCP`, `UDP`, `SCTP`, `ICMP`, `IGMP`, `IP`.
    pub protocol: String,
    pub src: FlowSide,
    pub dst: FlowSide,
    /// The deciding rule's policy (`AntreaClusterNetworkPolicy:name`),
    /// `K8sNetworkPolicy` for the default drop of an isolated Pod; `None`
    /// when no rule decided (allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// `Ingress` or `Egress`: the direction of the deciding rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// The HTTP request, for a decision of the L7 worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSummary>,
}

impl FlowEvent {
    /// `observed` with its endpoints named by `ruleset` (the one in force
    /// when the event is read).
    pub fn of(observed: &Observed, ruleset: &Ruleset) -> FlowEvent {
        let flow = &observed.flow;
        let side = |address: IpAddr, port: Option<u16>| FlowSide {
            address,
            port,
            name: ruleset.name_of(address).map(str::to_string),
        };
        let (policy, rule, tier, direction) = match &observed.by {
            DecidedBy::Rule(rule) => (
                Some(rule.policy.to_string()),
                rule.name.clone(),
                rule.tier.clone(),
                Some(rule.direction.as_str().to_string()),
            ),
            DecidedBy::K8sDefaultDrop => (Some("K8sNetworkPolicy".into()), None, None, None),
            DecidedBy::NoRule => (None, None, None, None),
        };
        FlowEvent {
            time: observed.time.rfc3339(),
            verdict: observed.verdict.to_string(),
            protocol: flow.transport.name().to_string(),
            src: side(flow.src, flow.transport.src_port()),
            dst: side(flow.dst, flow.transport.dst_port()),
            policy,
            rule,
            tier,
            direction,
            http: observed.request.as_ref().map(|r| HttpSummary {
                method: r.method.clone(),
                host: r.host.clone(),
                path: r.path.clone(),
            }),
        }
    }
}

/// Which events a client asked for; every field given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserveFilter {
    /// Verdicts, any case (`drop`, `reject`, `allow`); empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<String>,
    /// Either side is an endpoint in this Namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Either side is this Pod (`namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

impl ObserveFilter {
    pub fn matches(&self, event: &FlowEvent) -> bool {
        let verdict = self.verdicts.is_empty()
            || self
                .verdicts
                .iter()
                .any(|v| v.eq_ignore_ascii_case(&event.verdict));
        let names = [&event.src.name, &event.dst.name];
        let names = names.iter().filter_map(|n| n.as_deref());
        let namespace = self.namespace.as_deref().is_none_or(|ns| {
            names
                .clone()
                .any(|n| n.strip_prefix(ns).is_some_and(|r| r.starts_with('/')))
        });
        let pod = self
            .pod
            .as_deref()
            .is_none_or(|pod| names.clone().any(|n| n == pod));
        verdict && namespace && pod
    }
}

/// The latest decisions, at most `capacity`: the oldest goes when a new
/// one comes.
#[derive(Clone, Debug)]
pub struct History {
    events: VecDeque<Observed>,
    capacity: usize,
}

impl History {
    pub fn new(capacity: usize) -> History {
        History {
            events: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub fn push(&mut self, observed: Observed) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(observed);
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The last `n` events `filter` asks for, oldest first, named by
    /// `ruleset`.
    pub fn latest(&self, n: usize, filter: &ObserveFilter, ruleset: &Ruleset) -> Vec<FlowEvent> {
        let mut found: Vec<FlowEvent> = self
            .events
            .iter()
            .rev()
            .map(|o| FlowEvent::of(o, ruleset))
            .filter(|e| filter.matches(e))
            .take(n)
            .collect();
        found.reverse();
        found
    }
}

#[cfg(test)]
mod tests;
