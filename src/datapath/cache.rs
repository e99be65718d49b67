//! The kernel verdict cache's names and generations: which
//! `hash:ip,port,ip` set (`src,proto:port,dst`) holds a cached verdict of
//! one hook, family and verdict, the `list:set` the rules look it up
//! through, and the generation each ruleset the agent puts in force caches
//! under. Pure: it never writes the kernel (the connection workers add
//! entries through `workers::cache`, reconcile creates and destroys the
//! sets) and never reads a clock.
//!
//! # Why a stale verdict cannot outlive a change
//!
//! A ruleset's generation is a digest of everything its decisions are
//! made from: the snapshot it was compiled from (policies and inventory),
//! the local Node (name, labels, addresses), tollgate's version, and the
//! cache's timeout and bound ([`generation_of`]). Any policy or inventory
//! change gives a new generation; an unchanged one (a SIGHUP, a restart)
//! the same, whose entries are still right. The rules that answer from the
//! cache name a lookup set per hook, family and verdict ([`cache_list`]),
//! which names no generation; each holds the set of the generation of the
//! ruleset it is installed for. The bridge to a ruleset of another
//! generation (written before the tables that widen the queuing, all of
//! it before the new ruleset decides its first connection) takes the
//! current generation's sets out of the lookups and puts the new one's
//! in when they were created ahead, none otherwise, and the narrowing
//! puts them in. A worker adds an entry only to the sets of the generation
//! of the ruleset that made the decision, so an entry of an older ruleset
//! lands in sets no lookup holds (or that are already destroyed), or in
//! those of a ruleset that decides the same; the new generation's sets
//! answer nothing before it decides. A new generation writes no rule: it
//! costs set writes only.

use std::collections::BTreeMap;
use std::sync::Arc;

use sha1::{Digest, Sha1};

use crate::compile::LocalNode;
use crate::decide::CacheEntry;
use crate::model::{Memo, Object, Snapshot};
use crate::packet::flow::{LocalSide, Verdict};
use crate::ruleset::{Ruleset, VerdictCache};
use crate::selection::group::{AddressGroupSpec, Slices};

use super::ipset_netlink::EntryOp;
use super::state::{counted_rule, Family, Hook};

/// Prefix of the verdict cache sets' names.
pub const CACHE_SET_PREFIX: &str = "tollgate-vc-";
/// Prefix of the verdict cache's lookup sets' names.
pub const CACHE_LIST_PREFIX: &str = "tollgate-vcl-";
/// The owned chain a cached Allow jumps to (mark, connmark, accept).
pub const CACHED_ALLOW_CHAIN: &str = "TOLLGATE-CACHED-ALLOW";
/// The owned chain a cached Drop jumps to.
pub const CACHED_DROP_CHAIN: &str = "TOLLGATE-CACHED-DROP";
/// The owned chain a cached Reject jumps to: it rejects in the filter
/// table; in the mangle table it sets the reject mark, and the filter
/// table rejects.
pub const CACHED_REJECT_CHAIN: &str = "TOLLGATE-CACHED-REJECT";
/// Prefix of the chains above: the rules of these chains that carry out
/// a verdict count the hits ([`hit_counters`]).
const CACHED_CHAIN_PREFIX: &str = "TOLLGATE-CACHED-";
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
    format!(
        "{CACHE_SET_PREFIX}{:010x}-{}",
        generation & mask(),
        suffix(hook, verdict, family)
    )
}

/// The lookup set of one hook, verdict and family, which the rules name:
/// `tollgate-vcl-<hook><verdict>-<family>`, e.g. `tollgate-vcl-ia-v4`. It
/// holds the set of the generation answered from ([`cache_set`]), or
/// none.
pub fn cache_list(hook: Hook, verdict: CachedVerdict, family: Family) -> String {
    format!("{CACHE_LIST_PREFIX}{}", suffix(hook, verdict, family))
}

