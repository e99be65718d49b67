//! Resolving exact FQDN selectors ahead ([`ResolveSchedule`]): which
//! queries tollgate asks its resolvers itself, and when. Each record type
//! of a name (A, AAAA) is a query of its own, with its own refresh time
//! and backoff: asked at once when a selector appears, again shortly
//! before the addresses learned from its last answer time out, and after
//! an answer without addresses (NXDOMAIN, no record, an error code) or no
//! answer at all with exponential backoff up to a cap (at least the SOA
//! negative TTL). Queries are handed out one at a time to a bounded
//! number of resolving threads, round robin over the policies that select
//! the names, each policy within its share of the threads, queries of
//! names that got no answer within half of them, retries of negative
//! answers within their own small rate, everything within a global rate:
//! slow names of one policy cannot hold back another's refresh, and a
//! policy of many bad names costs the resolver little. Wildcards cannot
//! be asked for and stay snoop-only. Pure: time is passed in (table
//! milliseconds); it sends no query and never reads the clock.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use super::FqdnPattern;

/// Whether exact selectors are resolved ahead (`fqdn.resolve`). YAML reads
/// a bare `off` as `false`, which is taken as `off` too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FqdnResolve {
    /// Exact names are resolved when their selector appears and kept
    /// fresh; snooped answers are learned on top.
    #[default]
    Exact,
    /// Snooping only: an address is learned when a client looks it up.
    Off,
}

/// `fqdn.resolve` is neither `exact` nor `off`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: fqdn.resolve is exact or off")]
pub struct UnknownResolve {
    pub value: String,
}

impl FromStr for FqdnResolve {
    type Err = UnknownResolve;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exact" => Ok(FqdnResolve::Exact),
            "off" => Ok(FqdnResolve::Off),
            _ => Err(UnknownResolve { value: s.into() }),
        }
    }
}

impl<'de> Deserialize<'de> for FqdnResolve {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Flag(bool),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Flag(false) => Ok(FqdnResolve::Off),
            Raw::Flag(true) => Err(serde::de::Error::custom(
                "fqdn.resolve is exact or off, not true",
            )),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl fmt::Display for FqdnResolve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FqdnResolve::Exact => "exact",
            FqdnResolve::Off => "off",
        })
    }
}

/// A record type tollgate asks for; each stands alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueryType {
    A,
    Aaaa,
}

impl QueryType {
    pub const BOTH: [QueryType; 2] = [QueryType::A, QueryType::Aaaa];

    pub fn as_str(self) -> &'static str {
        match self {
            QueryType::A => "A",
            QueryType::Aaaa => "AAAA",
        }
    }

    fn index(self) -> usize {
        match self {
            QueryType::A => 0,
            QueryType::Aaaa => 1,
        }
    }
}

impl fmt::Display for QueryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One query to send: a name and a record type.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolveQuery {
    pub name: String,
    pub qtype: QueryType,
}

/// Default of `fqdn.resolveConcurrency`: queries in flight at most.
pub const DEFAULT_RESOLVE_CONCURRENCY: usize = 8;
/// Default of `fqdn.resolveBackoffCap` (seconds): the longest wait before
/// a name that keeps failing is asked again.
pub const DEFAULT_RESOLVE_BACKOFF_CAP_SECS: u32 = 300;

/// The schedule's timing and bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolveBounds {
    /// TTL floor and ceiling, the learner's (`fqdn.minTtl`, `fqdn.maxTtl`):
    /// the learned addresses time out after the clamped TTL.
    pub min_ttl_secs: u32,
    pub max_ttl_secs: u32,
    /// Queries in flight at most (`fqdn.resolveConcurrency`, at least 2).
    /// Each policy holds at most its share (the bound divided by the
    /// policies, at least 1); queries of names that got no answer last
    /// time at most half.
    pub concurrency: usize,
    /// Queries handed out per second at most.
    pub per_second: u32,
    /// Of those, retries after an answer without addresses.
    pub negative_per_second: u32,
    /// First wait after no answer; doubled per failure up to the cap.
    pub backoff_ms: u64,
    /// First wait after an answer without addresses; doubled per such
    /// answer up to the cap.
    pub negative_backoff_ms: u64,
    /// The longest wait after failures (`fqdn.resolveBackoffCap`).
    pub max_backoff_ms: u64,
    /// A query handed out and not reported back within this is lost (its
    /// thread died): it is due again.
    pub lease_ms: u64,
}

impl Default for ResolveBounds {
    fn default() -> Self {
        ResolveBounds {
            min_ttl_secs: 5,
            max_ttl_secs: super::DEFAULT_MAX_TTL_SECS,
            concurrency: DEFAULT_RESOLVE_CONCURRENCY,
            per_second: 100,
            negative_per_second: 5,
            backoff_ms: 1_000,
            negative_backoff_ms: 30_000,
            max_backoff_ms: u64::from(DEFAULT_RESOLVE_BACKOFF_CAP_SECS) * 1000,
            lease_ms: 30_000,
        }
    }
}

