//! The resolve-ahead schedule on a clock the tests move.

use super::*;

use QueryType::{Aaaa, A};

/// Reselects `owned` (policy, its exact or wildcard names) at `now`.
fn reselect(s: &mut ResolveSchedule, owned: &[(&str, &[&str])], now: u64) -> bool {
    let patterns: Vec<(&str, FqdnPattern)> = owned
        .iter()
        .flat_map(|(owner, names)| names.iter().map(|n| (*owner, FqdnPattern::new(n))))
        .collect();
    let pairs: Vec<(&str, &FqdnPattern)> = patterns.iter().map(|(o, p)| (*o, p)).collect();
    s.reselect(&pairs, now)
}

fn schedule() -> ResolveSchedule {
    ResolveSchedule::new(ResolveBounds::default())
}

/// Every query the schedule hands out at `now`, in order.
fn take(s: &mut ResolveSchedule, now: u64) -> Vec<(String, QueryType)> {
    std::iter::from_fn(|| s.next(now))
        .take(10_000)
        .map(|q| (q.name, q.qtype))
        .collect()
}

fn q(name: &str, qtype: QueryType) -> ResolveQuery {
    ResolveQuery {
        name: name.into(),
        qtype,
    }
}

fn names(list: &[(&str, QueryType)]) -> Vec<(String, QueryType)> {
    list.iter().map(|(n, t)| (n.to_string(), *t)).collect()
}

fn answered(ttl: u32) -> ResolveOutcome {
    ResolveOutcome::Answered { min_ttl_secs: ttl }
}

const NX: ResolveOutcome = ResolveOutcome::Negative { ttl_secs: None };

#[test]
fn only_exact_selectors_are_resolved_each_type_at_once() {
    let mut s = schedule();
    assert!(reselect(
        &mut s,
        &[(
            "p",
            &["Www.Example.test.", "*.wild.test", "b.test", "b.test"]
        )],
        1_000
    ));
    assert_eq!(
        s.names().collect::<Vec<_>>(),
        ["b.test", "www.example.test"]
    );
    assert!(s.next(999).is_none());
    assert_eq!(
        take(&mut s, 1_000),
        names(&[
            ("b.test", A),
            ("b.test", Aaaa),
            ("www.example.test", A),
            ("www.example.test", Aaaa)
        ])
    );
    // Out: not handed out again until reported, or lost (the lease).
    assert!(take(&mut s, 1_500).is_empty());
    assert_eq!(s.next_due(1_500), Some(31_000));
    assert_eq!(take(&mut s, 31_000).len(), 4);
    assert!(s.next_due(0).is_some());
    assert_eq!(
        ResolveSchedule::new(ResolveBounds::default()).next_due(0),
        None
    );
}

#[test]
fn answered_queries_are_refreshed_before_their_addresses_time_out() {
    let mut s = schedule();
    reselect(&mut s, &[("p", &["a.test"])], 0);
    assert_eq!(take(&mut s, 0).len(), 2);
    assert!(!s.outcome(&q("a.test", A), answered(300), 100));
    assert!(!s.outcome(&q("a.test", Aaaa), answered(100), 100));
    // AAAA: 100 s timeout, asked 10 s before; A: 300 s, 30 s before.
    assert_eq!(s.next_due(200), Some(100 + 90_000));
    assert!(take(&mut s, 90_099).is_empty());
    assert_eq!(take(&mut s, 90_100), names(&[("a.test", Aaaa)]));
    s.outcome(&q("a.test", Aaaa), answered(1_000), 90_100);
    assert_eq!(take(&mut s, 270_100), names(&[("a.test", A)]));
    // A TTL below the floor times out after the floor (5 s): asked after 4 s.
    s.outcome(&q("a.test", A), answered(0), 300_000);
    assert_eq!(take(&mut s, 303_999), names(&[]));
    assert_eq!(take(&mut s, 304_000), names(&[("a.test", A)]));
    // Above the ceiling: the ceiling counts.
    let mut capped = ResolveSchedule::new(ResolveBounds {
        max_ttl_secs: 60,
        ..ResolveBounds::default()
    });
    reselect(&mut capped, &[("p", &["a.test"])], 0);
    take(&mut capped, 0);
    capped.outcome(&q("a.test", A), answered(86_400), 0);
    capped.outcome(&q("a.test", Aaaa), answered(86_400), 0);
    assert_eq!(capped.next_due(0), Some(54_000));
}

#[test]
fn refresh_lead_is_a_tenth_and_at_least_a_second() {
    assert_eq!(refresh_after_ms(1), 1_000);
    assert_eq!(refresh_after_ms(2), 1_000);
    assert_eq!(refresh_after_ms(5), 4_000);
    assert_eq!(refresh_after_ms(100), 90_000);
}

