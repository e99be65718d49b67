//! The resolve-ahead schedule on a clock the tests move.

use super::*;

fn selectors(names: &[&str]) -> Vec<FqdnPattern> {
    names.iter().map(|n| FqdnPattern::new(n)).collect()
}

fn schedule() -> ResolveSchedule {
    ResolveSchedule::new(ResolveBounds::default())
}

#[test]
fn only_exact_selectors_are_resolved_and_new_ones_at_once() {
    let mut s = schedule();
    assert!(s.reselect(
        &selectors(&["Www.Example.test.", "*.wild.test", "b.test", "b.test"]),
        1_000
    ));
    assert_eq!(
        s.names().collect::<Vec<_>>(),
        ["b.test", "www.example.test"]
    );
    assert_eq!(s.due(999), Vec::<String>::new());
    assert_eq!(s.due(1_000), ["b.test", "www.example.test"]);
    // Handed out: not due again until it reports back or a backoff passed.
    assert_eq!(s.due(1_500), Vec::<String>::new());
    assert_eq!(s.next_due(), Some(61_000));
}

#[test]
fn answered_names_are_refreshed_before_their_addresses_time_out() {
    let mut s = schedule();
    s.reselect(&selectors(&["a.test"]), 0);
    assert_eq!(s.due(0), ["a.test"]);
    assert!(!s.outcome(
        "a.test",
        ResolveOutcome::Answered {
            min_ttl_secs: Some(300)
        },
        100
    ));
    // 300 s timeout: asked again 30 s before it ends.
    assert_eq!(s.next_due(), Some(100 + 270_000));
    assert!(s.due(270_099).is_empty());
    assert_eq!(s.due(270_100), ["a.test"]);
    // A TTL below the floor times out after the floor (5 s): asked after 4 s.
    s.outcome(
        "a.test",
        ResolveOutcome::Answered {
            min_ttl_secs: Some(0),
        },
        300_000,
    );
    assert_eq!(s.next_due(), Some(304_000));
    // Above the ceiling: the ceiling counts.
    let mut capped = ResolveSchedule::new(ResolveBounds {
        max_ttl_secs: 60,
        ..ResolveBounds::default()
    });
    capped.reselect(&selectors(&["a.test"]), 0);
    capped.due(0);
    capped.outcome(
        "a.test",
        ResolveOutcome::Answered {
            min_ttl_secs: Some(86_400),
        },
        0,
    );
    assert_eq!(capped.next_due(), Some(54_000));
}

#[test]
fn refresh_lead_is_a_tenth_and_at_least_a_second() {
    assert_eq!(refresh_after_ms(1), 1_000);
    assert_eq!(refresh_after_ms(2), 1_000);
    assert_eq!(refresh_after_ms(5), 4_000);
    assert_eq!(refresh_after_ms(100), 90_000);
}

#[test]
fn failures_back_off_exponentially_and_are_reported_once() {
    let mut s = schedule();
    s.reselect(&selectors(&["dead.test"]), 0);
    let mut now = 0;
    let mut waits = Vec::new();
    let mut first = Vec::new();
    for _ in 0..9 {
        assert_eq!(s.due(now), ["dead.test"]);
        first.push(s.outcome("dead.test", ResolveOutcome::Failed, now));
        let next = s.next_due().unwrap();
        waits.push(next - now);
        now = next;
    }
    assert_eq!(
        waits,
        [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]
    );
    assert_eq!(first.iter().filter(|f| **f).count(), 1);
    assert!(first[0]);
    // An answer resets the backoff; the next failure is reported again.
    s.due(now);
    s.outcome(
        "dead.test",
        ResolveOutcome::Answered {
            min_ttl_secs: Some(60),
        },
        now,
    );
    let now = s.next_due().unwrap();
    s.due(now);
    assert!(s.outcome("dead.test", ResolveOutcome::Failed, now));
    assert_eq!(s.next_due(), Some(now + 1_000));
}

#[test]
fn an_answer_without_addresses_is_asked_again_later() {
    let mut s = schedule();
    s.reselect(&selectors(&["nx.test"]), 0);
    s.due(0);
    assert!(!s.outcome(
        "nx.test",
        ResolveOutcome::Answered { min_ttl_secs: None },
        10
    ));
    assert_eq!(s.next_due(), Some(30_010));
}

#[test]
fn the_rate_bound_holds_names_for_the_next_second() {
    let mut s = ResolveSchedule::new(ResolveBounds {
        per_second: 2,
        ..ResolveBounds::default()
    });
    s.reselect(&selectors(&["a.test", "b.test", "c.test"]), 0);
    assert_eq!(s.due(0), ["a.test", "b.test"]);
    assert!(s.due(500).is_empty());
    assert_eq!(s.next_due(), Some(1_000));
    assert_eq!(s.due(1_000), ["c.test"]);
}

#[test]
fn removed_selectors_are_forgotten_and_kept_ones_keep_their_time() {
    let mut s = schedule();
    s.reselect(&selectors(&["a.test", "b.test"]), 0);
    s.due(0);
    s.outcome(
        "a.test",
        ResolveOutcome::Answered {
            min_ttl_secs: Some(100),
        },
        0,
    );
    assert!(!s.reselect(&selectors(&["a.test", "*.x.test"]), 10));
    assert_eq!(s.names().collect::<Vec<_>>(), ["a.test"]);
    assert_eq!(s.next_due(), Some(90_000));
    // A late outcome for a forgotten name changes nothing.
    assert!(!s.outcome("b.test", ResolveOutcome::Failed, 20));
    assert_eq!(s.names().count(), 1);
    // Back again: due at once.
    assert!(s.reselect(&selectors(&["a.test", "b.test"]), 30));
    assert_eq!(s.due(30), ["b.test"]);
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