/// How the last query of a name and type ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Last {
    /// Never asked since the selector appeared.
    New,
    Answered,
    Negative,
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct QueryState {
    due_ms: u64,
    /// Answers without addresses and failures since the last answer with
    /// addresses.
    failures: u32,
    last: Last,
    /// When it was handed out, while it is.
    leased_at: Option<u64>,
}

impl QueryState {
    fn new(now_ms: u64) -> QueryState {
        QueryState {
            due_ms: now_ms,
            failures: 0,
            last: Last::New,
            leased_at: None,
        }
    }
}

#[derive(Clone, Debug)]
struct NameState {
    /// Per [`QueryType`].
    queries: [QueryState; 2],
    /// Positions in [`ResolveSchedule::owners`] of the policies that
    /// select the name.
    owners: Vec<usize>,
}

/// A policy and the exact names its rules select.
#[derive(Clone, Debug)]
struct Owner {
    names: Vec<String>,
}

/// What to resolve when, for the exact selectors in force.
#[derive(Clone, Debug)]
pub struct ResolveSchedule {
    bounds: ResolveBounds,
    names: BTreeMap<String, NameState>,
    /// Sorted by policy.
    owners: Vec<Owner>,
    /// The policy served first by the next [`ResolveSchedule::next`].
    cursor: usize,
    /// Start of the current one-second rate window, queries handed out in
    /// it, and retries after negative answers among them.
    window_ms: u64,
    sent: u32,
    negative_sent: u32,
}

/// What one query gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// Addresses; `min_ttl_secs` is the smallest of their TTLs.
    Answered { min_ttl_secs: u32 },
    /// An answer without addresses of the type: NXDOMAIN, no record of
    /// the type, or an error code (REFUSED, SERVFAIL). `ttl_secs` is the
    /// negative TTL of the SOA it carried, if any.
    Negative { ttl_secs: Option<u32> },
    /// No answer in time, or the network refused the query.
    Failed,
}

impl ResolveSchedule {
    pub fn new(bounds: ResolveBounds) -> ResolveSchedule {
        ResolveSchedule {
            bounds,
            names: BTreeMap::new(),
            owners: Vec::new(),
            cursor: 0,
            window_ms: 0,
            sent: 0,
            negative_sent: 0,
        }
    }

    /// Names scheduled.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// Follows the exact selectors of `owned` (a policy and a selector of
    /// its rules, for every pair): a new name is due at `now_ms`, a kept
    /// one keeps its times, a gone one is forgotten (its outcome, if a
    /// query is out, is ignored). Returns whether a name was added.
    pub fn reselect<P: AsRef<str>>(&mut self, owned: &[(P, &FqdnPattern)], now_ms: u64) -> bool {
        let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (owner, pattern) in owned {
            if !pattern.is_wildcard() && !pattern.as_str().is_empty() {
                by_owner
                    .entry(owner.as_ref())
                    .or_default()
                    .push(pattern.as_str().to_owned());
            }
        }
        let mut names: BTreeMap<String, NameState> = BTreeMap::new();
        let mut added = false;
        self.owners = Vec::with_capacity(by_owner.len());
        for (position, (_, mut owner_names)) in by_owner.into_iter().enumerate() {
            owner_names.sort();
            owner_names.dedup();
            for name in &owner_names {
                let state =
                    names
                        .entry(name.clone())
                        .or_insert_with(|| match self.names.remove(name) {
                            Some(mut kept) => {
                                kept.owners.clear();
                                kept
                            }
                            None => {
                                added = true;
                                NameState {
                                    queries: [QueryState::new(now_ms); 2],
                                    owners: Vec::new(),
                                }
                            }
                        });
                state.owners.push(position);
            }
            self.owners.push(Owner { names: owner_names });
        }
        self.names = names;
        self.cursor = 0;
        added
    }

