//! The kernel verdict cache's names and generations: which
//! `hash:ip,port,ip` set (`src,proto:port,dst`) holds a cached verdict of
//! one hook, family and verdict, and the generation each ruleset the agent
//! puts in force caches under. Pure: it never writes the kernel (the
//! connection workers add entries through `workers::cache`, reconcile
//! creates and destroys the sets) and never reads a clock.
//!
//! # Why a stale verdict cannot outlive a change
//!
//! A ruleset's generation is a digest of everything its decisions are
//! made from: the snapshot it was compiled from (policies and inventory),
//! the local Node (name, labels, addresses), tollgate's version, and the
//! cache's timeout and bound ([`generation_of`]). Any policy or inventory
//! change gives a new generation; an unchanged one (a SIGHUP, a restart)
//! the same, whose entries are still right. The rules that answer from the
//! cache name the sets of the generation of the ruleset they are installed
//! for; the bridge to a ruleset of another generation has none (it is
//! installed by the same `iptables-restore` transaction that widens the
//! queuing, which completes before the new ruleset decides its first
//! connection), and the narrowing names the new generation's sets. A worker adds an entry only to the sets of the generation
//! of the ruleset that made the decision, so an entry of an older ruleset
//! lands in sets no rule refers to (or that are already destroyed), or in
//! those of a ruleset that decides the same.

use sha1::{Digest, Sha1};

use crate::compile::LocalNode;
use crate::decide::CacheEntry;
use crate::model::Snapshot;
use crate::packet::flow::{LocalSide, Verdict};
use crate::ruleset::{Ruleset, VerdictCache};

use super::ipset_netlink::EntryOp;
use super::state::{Family, Hook};

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