#[test]
fn each_record_type_stands_alone() {
    // dnsmasq refuses AAAA for a name it has only A records for: the A
    // answer keeps its own refresh, the AAAA query backs off alone.
    let mut s = schedule();
    reselect(&mut s, &[("p", &["a.test"])], 0);
    take(&mut s, 0);
    assert!(s.outcome(&q("a.test", Aaaa), NX, 10));
    assert!(!s.outcome(&q("a.test", A), answered(10), 20));
    assert_eq!(take(&mut s, 9_020), names(&[("a.test", A)]));
    s.outcome(&q("a.test", A), answered(10), 9_030);
    assert_eq!(take(&mut s, 18_030), names(&[("a.test", A)]));
    assert_eq!(take(&mut s, 30_010), names(&[("a.test", Aaaa)]));
    // The reverse: A times out, AAAA answers.
    let mut s = schedule();
    reselect(&mut s, &[("p", &["b.test"])], 0);
    take(&mut s, 0);
    assert!(s.outcome(&q("b.test", A), ResolveOutcome::Failed, 2_000));
    assert!(!s.outcome(&q("b.test", Aaaa), answered(60), 5));
    assert_eq!(take(&mut s, 3_000), names(&[("b.test", A)]));
    s.outcome(&q("b.test", A), answered(86_400), 3_000);
    assert!(take(&mut s, 54_004).is_empty());
    assert_eq!(take(&mut s, 54_005), names(&[("b.test", Aaaa)]));
}

#[test]
fn failures_back_off_exponentially_to_the_cap_and_are_reported_once() {
    let mut s = schedule();
    reselect(&mut s, &[("p", &["dead.test"])], 0);
    let query = q("dead.test", A);
    let mut now = 0;
    let mut waits = Vec::new();
    let mut first = Vec::new();
    // The AAAA query answers: only A fails.
    take(&mut s, 0);
    s.outcome(&q("dead.test", Aaaa), answered(86_400), 0);
    for _ in 0..11 {
        first.push(s.outcome(&query, ResolveOutcome::Failed, now));
        let next = s.next_due(now).unwrap();
        waits.push(next - now);
        now = next;
        assert_eq!(take(&mut s, now), names(&[("dead.test", A)]));
    }
    assert_eq!(
        waits,
        [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000]
    );
    assert_eq!(first, [[true].as_slice(), &[false; 10]].concat());
    // An answer resets the backoff; the next failure is reported again.
    s.outcome(&query, answered(60), now);
    let now = now + 54_000;
    assert_eq!(take(&mut s, now), names(&[("dead.test", A)]));
    assert!(s.outcome(&query, ResolveOutcome::Failed, now));
    assert_eq!(s.next_due(now), Some(now + 1_000));
}

#[test]
fn negative_answers_back_off_from_half_a_minute_and_honour_the_soa_ttl() {
    let mut s = schedule();
    reselect(&mut s, &[("p", &["nx.test"])], 0);
    take(&mut s, 0);
    s.outcome(&q("nx.test", Aaaa), answered(86_400), 0);
    let query = q("nx.test", A);
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        s.outcome(&query, NX, now);
        let next = s.next_due(now).unwrap();
        waits.push(next - now);
        now = next;
        assert_eq!(take(&mut s, now).len(), 1);
    }
    assert_eq!(waits, [30_000, 60_000, 120_000, 240_000, 300_000, 300_000]);
    // An SOA negative TTL longer than the backoff is waited out, up to
    // the cap.
    for (soa, wait) in [
        (Some(200), 200_000),
        (Some(3_600), 300_000),
        (Some(1), 30_000),
    ] {
        let mut s = schedule();
        reselect(&mut s, &[("p", &["nx.test"])], 0);
        take(&mut s, 0);
        s.outcome(&q("nx.test", Aaaa), answered(86_400), 0);
        s.outcome(&query, ResolveOutcome::Negative { ttl_secs: soa }, 0);
        assert_eq!(s.next_due(0), Some(wait), "{soa:?}");
    }
    // The cap is the setting's.
    let mut short = ResolveSchedule::new(ResolveBounds {
        max_backoff_ms: 10_000,
        ..ResolveBounds::default()
    });
    reselect(&mut short, &[("p", &["nx.test"])], 0);
    take(&mut short, 0);
    short.outcome(&q("nx.test", Aaaa), answered(86_400), 0);
    short.outcome(&query, NX, 0);
    assert_eq!(short.next_due(0), Some(10_000));
}

