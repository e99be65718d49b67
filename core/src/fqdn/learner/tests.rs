use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;
use crate::fqdn::FqdnLookup;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

fn res(names: &[&str], last: u8, ttl: u32) -> Resolution {
    Resolution {
        names: names.iter().map(|n| n.to_string()).collect(),
        address: ip(last),
        ttl,
    }
}

fn learner(patterns: &[&str], config: LearnerConfig) -> FqdnLearner {
    FqdnLearner::new(
        patterns.iter().map(|p| FqdnPattern::new(p)).collect(),
        config,
    )
}

fn config(min_ttl: u32, per_name: usize, total: usize) -> LearnerConfig {
    LearnerConfig {
        min_ttl_secs: min_ttl,
        max_ttl_secs: DEFAULT_MAX_TTL_SECS,
        max_addresses_per_name: per_name,
        max_addresses: total,
    }
}

fn add(selector: usize, last: u8, timeout_secs: u32) -> IpsetChange {
    IpsetChange::Add {
        selector,
        address: ip(last),
        timeout_secs,
    }
}

#[test]
fn answer_is_added_to_every_matching_selector() {
    let mut l = learner(
        &["*.github.com", "www.github.com", "example.org"],
        LearnerConfig::default(),
    );
    let changes = l.learn(&[res(&["www.github.com"], 1, 60)], 1_000);
    assert_eq!(changes, vec![add(0, 1, 60), add(1, 1, 60)]);
    let star = FqdnPattern::new("*.github.com");
    assert!(l.resolves_to(&star, ip(1), 1_000));
    assert!(l.resolves_to(&star, ip(1), 60_999));
    assert!(!l.resolves_to(&star, ip(1), 61_000));
    assert!(!l.resolves_to(&FqdnPattern::new("example.org"), ip(1), 1_000));
    assert!(!l.resolves_to(&FqdnPattern::new("unknown.test"), ip(1), 1_000));
    assert!(l.at(2_000).resolves_to(&star, ip(1)));
    assert_eq!(l.counters().learned, 2);
}

#[test]
fn names_matching_no_selector_are_not_remembered() {
    let mut l = learner(&["api.example.com"], LearnerConfig::default());
    assert!(l.learn(&[res(&["other.example.com"], 1, 60)], 0).is_empty());
    assert_eq!(l.records(), 0);
}

#[test]
fn cname_target_matching_a_selector_is_learned() {
    let mut l = learner(&["*.cdn.test"], LearnerConfig::default());
    let changes = l.learn(&[res(&["www.shop.test", "edge7.cdn.test"], 4, 30)], 0);
    assert_eq!(changes, vec![add(0, 4, 30)]);
}

#[test]
fn ttl_floor_and_ceiling() {
    let mut l = learner(&["a.test"], config(10, 100, 1000));
    assert_eq!(l.learn(&[res(&["a.test"], 1, 2)], 0), vec![add(0, 1, 10)]);
    let mut l = learner(&["a.test"], config(0, 100, 1000));
    // TTL 0 must not become ipset timeout 0 (= permanent).
    assert_eq!(l.learn(&[res(&["a.test"], 1, 0)], 0), vec![add(0, 1, 1)]);
    // The ceiling (one day by default) bounds a forged 25-day TTL.
    assert_eq!(
        l.learn(&[res(&["a.test"], 2, 0x7fff_ffff)], 0),
        vec![add(0, 2, DEFAULT_MAX_TTL_SECS)]
    );
    let mut l = learner(
        &["a.test"],
        LearnerConfig {
            max_ttl_secs: u32::MAX,
            ..config(0, 100, 1000)
        },
    );
    assert_eq!(
        l.learn(&[res(&["a.test"], 2, u32::MAX)], 0),
        vec![add(0, 2, MAX_IPSET_TIMEOUT_SECS)]
    );
    // The ceiling wins over the floor.
    let mut l = learner(
        &["a.test"],
        LearnerConfig {
            max_ttl_secs: 60,
            ..config(300, 100, 1000)
        },
    );
    assert_eq!(l.learn(&[res(&["a.test"], 3, 30)], 0), vec![add(0, 3, 60)]);
}

