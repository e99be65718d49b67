//! A running agent's Prometheus endpoint, scraped from inside its network
//! namespace (the agent listens on that namespace's loopback).

use std::collections::BTreeMap;

use super::netns::Netns;

/// Every sample of `http://ADDRESS/metrics` in `ns`, by series as exported
/// (`name{labels}`); panics unless the exposition is complete.
#[track_caller]
pub fn scrape(ns: &Netns, address: &str) -> BTreeMap<String, f64> {
    let text = ns.ok(&format!("curl -sf --max-time 5 http://{address}/metrics"));
    assert!(text.ends_with("# EOF\n"), "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of family `name` (whatever their labels);
/// panics when the family is not exported (a renamed or lost family must
/// not read as 0).
#[track_caller]
pub fn family_sum(samples: &BTreeMap<String, f64>, name: &str) -> f64 {
    let series: Vec<f64> = samples
        .iter()
        .filter(|(key, _)| key.as_str() == name || key.starts_with(&format!("{name}{{")))
        .map(|(_, value)| *value)
        .collect();
    assert!(!series.is_empty(), "family {name} not exported");
    series.iter().sum()
}
