//! The FQDN learner: which addresses each FQDN selector currently allows,
//! learned from DNS answers, and the ipset writes that keep the kernel sets
//! equal to it. Time is passed in as milliseconds on a monotonic clock the
//! caller owns; this module never reads a clock and never touches ipsets.
//!
//! Two layers of state:
//! - *records*: `(name, address) → expiry`, one per address a DNS answer
//!   gave for a name that some selector matches. Bounded per name and in
//!   total; the least recently learned record is evicted first.
//! - *installed*: `(selector, address) → expiry`, the mirror of what has been
//!   written to the kernel sets. An entry is written when a record makes it
//!   live or extends it by at least a second, and removed when eviction
//!   leaves no record behind it (a count of backing records per entry makes
//!   that check independent of how many names share an address). Expiry
//!   needs no write: the kernel times entries out itself, and
//!   [`FqdnLearner::expire`] forgets them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::pattern::{FqdnLookup, FqdnPattern};
use crate::dns::{self, DnsError, Resolution};

/// Largest timeout the kernel's ipset accepts (seconds).
pub const MAX_IPSET_TIMEOUT_SECS: u32 = 2_147_483;

/// Default ceiling on answer TTLs: one day, Unbound's `cache-max-ttl`
/// default, so a client behind such a resolver never holds an answer
/// longer; it bounds how long one bad answer keeps an address allowed.
pub const DEFAULT_MAX_TTL_SECS: u32 = 86_400;

/// Bounds and the TTL floor and ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnerConfig {
    /// Floor applied to answer TTLs. A TTL-0 answer is still used by the
    /// client right away; the floor covers the connect and its retries.
    pub min_ttl_secs: u32,
    /// Ceiling applied to answer TTLs (after the floor; wins over it).
    pub max_ttl_secs: u32,
    /// Addresses remembered per name (CDNs rotate through many).
    pub max_addresses_per_name: usize,
    /// Records remembered in total, across names.
    pub max_addresses: usize,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            min_ttl_secs: 5,
            max_ttl_secs: DEFAULT_MAX_TTL_SECS,
            max_addresses_per_name: 128,
            // The default `maxelem` of an ipset hash:ip set.
            max_addresses: 65_536,
        }
    }
}

/// One write to the FQDN ipsets. `selector` indexes the selector list the
/// learner was built with (the datapath maps it, with the address family,
/// to a set name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpsetChange {
    /// `ipset add -exist SET ADDRESS timeout SECS` (adds or refreshes).
    Add {
        selector: usize,
        address: IpAddr,
        timeout_secs: u32,
    },
    /// `ipset del -exist SET ADDRESS` (evicted to respect a bound).
    Remove { selector: usize, address: IpAddr },
}

/// One entry of a kernel set listing, for [`FqdnLearner::restore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoredEntry {
    pub selector: usize,
    pub address: IpAddr,
    pub remaining_secs: u32,
}

/// How the addresses of a set entry were learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// From a DNS answer seen in traffic (or restored from the kernel).
    Snooped,
    /// From an answer tollgate asked its resolvers for; wins over
    /// snooped while the entry lives.
    Resolved,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Snooped => "snooped",
            Source::Resolved => "resolved",
        }
    }
}

/// Monotonic event counts, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LearnerCounters {
    /// Replies parsed by [`FqdnLearner::learn_reply`].
    pub parsed: u64,
    /// Replies [`FqdnLearner::learn_reply`] could not use.
    pub failed: u64,
    /// Set entries created.
    pub learned: u64,
    /// Set entries whose timeout was extended.
    pub refreshed: u64,
    /// Set entries removed to respect a bound.
    pub evicted: u64,
    /// Set entries forgotten because their timeout passed.
    pub expired: u64,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    expires_ms: u64,
    /// Position in [`FqdnLearner::order`]; larger is more recent.
    order: u64,
}