/// The generation a set named by [`cache_set`] belongs to.
pub fn generation_of_set(name: &str) -> Option<u64> {
    let hex = name.strip_prefix(CACHE_SET_PREFIX)?.split('-').next()?;
    (hex.len() == 10)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// `<hook><verdict>-<family>`.
fn suffix(hook: Hook, verdict: CachedVerdict, family: Family) -> String {
    let hook = match hook {
        Hook::Input => 'i',
        Hook::Forward => 'f',
        Hook::Output => 'o',
    };
    let family = match family {
        Family::V4 => "v4",
        Family::V6 => "v6",
    };
    format!("{hook}{}-{family}", verdict.letter())
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

/// The packet counters (`[packets:bytes]`) of the rules that count the
/// cache's answers, by rule, from `iptables-save -c` output of one
/// family, every table of it in one reading (the family and the table
/// prefix each rule's text, so readings of both families can be joined
/// and the same rule in two tables is two). Only lookup rules (`ctstate
/// NEW`) jump to the cached verdicts' chains, so each packet there is a
/// connection the cache answered, and it meets exactly one of the rules
/// counted: the first that carries the verdict out (a `MARK`, a `DROP`, a
/// `REJECT`; a cached Allow's `CONNMARK`, DNS and `ACCEPT` rules come
/// after its `MARK`). Those chains name no generation, so their counters
/// run on across generations ([`super::plan`]'s cached chains).
pub fn hit_counters(save_with_counters: &str, family: Family) -> HitReading {
    let mut table = "";
    let mut reading = HitReading::new();
    for line in save_with_counters.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name;
        } else if let Some((packets, rule)) =
            counted_rule(line).filter(|(_, rule)| counts_hits(rule))
        {
            reading.insert(format!("{family:?} {table} {rule}"), packets);
        }
    }
    reading
}

/// Whether `rule` (`-A CHAIN …`) is one of a cached verdict's chain that
/// carries the verdict out.
fn counts_hits(rule: &str) -> bool {
    let Some(chain) = rule
        .strip_prefix("-A ")
        .and_then(|rest| rest.split(' ').next())
    else {
        return false;
    };
    let target = rule.rsplit_once(" -j ").map(|(_, target)| target);
    chain.starts_with(CACHED_CHAIN_PREFIX)
        && target.is_some_and(|target| {
            ["MARK ", "REJECT"].iter().any(|t| target.starts_with(t)) || target == "DROP"
        })
}

/// The hit-counting rules' packet counters at one reading, by rule.
pub type HitReading = std::collections::BTreeMap<String, u64>;

/// Counts the connections the cache answered from successive readings of
/// the counters [`hit_counters`] reads. A rule's counter counts from zero
/// when the rule is installed, so what a rule gained is its reading minus
/// its last one, or its whole reading when it is new or was installed
/// again (a drift repair, a chain rewritten because the marks or DNS
/// snooping changed). A rule removed or rewritten since the last reading
/// takes the hits it counted after that reading with it; a new generation
/// rewrites none of them.
#[derive(Clone, Debug, Default)]
pub struct HitCount {
    last: HitReading,
}

impl HitCount {
    /// Takes `reading`; returns the hits gained since the last one.
    pub fn gained(&mut self, reading: HitReading) -> u64 {
        let gained = reading
            .iter()
            .map(|(rule, &packets)| match self.last.get(rule) {
                Some(&before) if before <= packets => packets - before,
                _ => packets,
            })
            .fold(0, u64::saturating_add);
        self.last = reading;
        gained
    }
}

/// The generation of the ruleset compiled from `snapshot` for `node`:
/// 40 bits of the SHA-1 of everything its decisions are made from. The
/// objects are digested in their serialized form, which leaves out what
/// the API server changes without changing a decision (`resourceVersion`,
/// `uid`, timestamps, a policy's `status`) and where a file put them: in
/// Kubernetes mode every update of a watched object is a reload, and one
/// that changed nothing tollgate reads must keep the cache's sets.
pub fn generation_of(
    snapshot: &Snapshot,
    groups: Option<&Slices>,
    node: &LocalNode,
    timeout_secs: u32,
    max_entries: u32,
) -> u64 {
    let mut digest = snapshot_digest(snapshot, node, timeout_secs, max_entries, |o| {
        object_digest(o)
    });
    for (name, slice) in groups.into_iter().flatten() {
        digest_slice(&mut digest, name, &slice_digest(slice));
    }
    finish(digest)
}

/// The digest of everything but the groups: of each object's digest,
/// as `digest_of` gives it ([`object_digest`], or a digest kept for the
/// same object).
fn snapshot_digest(
    snapshot: &Snapshot,
    node: &LocalNode,
    timeout_secs: u32,
    max_entries: u32,
    mut digest_of: impl FnMut(&Arc<Object>) -> [u8; 20],
) -> Sha1 {
    let mut digest = Sha1::new();
    digest.update(env!("CARGO_PKG_VERSION").as_bytes());
    digest.update(format!("\0{node:?}\0{timeout_secs}\0{max_entries}\0").as_bytes());
    for sourced in &snapshot.objects {
        digest.update(digest_of(&sourced.object));
    }
    digest
}