#[test]
fn the_rate_bound_holds_queries_for_the_next_second() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        per_second: 3,
        ..ResolveBounds::default()
    });
    reselect(&mut s, &[("p", &["a.test", "b.test"])], 0);
    assert_eq!(
        take(&mut s, 0),
        names(&[("a.test", A), ("a.test", Aaaa), ("b.test", A)])
    );
    assert!(take(&mut s, 500).is_empty());
    assert_eq!(s.next_due(500), Some(1_000));
    assert_eq!(take(&mut s, 1_000), names(&[("b.test", Aaaa)]));
}

#[test]
fn retries_after_negative_answers_have_their_own_small_rate() {
    let mut s = schedule();
    let bad: Vec<String> = (0..100).map(|i| format!("nx{i:03}.test")).collect();
    let bad: Vec<&str> = bad.iter().map(String::as_str).collect();
    reselect(&mut s, &[("p", &bad)], 0);
    let mut now = 0;
    // The first round: every query, within the global rate.
    let mut first_round = 0;
    while first_round < 200 {
        let batch = take(&mut s, now);
        assert!(batch.len() <= 100, "{}", batch.len());
        for (name, qtype) in &batch {
            s.outcome(&q(name, *qtype), NX, now);
        }
        first_round += batch.len();
        now += 1_000;
    }
    // Every retry is due half a minute later: five per second.
    let mut retried = 0;
    for second in 0..20 {
        let batch = take(&mut s, now + 30_000 + second * 1_000);
        assert!(batch.len() <= 5, "{batch:?}");
        retried += batch.len();
        for (name, qtype) in &batch {
            s.outcome(&q(name, *qtype), NX, now + 30_000 + second * 1_000);
        }
    }
    assert_eq!(retried, 100);
    // A new name is not held back by them.
    reselect(&mut s, &[("p", &bad), ("q", &["good.test"])], now + 50_000);
    let batch = take(&mut s, now + 50_000);
    assert!(batch.contains(&("good.test".to_string(), A)), "{batch:?}");
    assert!(
        batch.contains(&("good.test".to_string(), Aaaa)),
        "{batch:?}"
    );
}

#[test]
fn queries_in_flight_stay_within_the_bound_and_each_policys_share() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        concurrency: 4,
        ..ResolveBounds::default()
    });
    let slow: Vec<String> = (0..40).map(|i| format!("slow{i:02}.test")).collect();
    let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
    reselect(&mut s, &[("ns/slow", &slow), ("cluster", &[])], 0);
    // Alone, the slow policy may take every thread.
    assert_eq!(take(&mut s, 0).len(), 4);
    // With a second policy, each has half: the slow one keeps its 4 until
    // they end, then gets 2; the other always finds a free one.
    reselect(
        &mut s,
        &[("ns/slow", &slow), ("cluster", &["web.test"])],
        10,
    );
    assert_eq!(take(&mut s, 10), Vec::new());
    for (name, qtype) in [("slow00.test", A), ("slow00.test", Aaaa)] {
        s.outcome(&q(name, qtype), ResolveOutcome::Failed, 2_000);
    }
    assert_eq!(
        take(&mut s, 2_000),
        names(&[("web.test", A), ("web.test", Aaaa)])
    );
    for (name, qtype) in [("slow01.test", A), ("slow01.test", Aaaa)] {
        s.outcome(&q(name, qtype), ResolveOutcome::Failed, 2_100);
    }
    s.outcome(&q("web.test", A), answered(5), 2_100);
    s.outcome(&q("web.test", Aaaa), answered(5), 2_100);
    // Now 0 out: 2 slow queries and nothing else.
    assert_eq!(take(&mut s, 2_100).len(), 2);
    // The other policy's refresh (4 s after its answer) finds room while
    // the slow ones hold theirs.
    assert_eq!(
        take(&mut s, 6_100),
        names(&[("web.test", A), ("web.test", Aaaa)])
    );
}

#[test]
fn policies_are_served_round_robin() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        concurrency: 64,
        ..ResolveBounds::default()
    });
    let many: Vec<String> = (0..10).map(|i| format!("m{i}.test")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    reselect(
        &mut s,
        &[
            ("a", &many),
            ("b", &["b1.test", "b2.test"]),
            ("c", &["c.test"]),
        ],
        0,
    );
    let order: Vec<(String, QueryType)> = take(&mut s, 0).into_iter().take(8).collect();
    assert_eq!(
        order,
        names(&[
            ("m0.test", A),
            ("b1.test", A),
            ("c.test", A),
            ("m0.test", Aaaa),
            ("b1.test", Aaaa),
            ("c.test", Aaaa),
            ("m1.test", A),
            ("b2.test", A),
        ])
    );
}