#[derive(Clone, Debug)]
struct NameState {
    /// Indices of the selectors matching this name (never empty).
    selectors: Vec<usize>,
    records: HashMap<IpAddr, Record>,
    /// This name's records by recency, oldest first: its eviction order.
    recency: BTreeMap<u64, IpAddr>,
}

/// In-memory mirror of the FQDN ipsets for one list of selectors. Build a
/// new one (and [`restore`](FqdnLearner::restore) it from the kernel) when
/// the selector list changes.
#[derive(Clone, Debug)]
pub struct FqdnLearner {
    config: LearnerConfig,
    selectors: Vec<FqdnPattern>,
    selector_index: HashMap<FqdnPattern, usize>,
    names: HashMap<Arc<str>, NameState>,
    /// Every record by recency, oldest first: the global eviction order.
    order: BTreeMap<u64, (Arc<str>, IpAddr)>,
    next_order: u64,
    /// Number of records whose name matches the selector, per entry.
    backing: HashMap<(usize, IpAddr), u32>,
    installed: HashMap<(usize, IpAddr), u64>,
    /// Installed entries a resolution tollgate asked for learned or
    /// confirmed (the others were snooped).
    resolved: HashSet<(usize, IpAddr)>,
    counters: LearnerCounters,
}

impl FqdnLearner {
    /// A learner for `selectors` (duplicates keep their first index).
    pub fn new(selectors: Vec<FqdnPattern>, config: LearnerConfig) -> FqdnLearner {
        let mut selector_index = HashMap::new();
        for (i, pattern) in selectors.iter().enumerate() {
            selector_index.entry(pattern.clone()).or_insert(i);
        }
        FqdnLearner {
            config,
            selectors,
            selector_index,
            names: HashMap::new(),
            order: BTreeMap::new(),
            next_order: 0,
            backing: HashMap::new(),
            installed: HashMap::new(),
            resolved: HashSet::new(),
            counters: LearnerCounters::default(),
        }
    }

    pub fn selectors(&self) -> &[FqdnPattern] {
        &self.selectors
    }

    pub fn config(&self) -> &LearnerConfig {
        &self.config
    }

    pub fn counters(&self) -> LearnerCounters {
        self.counters
    }

    /// Number of `(name, address)` records held.
    pub fn records(&self) -> usize {
        self.order.len()
    }

    /// Number of `(selector, address)` entries believed to be in the kernel.
    pub fn installed(&self) -> usize {
        self.installed.len()
    }

    /// Parses one DNS message and learns from it; counts the outcome.
    pub fn learn_reply(&mut self, bytes: &[u8], now_ms: u64) -> Result<Vec<IpsetChange>, DnsError> {
        match dns::parse_reply(bytes) {
            Ok(reply) => {
                self.counters.parsed += 1;
                Ok(self.learn(&reply.resolved(), now_ms))
            }
            Err(err) => {
                self.counters.failed += 1;
                Err(err)
            }
        }
    }

    /// Learns the addresses of one reply; names must be normalized as
    /// [`crate::dns::DnsReply::resolved`] gives them (lower-case, no
    /// trailing dot). Returns the writes that make the kernel sets agree,
    /// which must be applied before the reply is released to the client.
    pub fn learn(&mut self, resolutions: &[Resolution], now_ms: u64) -> Vec<IpsetChange> {
        self.learn_from(resolutions, Source::Snooped, now_ms)
    }