#[test]
fn repeated_answer_refreshes_only_when_it_extends() {
    let mut l = learner(&["a.test"], config(0, 100, 1000));
    assert_eq!(l.learn(&[res(&["a.test"], 1, 60)], 0), vec![add(0, 1, 60)]);
    // Same answer 500 ms later: extends by less than a second, no write.
    assert!(l.learn(&[res(&["a.test"], 1, 60)], 500).is_empty());
    // Shorter TTL never shortens the entry.
    assert!(l.learn(&[res(&["a.test"], 1, 5)], 10_000).is_empty());
    assert_eq!(
        l.learn(&[res(&["a.test"], 1, 60)], 30_000),
        vec![add(0, 1, 60)]
    );
    assert!(l.resolves_to(&FqdnPattern::new("a.test"), ip(1), 89_999));
    let c = l.counters();
    assert_eq!((c.learned, c.refreshed), (1, 1));
}

#[test]
fn per_name_bound_evicts_the_oldest_address() {
    let mut l = learner(&["*.test"], config(0, 3, 1000));
    for last in 1..=3 {
        l.learn(&[res(&["cdn.test"], last, 60)], u64::from(last));
    }
    // Refresh address 1 so that 2 is now the oldest.
    l.learn(&[res(&["cdn.test"], 1, 120)], 10);
    let changes = l.learn(&[res(&["cdn.test"], 4, 60)], 20);
    assert_eq!(
        changes,
        vec![
            IpsetChange::Remove {
                selector: 0,
                address: ip(2)
            },
            add(0, 4, 60),
        ]
    );
    let p = FqdnPattern::new("*.test");
    assert!(!l.resolves_to(&p, ip(2), 20));
    assert!(l.resolves_to(&p, ip(1), 20));
    assert_eq!(l.records(), 3);
    assert_eq!(l.counters().evicted, 1);
}

#[test]
fn eviction_keeps_an_address_another_name_still_backs() {
    let mut l = learner(&["*.test"], config(0, 1, 1000));
    l.learn(&[res(&["a.test"], 1, 60), res(&["b.test"], 1, 60)], 0);
    // a.test moves on to another address; b.test still gives 192.0.2.1.
    let changes = l.learn(&[res(&["a.test"], 2, 60)], 1);
    assert_eq!(changes, vec![add(0, 2, 60)]);
    assert!(l.resolves_to(&FqdnPattern::new("*.test"), ip(1), 1));
}

#[test]
fn total_bound_evicts_globally_oldest() {
    let mut l = learner(&["*.test"], config(0, 100, 2));
    l.learn(&[res(&["a.test"], 1, 60)], 0);
    l.learn(&[res(&["b.test"], 2, 60)], 1);
    let changes = l.learn(&[res(&["c.test"], 3, 60)], 2);
    assert_eq!(
        changes,
        vec![
            IpsetChange::Remove {
                selector: 0,
                address: ip(1)
            },
            add(0, 3, 60),
        ]
    );
    assert_eq!(l.records(), 2);
}

#[test]
fn expire_forgets_without_writes() {
    let mut l = learner(&["a.test"], config(0, 100, 1000));
    l.learn(&[res(&["a.test"], 1, 10), res(&["a.test"], 2, 100)], 0);
    l.expire(10_000);
    assert_eq!(l.records(), 1);
    assert_eq!(l.installed(), 1);
    assert_eq!(l.counters().expired, 1);
    // Learned again after expiry: a new entry, not a refresh.
    assert_eq!(
        l.learn(&[res(&["a.test"], 1, 10)], 11_000),
        vec![add(0, 1, 10)]
    );
    assert_eq!(l.counters().learned, 3);
}

#[test]
fn restore_rebuilds_the_mirror_from_kernel_sets() {
    let mut l = learner(&["a.test", "*.b.test"], config(0, 100, 1000));
    let n = l.restore(
        &[
            RestoredEntry {
                selector: 1,
                address: ip(7),
                remaining_secs: 30,
            },
            RestoredEntry {
                selector: 9,
                address: ip(8),
                remaining_secs: 30,
            },
        ],
        5_000,
    );
    assert_eq!(n, 1);
    let p = FqdnPattern::new("*.b.test");
    assert!(l.resolves_to(&p, ip(7), 34_999));
    assert!(!l.resolves_to(&p, ip(7), 35_000));
    // An answer for another selector leaves the restored entry alone.
    assert_eq!(
        l.learn(&[res(&["a.test"], 7, 60)], 6_000),
        vec![add(0, 7, 60)]
    );
    assert!(l.resolves_to(&p, ip(7), 6_000));
    // A longer answer for the restored selector refreshes it.
    assert_eq!(
        l.learn(&[res(&["x.b.test"], 7, 60)], 6_000),
        vec![add(1, 7, 60)]
    );
}