/// One object's digest, of its serialized form.
fn object_digest(object: &Object) -> [u8; 20] {
    let mut digest = Sha1::new();
    // Writing into a digest cannot fail, nor can serializing the model
    // (plain data, string keys).
    serde_json::to_writer(&mut digest, object).expect("the model serializes");
    digest.finalize().into()
}

/// One slice's own digest (controller mode: the peers' addresses come
/// from the groups).
fn slice_digest(slice: &AddressGroupSpec) -> [u8; 20] {
    let mut digest = Sha1::new();
    serde_json::to_writer(&mut digest, slice).expect("a slice serializes");
    digest.finalize().into()
}

fn digest_slice(digest: &mut Sha1, name: &str, slice: &[u8; 20]) {
    digest.update(name.as_bytes());
    digest.update(b"\0");
    digest.update(slice);
}

fn finish(digest: Sha1) -> u64 {
    let bytes = digest.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(first) & mask()
}

/// Stamps each ruleset with its generation when the cache is on. It
/// keeps what the last stamp digested, so that a stamp for the same
/// snapshot (an agent in controller mode reloading for its groups)
/// digests only the slices that changed: [`generation_of`] of the same
/// inputs, at the cost of the change.
#[derive(Clone, Debug)]
pub struct Generations {
    timeout_secs: u32,
    max_entries: u32,
    enabled: bool,
    /// The last snapshot and Node digested, and the digest after them.
    snapshot: Option<(Arc<Snapshot>, LocalNode, Sha1)>,
    /// Each object of the last snapshot digested, with its digest: a
    /// Kubernetes snapshot shares every unchanged object with the last
    /// one, and serializing all of them again was a tenth of an agent's
    /// CPU per change at 4,500 policies.
    objects: Memo<[u8; 20]>,
    /// Each slice digested, with its digest.
    slices: BTreeMap<String, (Arc<AddressGroupSpec>, [u8; 20])>,
}

impl Generations {
    pub fn new(enabled: bool, timeout_secs: u32, max_entries: u32) -> Generations {
        Generations {
            timeout_secs,
            max_entries,
            enabled,
            snapshot: None,
            objects: Memo::default(),
            slices: BTreeMap::new(),
        }
    }