    /// The next query to send at `now_ms`, if the bounds allow one: round
    /// robin over the policies, each one's earliest due query. The query
    /// is out until its outcome is reported (or its lease runs out).
    pub fn next(&mut self, now_ms: u64) -> Option<ResolveQuery> {
        let bounds = self.bounds;
        if now_ms.saturating_sub(self.window_ms) >= 1_000 {
            self.window_ms = now_ms;
            self.sent = 0;
            self.negative_sent = 0;
        }
        let mut in_flight = 0;
        let mut failing_in_flight = 0;
        let mut owner_in_flight = vec![0usize; self.owners.len()];
        for state in self.names.values_mut() {
            for query in &mut state.queries {
                if query
                    .leased_at
                    .is_some_and(|at| now_ms >= at.saturating_add(bounds.lease_ms))
                {
                    query.leased_at = None;
                    query.due_ms = now_ms;
                }
                if query.leased_at.is_some() {
                    in_flight += 1;
                    if query.last == Last::Failed {
                        failing_in_flight += 1;
                    }
                    for &owner in &state.owners {
                        owner_in_flight[owner] += 1;
                    }
                }
            }
        }
        if self.sent >= bounds.per_second || in_flight >= bounds.concurrency {
            return None;
        }
        let share = (bounds.concurrency / self.owners.len().max(1)).max(1);
        let failing_room = failing_in_flight < (bounds.concurrency / 2).max(1);
        let negative_room = self.negative_sent < bounds.negative_per_second;
        let owners = self.owners.len();
        for step in 0..owners {
            let position = (self.cursor + step) % owners;
            if owner_in_flight[position] >= share {
                continue;
            }
            let mut best: Option<(u64, &str, QueryType)> = None;
            for name in &self.owners[position].names {
                let Some(state) = self.names.get(name) else {
                    continue;
                };
                for qtype in QueryType::BOTH {
                    let query = &state.queries[qtype.index()];
                    let eligible = query.leased_at.is_none()
                        && query.due_ms <= now_ms
                        && match query.last {
                            Last::Negative => negative_room,
                            Last::Failed => failing_room,
                            Last::New | Last::Answered => true,
                        };
                    if eligible && best.is_none_or(|(due, _, _)| query.due_ms < due) {
                        best = Some((query.due_ms, name, qtype));
                    }
                }
            }
            let Some((_, name, qtype)) = best else {
                continue;
            };
            let name = name.to_owned();
            let query = self.names.get_mut(&name)?.queries.get_mut(qtype.index())?;
            query.leased_at = Some(now_ms);
            self.sent += 1;
            if query.last == Last::Negative {
                self.negative_sent += 1;
            }
            self.cursor = (position + 1) % owners;
            return Some(ResolveQuery { name, qtype });
        }
        None
    }

    /// When [`ResolveSchedule::next`] may next hand out a query without an
    /// outcome coming in first: the earliest due time (or lease end) still
    /// ahead, or the next rate window if that is sooner and a query due
    /// already was held back; `None` without names.
    pub fn next_due(&self, now_ms: u64) -> Option<u64> {
        let mut held = false;
        let mut next: Option<u64> = None;
        for query in self.names.values().flat_map(|state| state.queries.iter()) {
            let at = match query.leased_at {
                Some(at) => at.saturating_add(self.bounds.lease_ms),
                None => query.due_ms,
            };
            if at <= now_ms {
                held = true;
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        if held {
            let window_end = self.window_ms.saturating_add(1_000).max(now_ms + 1);
            next = Some(next.map_or(window_end, |n| n.min(window_end)));
        }
        next
    }

    /// Records how `query` ended at `now_ms`. Returns whether it is the
    /// first time it went without addresses since it last had some (the
    /// one to log). A name no longer scheduled is ignored.
    pub fn outcome(&mut self, query: &ResolveQuery, outcome: ResolveOutcome, now_ms: u64) -> bool {
        let bounds = self.bounds;
        let Some(state) = self
            .names
            .get_mut(&query.name)
            .and_then(|s| s.queries.get_mut(query.qtype.index()))
        else {
            return false;
        };
        let before = *state;
        let (due_ms, failures, last) = match outcome {
            ResolveOutcome::Answered { min_ttl_secs } => (
                now_ms.saturating_add(refresh_after_ms(clamp_ttl(min_ttl_secs, &bounds))),
                0,
                Last::Answered,
            ),
            ResolveOutcome::Negative { ttl_secs } => {
                let negative_ttl_ms = u64::from(ttl_secs.unwrap_or(0)) * 1000;
                let wait = exponential(bounds.negative_backoff_ms, before.failures)
                    .max(negative_ttl_ms)
                    .min(bounds.max_backoff_ms);
                (
                    now_ms.saturating_add(wait),
                    before.failures.saturating_add(1),
                    Last::Negative,
                )
            }
            ResolveOutcome::Failed => (
                now_ms.saturating_add(
                    exponential(bounds.backoff_ms, before.failures).min(bounds.max_backoff_ms),
                ),
                before.failures.saturating_add(1),
                Last::Failed,
            ),
        };
        *state = QueryState {
            due_ms,
            failures,
            last,
            leased_at: None,
        };
        last != Last::Answered && before.failures == 0
    }
}

/// `first` doubled `times` times (saturating).
fn exponential(first: u64, times: u32) -> u64 {
    first.saturating_mul(1u64 << times.min(32))
}

/// The learner's timeout for `ttl`: floor, then ceiling, at least 1.
fn clamp_ttl(ttl: u32, bounds: &ResolveBounds) -> u32 {
    ttl.max(bounds.min_ttl_secs).min(bounds.max_ttl_secs).max(1)
}

/// When to ask again for addresses that time out after `timeout_secs`:
/// a tenth of the timeout before, at least one second before and at least
/// one second after the answer (so a TTL-1 name is asked once a second).
pub fn refresh_after_ms(timeout_secs: u32) -> u64 {
    let timeout_ms = u64::from(timeout_secs) * 1000;
    let lead = (timeout_ms / 10).max(1_000);
    timeout_ms.saturating_sub(lead).max(1_000)
}

#[cfg(test)]
mod tests;