/// `tollgate-vc-<generation, 10 hex digits>-<hook><verdict>-<family>`,
/// e.g. `tollgate-vc-00000000ab-ia-v4` (28 bytes; the kernel allows 31).
pub fn cache_set(generation: u64, hook: Hook, verdict: CachedVerdict, family: Family) -> String {
    let hook = match hook {
        Hook::Input => 'i',
        Hook::Forward => 'f',
        Hook::Output => 'o',
    };
    let family = match family {
        Family::V4 => "v4",
        Family::V6 => "v6",
    };
    format!(
        "{CACHE_SET_PREFIX}{:010x}-{hook}{}-{family}",
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

/// New connections the cache answered, from `iptables-save -c` output:
/// the packet counters (`[packets:bytes]`) of the rules that look a new
/// connection up in a cache set. Those rules match only `ctstate NEW`, so
/// each packet is a connection; the rules of one verdict are exclusive.
pub fn hits(save_with_counters: &str) -> u64 {
    save_with_counters
        .lines()
        .filter(|line| line.contains(&format!("--match-set {CACHE_SET_PREFIX}")))
        .filter_map(|line| {
            let (packets, _) = line.strip_prefix('[')?.split_once(':')?;
            packets.parse::<u64>().ok()
        })
        .fold(0, u64::saturating_add)
}

/// The generation of the ruleset compiled from `snapshot` for `node`:
/// 40 bits of the SHA-1 of everything its decisions are made from.
pub fn generation_of(
    snapshot: &Snapshot,
    node: &LocalNode,
    timeout_secs: u32,
    max_entries: u32,
) -> u64 {
    let mut digest = Sha1::new();
    digest.update(env!("CARGO_PKG_VERSION").as_bytes());
    digest.update(format!("\0{node:?}\0{timeout_secs}\0{max_entries}\0").as_bytes());
    digest.update(format!("{:?}", snapshot.objects).as_bytes());
    let bytes = digest.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(first) & mask()
}

/// Stamps each ruleset with its generation when the cache is on.
#[derive(Clone, Copy, Debug)]
pub struct Generations {
    timeout_secs: u32,
    max_entries: u32,
    enabled: bool,
}

impl Generations {
    pub fn new(enabled: bool, timeout_secs: u32, max_entries: u32) -> Generations {
        Generations {
            timeout_secs,
            max_entries,
            enabled,
        }
    }

    /// `ruleset`, compiled from `snapshot` for `node`, with its generation
    /// when the cache is on.
    pub fn stamp(&self, ruleset: Ruleset, snapshot: &Snapshot, node: &LocalNode) -> Ruleset {
        if !self.enabled {
            return ruleset;
        }
        ruleset.with_verdict_cache(VerdictCache {
            generation: generation_of(snapshot, node, self.timeout_secs, self.max_entries),
            timeout_secs: self.timeout_secs,
            max_entries: self.max_entries,
            lookup: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::CacheKey;

    #[test]
    fn hits_are_the_packet_counters_of_the_cache_lookup_rules() {
        let save = "\
*filter
:TOLLGATE-INPUT - [0:0]
[7:420] -A TOLLGATE-INPUT -i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vc-00000000ab-ia-v4 src,dst,dst -j TOLLGATE-CACHED-ALLOW
[3:180] -A TOLLGATE-INPUT -i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vc-00000000ab-id-v4 src,dst,dst -j DROP
[2:120] -A TOLLGATE-INPUT -i eth0 -p tcp -m conntrack --ctstate NEW -m set --match-set tollgate-vc-00000000ab-ir-v4 src,dst,dst -j REJECT --reject-with tcp-reset
[40:2400] -A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
[9:540] -A TOLLGATE-CACHED-ALLOW -j CONNMARK --save-mark
[5:300] -A TOLLGATE-INPUT -m set --match-set tollgate-endpoints-v4 dst -j TOLLGATE-INPUT
COMMIT
";
        assert_eq!(hits(save), 12);
        assert_eq!(
            hits("[x:1] -A X -m set --match-set tollgate-vc-a src -j DROP\n"),
            0
        );
        assert_eq!(hits(""), 0);
    }

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
            "tollgate-vc-00000000ab-ia-v4"
        );
    }

    #[test]
    fn the_generation_follows_policies_inventory_node_and_bounds_and_off_stamps_none() {
        let parse = |yaml: &str| {
            let (objects, problems) = crate::source::parse_documents("a.yaml".as_ref(), yaml);
            assert!(problems.is_empty(), "{problems:?}");
            Snapshot { objects }
        };
        let pod = |app: &str| {
            parse(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: x, labels: {{app: {app}}}}}\nstatus: {{podIP: 10.1.0.1}}\n"
            ))
        };
        let node = LocalNode {
            name: "n".into(),
            ..Default::default()
        };
        let on = Generations::new(true, 60, 1024);
        let generation = |g: &Generations, snapshot: &Snapshot, node: &LocalNode| {
            g.stamp(Ruleset::default(), snapshot, node)
                .enforced()
                .verdict_cache
                .map(|c| c.generation)
        };
        let a = generation(&on, &pod("a"), &node);
        assert_eq!(
            a,
            generation(&on, &pod("a"), &node),
            "same input, same sets"
        );
        assert_ne!(a, generation(&on, &pod("b"), &node), "a label changed");
        let moved = LocalNode {
            addresses: vec!["10.0.0.9".parse().unwrap()],
            ..node.clone()
        };
        assert_ne!(
            a,
            generation(&on, &pod("a"), &moved),
            "the Node's addresses"
        );
        assert_ne!(
            a,
            generation(&Generations::new(true, 30, 1024), &pod("a"), &node)
        );
        assert!(a.is_some_and(|g| g < 1 << 40));
        let off = Generations::new(false, 60, 1024);
        assert_eq!(generation(&off, &pod("a"), &node), None);
    }

    #[test]
    fn an_entry_goes_to_the_set_of_its_hook_verdict_and_family() {
        let cache = VerdictCache {
            generation: 5,
            timeout_secs: 30,
            max_entries: 64,
            lookup: true,
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
        assert_eq!(set, "tollgate-vc-0000000005-or-v6");
        assert_eq!(
            insert_op(&entry, &cache, &set),
            EntryOp::AddTuple {
                set: "tollgate-vc-0000000005-or-v6",
                src: "fd00::1".parse().unwrap(),
                protocol: 17,
                port: 53,
                dst: "fd00::2".parse().unwrap(),
                timeout_secs: 30,
            }
        );
    }
}