    /// [`FqdnLearner::learn`] for answers learned by `source`; the entries
    /// a resolution backs are marked [`Source::Resolved`].
    pub fn learn_from(
        &mut self,
        resolutions: &[Resolution],
        source: Source,
        now_ms: u64,
    ) -> Vec<IpsetChange> {
        let mut touched = Touched::default();
        for resolution in resolutions {
            let timeout = self.timeout_secs(resolution.ttl);
            let expires_ms = now_ms.saturating_add(u64::from(timeout) * 1000);
            for name in &resolution.names {
                self.upsert(name, resolution.address, expires_ms, &mut touched);
            }
        }
        while self.order.len() > self.config.max_addresses {
            let Some((_, (name, address))) = self.order.pop_first() else {
                break;
            };
            if let Some((_, selectors)) = self.drop_record(&name, address) {
                touched.evicted(&selectors, address);
            }
        }
        let mut changes = Vec::new();
        for key in touched.keys() {
            self.reconcile(
                key,
                touched.learned.get(&key).copied(),
                now_ms,
                &mut changes,
            );
        }
        if source == Source::Resolved {
            let live: Vec<_> = touched
                .learned
                .keys()
                .filter(|key| self.installed.contains_key(key))
                .copied()
                .collect();
            self.resolved.extend(live);
        }
        changes
    }

    /// How the installed entry `(selector, address)` was learned.
    pub fn source(&self, selector: usize, address: IpAddr) -> Source {
        if self.resolved.contains(&(selector, address)) {
            Source::Resolved
        } else {
            Source::Snooped
        }
    }

    /// Forgets records and set entries whose timeout has passed. The kernel
    /// has already removed the entries, so nothing needs writing. Walks
    /// every record: call it periodically (about once a second), not per
    /// packet.
    pub fn expire(&mut self, now_ms: u64) {
        let stale: Vec<(Arc<str>, IpAddr)> = self
            .names
            .iter()
            .flat_map(|(name, state)| {
                state
                    .records
                    .iter()
                    .filter(|(_, r)| r.expires_ms <= now_ms)
                    .map(|(a, _)| (Arc::clone(name), *a))
            })
            .collect();
        for (name, address) in stale {
            if let Some((order, _)) = self.drop_record(&name, address) {
                self.order.remove(&order);
            }
        }
        let before = self.installed.len();
        self.installed.retain(|_, expires| *expires > now_ms);
        let installed = &self.installed;
        self.resolved.retain(|key| installed.contains_key(key));
        self.counters.expired += (before - self.installed.len()) as u64;
    }

    /// Whether `address` is currently allowed for `pattern`.
    pub fn resolves_to(&self, pattern: &FqdnPattern, address: IpAddr, now_ms: u64) -> bool {
        self.selector_index
            .get(pattern)
            .and_then(|s| self.installed.get(&(*s, address)))
            .is_some_and(|expires| *expires > now_ms)
    }

