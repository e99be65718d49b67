//! The monitoring assets of `docker/monitoring/`, checked by Prometheus's
//! own tool: `promtool check rules` on the alert rules and `promtool test
//! rules` on their unit tests (Debian's `prometheus` package ships
//! `promtool`; without it the test fails, naming the package). The
//! dashboard is read as Grafana reads it: every panel has a Prometheus
//! query, each naming only metrics of tollgate or the process, and uses
//! only the dashboard's own variables. That every dashboard query and
//! alert expression returns data from a running agent is
//! `tests/netns/observe.rs`'s `prometheus_scrapes_an_agent_and_every_dashboard_query_returns_data`.
#![allow(clippy::disallowed_methods)] // the tests run promtool.

use std::path::{Path, PathBuf};
use std::process::Command;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/monitoring")
}

fn promtool(args: &[&str]) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(monitoring())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool: {e} (install Debian's `prometheus` package: apt-get install prometheus)"
            )
        })
}

/// Mutation: `for: 2m` removed from TollgateNotReady — the unit test that
/// expects no alert at 2m fails.
#[test]
fn promtool_checks_the_alert_rules_and_their_unit_tests_pass() {
    let check = promtool(&["check", "rules", "alerts.yaml"]);
    let text = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "promtool check rules:\n{text}");
    assert!(text.contains("SUCCESS: 6 rules found"), "{text}");
    let test = promtool(&["test", "rules", "alerts.test.yaml"]);
    let text =
        String::from_utf8_lossy(&test.stdout).into_owned() + &String::from_utf8_lossy(&test.stderr);
    assert!(test.status.success(), "promtool test rules:\n{text}");
    // Every alert has a unit test that expects it to fire.
    let rules = std::fs::read_to_string(monitoring().join("alerts.yaml")).unwrap();
    let tests = std::fs::read_to_string(monitoring().join("alerts.test.yaml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        let firing = tests
            .split("alertname: ")
            .skip(1)
            .any(|rest| rest.starts_with(alert) && rest.contains("exp_labels"));
        assert!(firing, "{alert}: no unit test expects it to fire");
    }
}

/// The dashboard's queries, as Grafana would send them.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap().to_string();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            queries.push((title.clone(), target["expr"].as_str().unwrap().to_string()));
        }
    }
    queries
}

#[test]
fn every_dashboard_panel_queries_tollgate_metrics_with_its_own_variables() {
    let queries = dashboard_queries();
    let titles: std::collections::BTreeSet<&str> =
        queries.iter().map(|(t, _)| t.as_str()).collect();
    for expected in [
        "Verdicts by Tier and action",
        "Top rule hits",
        "Verdict latency",
        "Queue drops and unreadable",
        "L7 requests",
        "FQDN addresses",
        "Reloads",
        "Datapath apply duration",
        "Ready and datapath behind",
        "Worker restarts",
        "Process CPU",
        "Process memory",
    ] {
        assert!(titles.contains(expected), "no panel {expected:?}");
    }
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: {expr} names no metric");
        for name in names {
            assert!(
                name.starts_with("tollgate_") || name.starts_with("process_"),
                "{title}: {name}"
            );
        }
        for variable in expr.split('$').skip(1) {
            assert!(
                variable.starts_with("instance") || variable.starts_with("__rate_interval"),
                "{title}: unknown variable in {expr}"
            );
        }
        assert!(expr.contains("instance=~\"$instance\""), "{title}: {expr}");
    }
}

/// The metric names in a PromQL expression: the identifiers that start
/// with `tollgate_` or `process_`.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("tollgate_") || word.starts_with("process_"))
        .map(str::to_string)
        .collect()
}