#[test]
fn learn_reply_counts_parse_outcomes() {
    let mut l = learner(&["a.test"], LearnerConfig::default());
    assert_eq!(l.learn_reply(&[1, 2, 3], 0), Err(DnsError::Malformed));
    let c = l.counters();
    assert_eq!((c.parsed, c.failed), (0, 1));
}

proptest! {
    /// Whatever the sequence of answers, the bounds hold and every address
    /// the mirror allows was announced by an Add and not removed since.
    #[test]
    fn bounds_hold_and_mirror_matches_writes(
        steps in proptest::collection::vec((0u8..6, 0u8..20, 0u32..100, 0u64..5_000), 1..200),
    ) {
        let names = ["a.x.test", "b.x.test", "c.y.test", "d.y.test", "e.z.test", "f.other"];
        let mut l = learner(&["*.x.test", "*.test", "c.y.test"], config(1, 4, 10));
        let mut kernel: HashMap<(usize, IpAddr), u64> = HashMap::new();
        let mut now = 0u64;
        for (name, last, ttl, dt) in steps {
            now += dt;
            if dt > 4_000 {
                l.expire(now);
            }
            for change in l.learn(&[res(&[names[usize::from(name)]], last, ttl)], now) {
                match change {
                    IpsetChange::Add { selector, address, timeout_secs } => {
                        prop_assert!(timeout_secs >= 1);
                        kernel.insert((selector, address), now + u64::from(timeout_secs) * 1000);
                    }
                    IpsetChange::Remove { selector, address } => {
                        prop_assert!(kernel.remove(&(selector, address)).is_some());
                    }
                }
            }
            prop_assert!(l.records() <= 10);
            for (i, pattern) in l.selectors().to_vec().iter().enumerate() {
                for last in 0..20 {
                    let in_kernel = kernel.get(&(i, ip(last))).is_some_and(|e| *e > now);
                    prop_assert_eq!(l.resolves_to(pattern, ip(last), now), in_kernel);
                }
            }
        }
    }
}

#[test]
fn reselect_keeps_entries_of_kept_selectors_only() {
    let mut l = learner(&["a.test", "b.test"], LearnerConfig::default());
    l.learn(&[res(&["a.test"], 1, 60), res(&["b.test"], 2, 60)], 0);
    assert_eq!(
        l.entries(10_500),
        vec![
            RestoredEntry {
                selector: 0,
                address: ip(1),
                remaining_secs: 50
            },
            RestoredEntry {
                selector: 1,
                address: ip(2),
                remaining_secs: 50
            },
        ]
    );
    let next = l.reselect(
        vec![FqdnPattern::new("c.test"), FqdnPattern::new("b.test")],
        10_000,
    );
    assert!(next.resolves_to(&FqdnPattern::new("b.test"), ip(2), 59_000));
    assert!(!next.resolves_to(&FqdnPattern::new("b.test"), ip(2), 60_000));
    assert!(!next.resolves_to(&FqdnPattern::new("a.test"), ip(1), 10_000));
    assert!(!next.resolves_to(&FqdnPattern::new("c.test"), ip(1), 10_000));
    assert_eq!(next.counters(), l.counters());
}

#[test]
fn resolved_answers_mark_their_entries_until_they_expire() {
    let mut l = learner(
        &["*.example.test", "www.example.test"],
        config(5, 100, 1000),
    );
    // Snooped first: both entries snooped.
    l.learn(&[res(&["www.example.test"], 1, 60)], 0);
    assert_eq!(l.source(1, ip(1)), Source::Snooped);
    // The same answer resolved ahead: no write needed, but marked.
    let changes = l.learn_from(&[res(&["www.example.test"], 1, 60)], Source::Resolved, 0);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(l.source(0, ip(1)), Source::Resolved);
    assert_eq!(l.source(1, ip(1)), Source::Resolved);
    // A later snooped answer keeps the mark.
    l.learn(&[res(&["www.example.test"], 1, 120)], 1_000);
    assert_eq!(l.source(1, ip(1)), Source::Resolved);
    // A reselect keeps it for kept selectors (under their new index).
    let next = l.reselect(vec![FqdnPattern::new("www.example.test")], 2_000);
    assert_eq!(next.source(0, ip(1)), Source::Resolved);
    // Expired: forgotten, a new snooped answer is snooped.
    l.expire(200_000);
    l.learn(&[res(&["www.example.test"], 1, 60)], 200_000);
    assert_eq!(l.source(1, ip(1)), Source::Snooped);
    // A name no selector matches marks nothing.
    l.learn_from(&[res(&["other.test"], 2, 60)], Source::Resolved, 200_000);
    assert_eq!(l.source(0, ip(2)), Source::Snooped);
}
