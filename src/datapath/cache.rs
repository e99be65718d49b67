//! The kernel verdict cache's names and generations: which
//! `hash:ip,port,ip` set (`src,proto:port,dst`) holds a cached verdict of
//! one hook, family and verdict, and the generation each ruleset the agent
//! puts in force caches under. Pure: it never writes the kernel (the
//! connection workers add entries through `workers::cache`, reconcile
//! creates and destroys the sets) and never reads a clock.
//!
//! # Why a stale verdict cannot outlive a change
//!
//! Every ruleset the agent offers gets a generation no earlier ruleset of
//! the run had ([`Generations::stamp`]; the run's first one comes from a
//! seed the agent draws at start, so a restarted agent does not reuse the
//! previous run's either). The rules that answer from the cache name the
//! sets of the generation of the ruleset they are installed for; the
//! bridge to a new ruleset names the new ruleset's (empty) sets, in the
//! same `iptables-restore` transaction that widens the queuing, and that
//! transaction completes before the new ruleset decides its first
//! connection. A worker adds an entry only to the sets of the generation
//! of the ruleset that made the decision, so an entry of an older ruleset
//! lands in sets no rule refers to (or that are already destroyed).

use crate::decide::CacheEntry;
use crate::packet::flow::{LocalSide, Verdict};
use crate::ruleset::{Ruleset, VerdictCache};

use super::ipset_netlink::EntryOp;
use super::plan::Hook;
use super::state::Family;

/// Prefix of the verdict cache sets' names.
pub const CACHE_SET_PREFIX: &str = "tollgate-vc-";
/// The owned chain a cached Allow jumps to (mark, connmark, accept).
pub const CACHED_ALLOW_CHAIN: &str = "TOLLGATE-CACHED-ALLOW";
/// Generations are this many bits (10 hex digits in a set name).
const GENERATION_BITS: u32 = 40;

/// A verdict the cache can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedVerdict {
    Allow,
    Drop,
    Reject,
}

impl CachedVerdict {
    pub const ALL: [CachedVerdict; 3] = [
        CachedVerdict::Allow,
        CachedVerdict::Drop,
        CachedVerdict::Reject,
    ];

    fn letter(self) -> char {
        match self {
            CachedVerdict::Allow => 'a',
            CachedVerdict::Drop => 'd',
            CachedVerdict::Reject => 'r',
        }
    }
}

impl From<Verdict> for CachedVerdict {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Allow => CachedVerdict::Allow,
            Verdict::Drop => CachedVerdict::Drop,
            Verdict::Reject => CachedVerdict::Reject,
        }
    }
}

/// `tollgate-vc-<generation, 10 hex digits>-<hook><verdict><family>`, e.g.
/// `tollgate-vc-00000000ab-ia4` (26 bytes; the kernel allows 31).
pub fn cache_set(generation: u64, hook: Hook, verdict: CachedVerdict, family: Family) -> String {
    let hook = match hook {
        Hook::Input => 'i',
        Hook::Forward => 'f',
        Hook::Output => 'o',
    };
    let family = match family {
        Family::V4 => '4',
        Family::V6 => '6',
    };
    format!(
        "{CACHE_SET_PREFIX}{:010x}-{hook}{}{family}",
        generation & mask(),
        verdict.letter()
    )
}

fn mask() -> u64 {
    (1 << GENERATION_BITS) - 1
}

/// The hook a queued packet came from, as the side of the flow it names
/// the Node ([`LocalSide::of_hook`]).
pub fn hook_of(local: Option<LocalSide>) -> Hook {
    match local {
        Some(LocalSide::Destination) => Hook::Input,
        Some(LocalSide::Source) => Hook::Output,
        None => Hook::Forward,
    }
}