    /// The learner as the classifier's [`FqdnLookup`], frozen at `now_ms`.
    pub fn at(&self, now_ms: u64) -> LearnedAt<'_> {
        LearnedAt {
            learner: self,
            now_ms,
        }
    }

    /// Rebuilds the mirror from the kernel sets after a restart. Names are
    /// not kept in the kernel, so restored entries have no records: they
    /// stay until their timeout passes or a new answer refreshes them.
    /// Entries for unknown selector indices are skipped. Returns how many
    /// entries were restored.
    pub fn restore(&mut self, entries: &[RestoredEntry], now_ms: u64) -> usize {
        let mut restored = 0;
        for entry in entries {
            if entry.selector >= self.selectors.len() || entry.remaining_secs == 0 {
                continue;
            }
            let expires = now_ms
                .saturating_add(u64::from(entry.remaining_secs.min(MAX_IPSET_TIMEOUT_SECS)) * 1000);
            let slot = self
                .installed
                .entry((entry.selector, entry.address))
                .or_insert(expires);
            *slot = (*slot).max(expires);
            restored += 1;
        }
        restored
    }

    /// The installed entries still live at `now_ms`, with their remaining
    /// timeout rounded up to whole seconds.
    pub fn entries(&self, now_ms: u64) -> Vec<RestoredEntry> {
        let mut entries: Vec<RestoredEntry> = self
            .installed
            .iter()
            .filter(|(_, expires)| **expires > now_ms)
            .map(|(&(selector, address), expires)| RestoredEntry {
                selector,
                address,
                remaining_secs: u32::try_from((expires - now_ms).div_ceil(1000))
                    .unwrap_or(MAX_IPSET_TIMEOUT_SECS),
            })
            .collect();
        entries.sort_by_key(|e| (e.selector, e.address));
        entries
    }

    /// A learner for a new selector list that keeps, for every selector
    /// both lists hold, the entries installed now (like [`restore`]: the
    /// kernel sets of kept selectors are kept too) and their sources.
    /// Names are not carried over. Counters continue.
    ///
    /// [`restore`]: FqdnLearner::restore
    pub fn reselect(&self, selectors: Vec<FqdnPattern>, now_ms: u64) -> FqdnLearner {
        let mut next = FqdnLearner::new(selectors, self.config);
        let mut resolved = HashSet::new();
        let kept: Vec<RestoredEntry> = self
            .entries(now_ms)
            .into_iter()
            .filter_map(|entry| {
                let pattern = self.selectors.get(entry.selector)?;
                let selector = *next.selector_index.get(pattern)?;
                if self.resolved.contains(&(entry.selector, entry.address)) {
                    resolved.insert((selector, entry.address));
                }
                Some(RestoredEntry { selector, ..entry })
            })
            .collect();
        next.restore(&kept, now_ms);
        next.resolved = resolved;
        next.counters = self.counters;
        next
    }

    /// ipset timeout for an answer TTL: the floor, then the ceiling; never
    /// 0 (which would make the entry permanent), never above what ipset
    /// accepts.
    fn timeout_secs(&self, ttl: u32) -> u32 {
        ttl.max(self.config.min_ttl_secs)
            .min(self.config.max_ttl_secs)
            .clamp(1, MAX_IPSET_TIMEOUT_SECS)
    }

    /// Inserts or refreshes the record `(name, address)` if some selector
    /// matches `name`, enforcing the per-name bound; notes the entries
    /// whose set entry may change in `touched`.
    fn upsert(&mut self, name: &str, address: IpAddr, expires_ms: u64, touched: &mut Touched) {
        let key: Arc<str> = match self.names.get_key_value(name) {
            Some((key, _)) => Arc::clone(key),
            None => {
                let selectors: Vec<usize> = self
                    .selectors
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.matches_normalized(name))
                    .map(|(i, _)| i)
                    .collect();
                if selectors.is_empty() {
                    return;
                }
                let key: Arc<str> = Arc::from(name);
                self.names.insert(
                    Arc::clone(&key),
                    NameState {
                        selectors,
                        records: HashMap::new(),
                        recency: BTreeMap::new(),
                    },
                );
                key
            }
        };
        let order = self.next_order;
        self.next_order += 1;
        let Some(state) = self.names.get_mut(&key) else {
            return;
        };
        touched.learned(&state.selectors, address, expires_ms);
        let previous = state.records.insert(address, Record { expires_ms, order });
        match previous {
            Some(old) => {
                self.order.remove(&old.order);
                state.recency.remove(&old.order);
                if let Some(record) = state.records.get_mut(&address) {
                    record.expires_ms = record.expires_ms.max(old.expires_ms);
                }
            }
            None => {
                for &selector in &state.selectors {
                    *self.backing.entry((selector, address)).or_insert(0) += 1;
                }
            }
        }
        state.recency.insert(order, address);
        self.order.insert(order, (Arc::clone(&key), address));
        if state.records.len() > self.config.max_addresses_per_name {
            let oldest = state.recency.first_key_value().map(|(o, a)| (*a, *o));
            if let Some((victim, victim_order)) = oldest {
                self.order.remove(&victim_order);
                if let Some((_, selectors)) = self.drop_record(&key, victim) {
                    touched.evicted(&selectors, victim);
                }
            }
        }
    }

    /// Removes the record `(name, address)` from its name and from the
    /// backing counts (not from `order`); returns its order key and the
    /// selectors of its name.
    fn drop_record(&mut self, name: &Arc<str>, address: IpAddr) -> Option<(u64, Vec<usize>)> {
        let state = self.names.get_mut(name)?;
        let record = state.records.remove(&address)?;
        state.recency.remove(&record.order);
        let selectors = if state.records.is_empty() {
            self.names
                .remove(name)
                .map(|s| s.selectors)
                .unwrap_or_default()
        } else {
            state.selectors.clone()
        };
        for &selector in &selectors {
            if let Some(count) = self.backing.get_mut(&(selector, address)) {
                *count -= 1;
                if *count == 0 {
                    self.backing.remove(&(selector, address));
                }
            }
        }
        Some((record.order, selectors))
    }

    /// Brings the installed entry `key` in line with its records: written
    /// when a record learned now (expiring at `learned`) makes it live or
    /// extends it by at least a second; removed when no record backs it any
    /// more (after an eviction).
    fn reconcile(
        &mut self,
        key: (usize, IpAddr),
        learned: Option<u64>,
        now_ms: u64,
        changes: &mut Vec<IpsetChange>,
    ) {
        let have = self.installed.get(&key).copied().filter(|e| *e > now_ms);
        if !self.backing.contains_key(&key) {
            self.resolved.remove(&key);
            if self.installed.remove(&key).is_some() && have.is_some() {
                self.counters.evicted += 1;
                changes.push(IpsetChange::Remove {
                    selector: key.0,
                    address: key.1,
                });
            }
            return;
        }
        match (learned, have) {
            (Some(want), None) => {
                self.counters.learned += 1;
                changes.push(self.install(key, want, now_ms));
            }
            (Some(want), Some(have)) if want >= have.saturating_add(1000) => {
                self.counters.refreshed += 1;
                changes.push(self.install(key, want, now_ms));
            }
            _ => {}
        }
    }

    /// Records that `(selector, address)` is written with a whole-second
    /// timeout covering `expires_ms`, and returns that write.
    fn install(&mut self, key: (usize, IpAddr), expires_ms: u64, now_ms: u64) -> IpsetChange {
        let secs = expires_ms.saturating_sub(now_ms).div_ceil(1000);
        let timeout_secs = u32::try_from(secs)
            .unwrap_or(MAX_IPSET_TIMEOUT_SECS)
            .clamp(1, MAX_IPSET_TIMEOUT_SECS);
        self.installed
            .insert(key, now_ms.saturating_add(u64::from(timeout_secs) * 1000));
        IpsetChange::Add {
            selector: key.0,
            address: key.1,
            timeout_secs,
        }
    }
}