    /// `ruleset`, compiled from `snapshot` (and, in controller mode,
    /// `groups`) for `node`, with its generation when the cache is on.
    pub fn stamp(
        &mut self,
        ruleset: Ruleset,
        snapshot: &Arc<Snapshot>,
        groups: Option<&Slices>,
        node: &LocalNode,
    ) -> Ruleset {
        if !self.enabled {
            return ruleset;
        }
        let kept = self
            .snapshot
            .as_ref()
            .filter(|(s, n, _)| Arc::ptr_eq(s, snapshot) && n == node);
        let mut digest = match kept {
            Some((_, _, digest)) => digest.clone(),
            None => {
                let digest = snapshot_digest(
                    snapshot,
                    node,
                    self.timeout_secs,
                    self.max_entries,
                    |object| {
                        *self
                            .objects
                            .visit(object, |_| false, || object_digest(object))
                    },
                );
                self.objects.sweep();
                self.snapshot = Some((Arc::clone(snapshot), node.clone(), digest.clone()));
                digest
            }
        };
        let none = Slices::new();
        let held = groups.unwrap_or(&none);
        self.slices.retain(|name, _| held.contains_key(name));
        for (name, slice) in held {
            let same = self
                .slices
                .get(name)
                .is_some_and(|(digested, _)| Arc::ptr_eq(digested, slice));
            if !same {
                self.slices
                    .insert(name.clone(), (Arc::clone(slice), slice_digest(slice)));
            }
            digest_slice(&mut digest, name, &self.slices[name].1);
        }
        ruleset.with_verdict_cache(VerdictCache {
            generation: finish(digest),
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
    fn hits_are_the_packet_counters_of_the_cached_verdicts_chains() {
        let save = "\
*filter
:TOLLGATE-INPUT - [0:0]
[7:420] -A TOLLGATE-INPUT -i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vc-00000000ab-ia-v4 src,dst,dst -j TOLLGATE-CACHED-ALLOW
[3:180] -A TOLLGATE-INPUT -i eth0 -m conntrack --ctstate NEW -m set --match-set tollgate-vc-00000000ab-id-v4 src,dst,dst -j TOLLGATE-CACHED-DROP
[40:2400] -A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
[9:540] -A TOLLGATE-CACHED-ALLOW -j MARK --set-xmark 0x100000/0xf00000
[9:540] -A TOLLGATE-CACHED-ALLOW -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
[2:120] -A TOLLGATE-CACHED-ALLOW -p udp -m udp --dport 53 -j NFLOG --nflog-group 101 --nflog-threshold 1
[1:60] -A TOLLGATE-CACHED-ALLOW -p tcp -m tcp --dport 53 -j NFQUEUE --queue-num 102
[6:360] -A TOLLGATE-CACHED-ALLOW -j ACCEPT
[3:180] -A TOLLGATE-CACHED-DROP -j DROP
[2:120] -A TOLLGATE-CACHED-REJECT -p tcp -j REJECT --reject-with tcp-reset
[1:60] -A TOLLGATE-CACHED-REJECT -j REJECT --reject-with icmp-admin-prohibited
[5:300] -A TOLLGATE-FORWARD -j MARK --set-xmark 0x100000/0xf00000
COMMIT
*mangle
[4:240] -A TOLLGATE-CACHED-REJECT -j MARK --set-xmark 0x200000/0xf00000
[4:240] -A TOLLGATE-CACHED-REJECT -j ACCEPT
COMMIT
";
        // Each answer once: an Allow at its MARK (not again at CONNMARK,
        // DNS or ACCEPT), a Drop, a filter Reject at whichever REJECT
        // took it, a mangle Reject at its MARK; no lookup rule (they are
        // replaced by every generation) and no other chain.
        let reading = hit_counters(save, Family::V4);
        assert_eq!(reading.values().sum::<u64>(), 9 + 3 + 2 + 1 + 4);
        assert_eq!(reading.len(), 5);
        assert_eq!(
            reading["V4 mangle -A TOLLGATE-CACHED-REJECT -j MARK --set-xmark 0x200000/0xf00000"],
            4
        );
        assert!(reading
            .keys()
            .all(|rule| rule.contains(" -A TOLLGATE-CACHED-")));
        // The same rule text in two tables is two rules.
        let drop = "[3:180] -A TOLLGATE-CACHED-DROP -j DROP\nCOMMIT\n";
        let both = hit_counters(&format!("*filter\n{drop}*mangle\n{drop}"), Family::V4);
        assert_eq!(both.len(), 2);
        assert!(hit_counters("[x:1] -A TOLLGATE-CACHED-DROP -j DROP\n", Family::V4).is_empty());
        assert!(hit_counters("", Family::V6).is_empty());
    }

    #[test]
    fn hits_are_counted_across_rules_replaced_and_installed_again() {
        let reading = |rules: &[(&str, u64)]| -> HitReading {
            rules.iter().map(|(r, n)| (r.to_string(), *n)).collect()
        };
        let mut count = HitCount::default();
        assert_eq!(count.gained(reading(&[("a", 5), ("b", 1)])), 6);
        assert_eq!(count.gained(reading(&[("a", 9), ("b", 1)])), 4);
        // A new generation: a's rules are gone, c's count from zero.
        assert_eq!(count.gained(reading(&[("c", 3)])), 3);
        // c installed again by a drift repair: its counter restarted.
        assert_eq!(count.gained(reading(&[("c", 2)])), 2);
        // a's generation came back: its rules count from zero again.
        assert_eq!(count.gained(reading(&[("a", 1), ("c", 2)])), 1);
        assert_eq!(count.gained(HitReading::new()), 0);
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
            let (objects, problems) = crate::decode::parse_documents("a.yaml".as_ref(), yaml);
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
            g.clone()
                .stamp(Ruleset::default(), &Arc::new(snapshot.clone()), None, node)
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
        // What the API server changes at every update of an object, and
        // where the object was read from, change no decision.
        let bookkeeping = parse(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x, labels: {app: a}, \
             resourceVersion: '81', uid: 0e7c, generation: 3, creationTimestamp: '2026-11-27T10:00:00Z'}\n\
             status: {podIP: 10.1.0.1}\n",
        );
        assert_eq!(a, generation(&on, &bookkeeping, &node), "bookkeeping");
        let mut elsewhere = pod("a");
        elsewhere.objects[0].origin = std::path::Path::new("kubernetes:Pod").into();
        assert_eq!(a, generation(&on, &elsewhere, &node), "origin");
        let policy = |status: &str| {
            parse(&format!(
                "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\n\
                 metadata: {{name: c}}\nspec: {{priority: 1, tier: application, \
                 appliedTo: [{{podSelector: {{}}}}], ingress: [{{action: Drop}}]}}\n{status}"
            ))
        };
        assert_eq!(
            generation(&on, &policy(""), &node),
            generation(
                &on,
                &policy("status: {phase: Realized, observedGeneration: 2}\n"),
                &node
            ),
            "a policy's status"
        );
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

    /// Stamps for one snapshot and a changing set of slices (changed,
    /// added, removed) equal the whole digest of the same inputs, and
    /// change with the groups. Mutation: a kept slice digest reused when
    /// the slice's content changed (compared by name, not by pointer) →
    /// the second stamp equals the first.
    #[test]
    fn stamps_for_one_snapshot_follow_the_groups_and_equal_the_whole_digest() {
        let snapshot = Arc::new(Snapshot::default());
        let node = LocalNode {
            name: "n".into(),
            ..Default::default()
        };
        let slice = |n: u32, ip: &str| {
            Arc::new(AddressGroupSpec {
                selection: "{}".into(),
                slice: n,
                slices: Vec::new(),
                members: vec![crate::selection::group::GroupMember {
                    ips: [ip.parse().unwrap()].into(),
                    named_ports: Box::default(),
                }],
            })
        };
        let mut generations = Generations::new(true, 60, 1024);
        let mut stamps = Vec::new();
        let mut groups = Slices::new();
        groups.insert("k-0".into(), slice(0, "10.0.0.1"));
        groups.insert("k-1".into(), slice(1, "10.0.0.2"));
        let steps: [&dyn Fn(&mut Slices); 3] = [
            &|g| {
                g.insert("k-1".into(), slice(1, "10.0.0.3"));
            },
            &|g| {
                g.insert("k-2".into(), slice(2, "10.0.0.4"));
            },
            &|g| {
                g.remove("k-0");
            },
        ];
        for step in [&(|_: &mut Slices| {}) as &dyn Fn(&mut Slices)]
            .into_iter()
            .chain(steps)
        {
            step(&mut groups);
            let stamped = generations
                .stamp(Ruleset::default(), &snapshot, Some(&groups), &node)
                .enforced()
                .verdict_cache
                .map(|c| c.generation)
                .unwrap();
            assert_eq!(
                stamped,
                generation_of(&snapshot, Some(&groups), &node, 60, 1024)
            );
            stamps.push(stamped);
        }
        stamps.dedup();
        assert_eq!(
            stamps.len(),
            4,
            "each change of the groups a new generation"
        );
    }

    /// A snapshot that shares all but one object with the last one
    /// stamps what the whole digest gives, and a different generation:
    /// the digests kept for the shared objects never stand for the
    /// changed one. Mutations: a kept digest looked up by the object's
    /// position instead of its address (before `Memo`) → the changed Pod
    /// keeps the old digest and the stamp the old generation: fails; one
    /// digest for every object → fails. (That `Memo` finds the object
    /// itself only is `model::memo`'s test.)
    #[test]
    fn a_snapshot_sharing_objects_reuses_their_digests_and_not_a_changed_ones() {
        let (objects, problems) = crate::decode::parse_documents(
            "a.yaml".as_ref(),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x, labels: {app: a}}\n\
             status: {podIP: 10.1.0.1}\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let node = LocalNode::default();
        let first = Arc::new(Snapshot { objects });
        let mut next = (*first).clone();
        let crate::model::Object::Pod(pod) = Arc::make_mut(&mut next.objects[1].object) else {
            panic!("a Pod");
        };
        pod.metadata.labels.insert("app".into(), "b".into());
        assert!(Arc::ptr_eq(
            &first.objects[0].object,
            &next.objects[0].object
        ));
        let next = Arc::new(next);
        let mut generations = Generations::new(true, 60, 1024);
        let stamp = |g: &mut Generations, s: &Arc<Snapshot>| {
            g.stamp(Ruleset::default(), s, None, &node)
                .enforced()
                .verdict_cache
                .map(|c| c.generation)
                .unwrap()
        };
        let a = stamp(&mut generations, &first);
        let b = stamp(&mut generations, &next);
        assert_eq!(a, generation_of(&first, None, &node, 60, 1024));
        assert_eq!(b, generation_of(&next, None, &node, 60, 1024));
        assert_ne!(a, b, "the label change is a new generation");
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