/// The set `entry` belongs in under `cache`, and the write that adds it
/// with the cache's timeout.
pub fn insert_op<'a>(entry: &CacheEntry, cache: &VerdictCache, set: &'a str) -> EntryOp<'a> {
    EntryOp::AddTuple {
        set,
        src: entry.key.src,
        protocol: entry.key.protocol,
        port: entry.key.port,
        dst: entry.key.dst,
        timeout_secs: cache.timeout_secs,
    }
}

/// The name of the set `entry` belongs in under `cache`.
pub fn set_of(entry: &CacheEntry, cache: &VerdictCache) -> String {
    cache_set(
        cache.generation,
        hook_of(entry.key.local),
        entry.verdict.into(),
        Family::of(&entry.key.src),
    )
}

/// Hands out one generation per ruleset: `seed`, `seed + 1`, … (40 bits,
/// wrapping), with the configured timeout and bound; `None` when the cache
/// is off.
#[derive(Clone, Debug)]
pub struct Generations {
    next: u64,
    timeout_secs: u32,
    max_entries: u32,
    enabled: bool,
}

impl Generations {
    pub fn new(enabled: bool, timeout_secs: u32, max_entries: u32, seed: u64) -> Generations {
        Generations {
            next: seed & mask(),
            timeout_secs,
            max_entries,
            enabled,
        }
    }

    /// `ruleset` with a generation of its own, when the cache is on.
    pub fn stamp(&mut self, ruleset: Ruleset) -> Ruleset {
        if !self.enabled {
            return ruleset;
        }
        let generation = self.next;
        self.next = (self.next + 1) & mask();
        ruleset.with_verdict_cache(VerdictCache {
            generation,
            timeout_secs: self.timeout_secs,
            max_entries: self.max_entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::CacheKey;

    #[test]
    fn set_names_fit_the_kernel_and_differ_per_hook_verdict_family_and_generation() {
        let mut names = std::collections::BTreeSet::new();
        for generation in [0, 1, u64::MAX] {
            for hook in Hook::ALL {
                for verdict in CachedVerdict::ALL {
                    for family in Family::ALL {
                        let name = cache_set(generation, hook, verdict, family);
                        assert!(name.len() <= 31, "{name}");
                        assert!(name.starts_with(crate::datapath::state::SET_PREFIX));
                        names.insert(name);
                    }
                }
            }
        }
        assert_eq!(names.len(), 3 * 3 * 3 * 2);
        assert_eq!(
            cache_set(0xab, Hook::Input, CachedVerdict::Allow, Family::V4),
            "tollgate-vc-00000000ab-ia4"
        );
    }

    #[test]
    fn every_stamped_ruleset_gets_a_new_generation_and_off_stamps_none() {
        let mut on = Generations::new(true, 60, 1024, (1 << 40) - 1);
        let first = on.stamp(Ruleset::default());
        let second = on.stamp(Ruleset::default());
        let generation = |r: &Ruleset| r.enforced().verdict_cache.map(|c| c.generation);
        assert_eq!(generation(&first), Some((1 << 40) - 1));
        assert_eq!(generation(&second), Some(0));
        let mut off = Generations::new(false, 60, 1024, 7);
        assert_eq!(off.stamp(Ruleset::default()).enforced().verdict_cache, None);
    }

    #[test]
    fn an_entry_goes_to_the_set_of_its_hook_verdict_and_family() {
        let cache = VerdictCache {
            generation: 5,
            timeout_secs: 30,
            max_entries: 64,
        };
        let entry = CacheEntry {
            key: CacheKey {
                local: Some(LocalSide::Source),
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                protocol: 17,
                port: 53,
            },
            verdict: Verdict::Reject,
        };
        let set = set_of(&entry, &cache);
        assert_eq!(set, "tollgate-vc-0000000005-or6");
        assert_eq!(
            insert_op(&entry, &cache, &set),
            EntryOp::AddTuple {
                set: "tollgate-vc-0000000005-or6",
                src: "fd00::1".parse().unwrap(),
                protocol: 17,
                port: 53,
                dst: "fd00::2".parse().unwrap(),
                timeout_secs: 30,
            }
        );
    }
}