#[test]
fn queries_that_got_no_answer_take_at_most_half_the_threads() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        concurrency: 4,
        ..ResolveBounds::default()
    });
    let dead: Vec<String> = (0..4).map(|i| format!("d{i}.test")).collect();
    let dead: Vec<&str> = dead.iter().map(String::as_str).collect();
    reselect(&mut s, &[("p", &dead)], 0);
    let mut now = 0;
    // Two rounds of failures for all eight queries.
    for _ in 0..2 {
        let mut done = 0;
        while done < 8 {
            let batch = take(&mut s, now);
            for (name, qtype) in &batch {
                s.outcome(&q(name, *qtype), ResolveOutcome::Failed, now);
            }
            done += batch.len();
            now += 1;
        }
        now += 10_000;
    }
    // All due again: two go out, the other two threads stay free.
    assert_eq!(take(&mut s, now).len(), 2);
    reselect(&mut s, &[("p", &dead), ("p", &["new.test"])], now);
    assert_eq!(
        take(&mut s, now),
        names(&[("new.test", A), ("new.test", Aaaa)])
    );
}

#[test]
fn a_query_held_back_does_not_put_off_the_wake_for_a_later_one() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        concurrency: 2,
        lease_ms: 300,
        ..ResolveBounds::default()
    });
    reselect(&mut s, &[("p", &["s1.test", "s2.test"]), ("q", &[])], 0);
    reselect(
        &mut s,
        &[("p", &["s1.test", "s2.test"]), ("q", &["w.test"])],
        0,
    );
    // One each: p's share is out, the rest of p's queries are held.
    assert_eq!(take(&mut s, 0), names(&[("s1.test", A), ("w.test", A)]));
    // Held until the next rate window, but p's query's lease ends first.
    assert_eq!(s.next_due(100), Some(300));
    s.outcome(&q("w.test", A), answered(300), 100);
    s.outcome(&q("s1.test", A), ResolveOutcome::Failed, 100);
    assert_eq!(take(&mut s, 100).len(), 2);
}

#[test]
fn a_lost_query_is_due_again_after_its_lease() {
    let mut s = schedule();
    reselect(&mut s, &[("p", &["a.test"])], 0);
    assert_eq!(take(&mut s, 0).len(), 2);
    assert!(take(&mut s, 29_999).is_empty());
    assert_eq!(s.next_due(29_999), Some(30_000));
    assert_eq!(take(&mut s, 30_000).len(), 2);
}

#[test]
fn removed_selectors_are_forgotten_kept_ones_keep_their_time_and_shared_names_serve_both() {
    let mut s = schedule();
    reselect(&mut s, &[("p", &["a.test", "b.test"])], 0);
    take(&mut s, 0);
    s.outcome(&q("a.test", A), answered(100), 0);
    s.outcome(&q("a.test", Aaaa), answered(100), 0);
    assert!(!reselect(&mut s, &[("p", &["a.test", "*.x.test"])], 10));
    assert_eq!(s.names().collect::<Vec<_>>(), ["a.test"]);
    assert_eq!(s.next_due(10), Some(90_000));
    // A late outcome for a forgotten name changes nothing.
    assert!(!s.outcome(&q("b.test", A), ResolveOutcome::Failed, 20));
    assert_eq!(s.names().count(), 1);
    // Back again, in a second policy too: due at once, asked once.
    assert!(reselect(
        &mut s,
        &[("p", &["a.test", "b.test"]), ("q", &["b.test"])],
        30
    ));
    assert_eq!(take(&mut s, 30), names(&[("b.test", A), ("b.test", Aaaa)]));
    // A kept name keeps its time when it moves to another policy.
    reselect(&mut s, &[("q", &["a.test"])], 40);
    assert_eq!(s.next_due(40), Some(90_000));
}

#[test]
fn resolve_setting_reads_exact_and_off_only() {
    assert_eq!("exact".parse(), Ok(FqdnResolve::Exact));
    assert_eq!("off".parse(), Ok(FqdnResolve::Off));
    assert!("Exact".parse::<FqdnResolve>().is_err());
    assert_eq!(FqdnResolve::default(), FqdnResolve::Exact);
}

#[test]
fn resolve_setting_deserializes_from_yaml_text_and_bare_off() {
    let read = |yaml: &str| serde_saphyr::from_str::<FqdnResolve>(yaml).map_err(|e| e.to_string());
    assert_eq!(read("exact"), Ok(FqdnResolve::Exact));
    assert_eq!(read("off"), Ok(FqdnResolve::Off));
    assert_eq!(read("'off'"), Ok(FqdnResolve::Off));
    assert!(read("true").unwrap_err().contains("exact or off"));
    assert!(read("wildcard").unwrap_err().contains("exact or off"));
}