/// [`FqdnLearner::resolves_to`] frozen at one instant.
#[derive(Clone, Copy, Debug)]
pub struct LearnedAt<'a> {
    learner: &'a FqdnLearner,
    now_ms: u64,
}

impl FqdnLookup for LearnedAt<'_> {
    fn resolves_to(&self, pattern: &FqdnPattern, address: IpAddr) -> bool {
        self.learner.resolves_to(pattern, address, self.now_ms)
    }
}

/// The set entries one `learn` call may have to write, in a stable order.
#[derive(Default)]
struct Touched {
    /// Latest expiry learned in this call, per entry.
    learned: BTreeMap<(usize, IpAddr), u64>,
    /// Entries that lost a record to eviction in this call.
    evicted: BTreeSet<(usize, IpAddr)>,
}

impl Touched {
    fn learned(&mut self, selectors: &[usize], address: IpAddr, expires_ms: u64) {
        for &selector in selectors {
            let slot = self
                .learned
                .entry((selector, address))
                .or_insert(expires_ms);
            *slot = (*slot).max(expires_ms);
        }
    }

    fn evicted(&mut self, selectors: &[usize], address: IpAddr) {
        self.evicted
            .extend(selectors.iter().map(|&selector| (selector, address)));
    }

    fn keys(&self) -> BTreeSet<(usize, IpAddr)> {
        self.learned.keys().chain(&self.evicted).copied().collect()
    }
}

#[cfg(test)]
mod tests;
