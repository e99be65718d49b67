//! Resolving exact FQDN selectors ahead ([`ResolveSchedule`]): which names
//! tollgate asks its resolvers itself, and when — at once when a selector
//! appears, again shortly before the addresses learned from the last
//! answer time out, and after a failure with exponential backoff, never
//! faster than the rate bound. Wildcards cannot be asked for and stay
//! snoop-only. Pure: time is passed in (table milliseconds); it sends no
//! query and never reads the clock.

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

/// The schedule's timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolveBounds {
    /// TTL floor and ceiling, the learner's (`fqdn.minTtl`, `fqdn.maxTtl`):
    /// the learned addresses time out after the clamped TTL.
    pub min_ttl_secs: u32,
    pub max_ttl_secs: u32,
    /// Names asked per second at most, across names.
    pub per_second: u32,
    /// First wait after a failure; doubled per failure up to the ceiling.
    pub backoff_ms: u64,
    pub max_backoff_ms: u64,
    /// Wait after an answer without addresses (NXDOMAIN, no record).
    pub empty_retry_ms: u64,
}

impl Default for ResolveBounds {
    fn default() -> Self {
        ResolveBounds {
            min_ttl_secs: 5,
            max_ttl_secs: super::DEFAULT_MAX_TTL_SECS,
            per_second: 20,
            backoff_ms: 1_000,
            max_backoff_ms: 60_000,
            empty_retry_ms: 30_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NameState {
    due_ms: u64,
    /// Failures since the last answer.
    failures: u32,
}

/// What to resolve when, for the exact selectors in force.
#[derive(Clone, Debug)]
pub struct ResolveSchedule {
    bounds: ResolveBounds,
    names: BTreeMap<String, NameState>,
    /// Start of the current one-second rate window and names handed out
    /// in it.
    window_ms: u64,
    sent: u32,
}

/// What one resolution of a name gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// Answers came; `min_ttl_secs` is the smallest TTL of their
    /// addresses, `None` when there were none.
    Answered { min_ttl_secs: Option<u32> },
    /// No resolver answered usably.
    Failed,
}

impl ResolveSchedule {
    pub fn new(bounds: ResolveBounds) -> ResolveSchedule {
        ResolveSchedule {
            bounds,
            names: BTreeMap::new(),
            window_ms: 0,
            sent: 0,
        }
    }

    /// The exact names of `selectors` (wildcards cannot be resolved).
    pub fn exact_names(selectors: &[FqdnPattern]) -> Vec<String> {
        let mut names: Vec<String> = selectors
            .iter()
            .filter(|p| !p.is_wildcard() && !p.as_str().is_empty())
            .map(|p| p.as_str().to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Names scheduled.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// Follows the exact selectors of `selectors`: a new name is due at
    /// `now_ms`, a kept one keeps its time, a gone one is forgotten.
    /// Returns whether a name was added.
    pub fn reselect(&mut self, selectors: &[FqdnPattern], now_ms: u64) -> bool {
        let wanted = Self::exact_names(selectors);
        self.names
            .retain(|name, _| wanted.binary_search(name).is_ok());
        let mut added = false;
        for name in wanted {
            self.names.entry(name).or_insert_with(|| {
                added = true;
                NameState {
                    due_ms: now_ms,
                    failures: 0,
                }
            });
        }
        added
    }

    /// The names due at `now_ms`, earliest first, within the rate bound.
    /// Each is pushed back by the longest backoff until its outcome comes,
    /// so a resolution that never reports back is retried, not lost.
    pub fn due(&mut self, now_ms: u64) -> Vec<String> {
        if now_ms.saturating_sub(self.window_ms) >= 1_000 {
            self.window_ms = now_ms;
            self.sent = 0;
        }
        let mut due: Vec<(u64, String)> = self
            .names
            .iter()
            .filter(|(_, s)| s.due_ms <= now_ms)
            .map(|(n, s)| (s.due_ms, n.clone()))
            .collect();
        due.sort();
        let room = self.bounds.per_second.saturating_sub(self.sent) as usize;
        due.truncate(room);
        self.sent += due.len() as u32;
        let wait = self.bounds.max_backoff_ms;
        due.into_iter()
            .map(|(_, name)| {
                if let Some(state) = self.names.get_mut(&name) {
                    state.due_ms = now_ms.saturating_add(wait);
                }
                name
            })
            .collect()
    }

    /// When the next name falls due (the start of the next rate window if
    /// the bound holds it back), `None` without names.
    pub fn next_due(&self) -> Option<u64> {
        let earliest = self.names.values().map(|s| s.due_ms).min()?;
        Some(if self.sent >= self.bounds.per_second {
            earliest.max(self.window_ms.saturating_add(1_000))
        } else {
            earliest
        })
    }

    /// Records how resolving `name` ended at `now_ms`. Returns whether it
    /// is the first failure since the name last resolved (the one to log).
    /// A name no longer scheduled is ignored.
    pub fn outcome(&mut self, name: &str, outcome: ResolveOutcome, now_ms: u64) -> bool {
        let Some(state) = self.names.get(name).copied() else {
            return false;
        };
        let bounds = self.bounds;
        let next = match outcome {
            ResolveOutcome::Answered {
                min_ttl_secs: Some(ttl),
            } => NameState {
                due_ms: now_ms.saturating_add(refresh_after_ms(clamp_ttl(ttl, &bounds))),
                failures: 0,
            },
            ResolveOutcome::Answered { min_ttl_secs: None } => NameState {
                due_ms: now_ms.saturating_add(bounds.empty_retry_ms),
                failures: 0,
            },
            ResolveOutcome::Failed => NameState {
                due_ms: now_ms.saturating_add(self.backoff(state.failures)),
                failures: state.failures.saturating_add(1),
            },
        };
        self.names.insert(name.to_owned(), next);
        matches!(outcome, ResolveOutcome::Failed) && state.failures == 0
    }

    /// The wait after `failures` earlier failures: the first backoff
    /// doubled per failure, at most the ceiling.
    fn backoff(&self, failures: u32) -> u64 {
        self.bounds
            .backoff_ms
            .saturating_mul(1u64 << failures.min(20))
            .min(self.bounds.max_backoff_ms)
    }
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
