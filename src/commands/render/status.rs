//! `tollgate status` as text: a summary of the agent, one health line per
//! queue, and — with `-o wide` or as `status queues` — every metric of the
//! agent and a table per kind of worker with every counter of its queues.
//! The default fits [`COLUMNS`]: a long value (a reason, an error) goes on
//! as many lines as it needs, under itself.

use std::fmt::Write as _;

use super::{table, COLUMNS};
use crate::status::{AntiSpoofReport, GuardedReport, QueueReport, ReloadReport, StatusReport};

/// Where a summary line's value starts.
const LABEL: usize = 20;

/// The queue counters that say something went wrong (every queue kind has
/// some of them): a queue with any of them above 0 is not `ok`.
const PROBLEMS: &[&str] = &[
    "restarts",
    "overflows",
    "unreadable",
    "verdict_errors",
    "kernel_queue_dropped",
    "kernel_user_dropped",
    "malformed",
    "bypassed",
    "inject_errors",
    "ipset_errors",
];

/// `label: value`, the value starting at column [`LABEL`] and wrapped to
/// fit [`COLUMNS`] (`wide`: on one line).
fn field(out: &mut String, label: &str, value: &str, wide: bool) {
    wrapped(
        out,
        &format!("{:<LABEL$}", format!("{label}:")),
        value,
        wide,
    );
}

/// `prefix` then `value`, wrapped at word boundaries to fit [`COLUMNS`]
/// (`wide`: on one line), each further line indented as wide as `prefix`.
fn wrapped(out: &mut String, prefix: &str, value: &str, wide: bool) {
    let indent = prefix.len();
    let width = COLUMNS.saturating_sub(indent).max(20);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in value.split(' ') {
        if !wide && !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    for (n, line) in lines.iter().enumerate() {
        let prefix = if n == 0 { prefix } else { "" };
        let _ = writeln!(out, "{prefix:<indent$}{line}");
    }
}

/// The anti-spoofing rows: a summary, each unguarded endpoint with the
/// reason, each guarded one that had packets dropped.
fn render_anti_spoofing(out: &mut String, report: Option<&AntiSpoofReport>, wide: bool) {
    let Some(report) = report else {
        return;
    };
    if !report.enabled {
        field(out, "anti-spoofing", "off (antiSpoofing.enabled)", wide);
        return;
    }
    let total = |g: &GuardedReport| g.dropped.values().sum::<u64>();
    let summary = format!(
        "{} endpoints guarded, {} dropped packets; {}",
        report.guarded.len(),
        report.guarded.iter().map(total).sum::<u64>(),
        match report.unguarded.len() {
            0 => "none unguarded".to_string(),
            n => format!("{n} UNGUARDED"),
        }
    );
    field(out, "anti-spoofing", &summary, wide);
    for u in &report.unguarded {
        wrapped(
            out,
            &format!("  {:<30} ", u.endpoint),
            &format!("UNGUARDED: {}", u.reason),
            wide,
        );
    }
    for g in report.guarded.iter().filter(|g| total(g) > 0) {
        let dropped: Vec<String> = g
            .dropped
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        wrapped(
            out,
            &format!("  {:<30} ", g.endpoint),
            &format!("{}: dropped {}", g.interface, dropped.join(", ")),
            wide,
        );
    }
}

/// `tollgate status` as text: the summary, then a line per queue; `wide`
/// adds every agent-level series and every queue's counters.
pub fn render_status(report: &StatusReport, wide: bool) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| field(&mut out, label, &value, wide);
    line("node", report.node_name.clone());
    line(
        "version",
        format!("{} (commit {})", report.version, report.commit),
    );
    line("uptime", format!("{}s", report.uptime_seconds));
    line("ruleset generation", report.ruleset_generation.to_string());
    line(
        "policies loaded",
        format!("{} ({} rules)", report.policies, report.rules),
    );
    line("enforced endpoints", report.enforced_endpoints.to_string());
    let source = if report.snapshot_complete {
        "complete snapshot"
    } else {
        "waiting for a complete snapshot"
    };
    line("policy source", source.to_string());
    if let Some(k) = &report.kubernetes {
        line(
            "kubernetes",
            format!(
                "{}, {} skipped, {} partly enforced (tollgate get skipped)",
                if k.synced {
                    "synced"
                } else {
                    "NOT SYNCED (first list pending, or a watch failed: listing again)"
                },
                k.skipped,
                k.partly_enforced
            ),
        );
        if let Some(p) = &k.peers {
            let groups = match p.waiting {
                0 => format!("controller, {} groups in {} slices", p.needed, p.slices),
                n => format!(
                    "waiting for {n} groups of {} (the ruleset in force stays)",
                    p.needed
                ),
            };
            let lease = if p.controller_stale {
                "; controller STALE (Lease kube-system/tollgate-controller absent or not renewed: the groups held stay enforced)"
            } else {
                ""
            };
            line("peers", format!("{groups}{lease}"));
        }
    }
    if let Some(inventory) = &report.inventory {
        line("inventory", inventory.clone());
    }
    let applied = report
        .last_applied_seconds_ago
        .map_or("never".to_string(), |s| format!("{s}s ago"));
    line("last applied", applied);
    let reload = match &report.last_reload {
        None => "none since start".to_string(),
        Some(ReloadReport {
            seconds_ago,
            error: None,
        }) => format!("applied {seconds_ago}s ago"),
        Some(ReloadReport {
            seconds_ago,
            error: Some(error),
        }) => format!("FAILED {seconds_ago}s ago: {error}"),
    };
    line("last reload", reload);
    let datapath = match &report.datapath_behind {
        None => "in sync".to_string(),
        Some(error) => format!("BEHIND, retrying: {error}"),
    };
    line("datapath", datapath);
    if let Some(hits) = report.verdict_cache_hits {
        line(
            "verdict cache",
            format!("{hits} connections answered by the kernel (read every drift check, or 10 s)"),
        );
    }
    if let Some(dns) = report.queues.iter().find(|q| q.worker == "dns") {
        let n = |key: &str| dns.counters.get(key).unwrap_or(0);
        line(
            "fqdn sets",
            format!(
                "{} addresses, {} evicted by fqdn.maxAddressesPerName/maxAddresses",
                n("addresses"),
                n("evicted")
            ),
        );
        line("fqdn set writes", fqdn_writes(dns));
    }
    if let Some(why) = &report.bridged_traffic_unseen {
        line("bridged traffic", format!("NOT SEEN: {why}"));
    }
    if !report.endpoint_traffic_unseen.is_empty() {
        line(
            "endpoint traffic",
            format!(
                "NOT SEEN for {} endpoint addresses (not enforced):",
                report.endpoint_traffic_unseen.len()
            ),
        );
        for unseen in &report.endpoint_traffic_unseen {
            let _ = writeln!(out, "  {unseen}");
        }
    }
    render_policy_warnings(&mut out, &report.policy_warnings, wide);
    render_anti_spoofing(&mut out, report.anti_spoofing.as_ref(), wide);
    let mut line = |label: &str, value: String| field(&mut out, label, &value, wide);
    line("fail mode", report.fail_mode.clone());
    let unknown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    let p = &report.process;
    line(
        "process",
        format!(
            "cpu {}s, resident {} MiB, fds {}/{}",
            unknown(p.cpu_seconds.map(|s| format!("{s:.2}"))),
            unknown(p.resident_bytes.map(|b| (b / (1024 * 1024)).to_string())),
            unknown(p.open_fds.map(|n| n.to_string())),
            unknown(p.max_fds.map(|n| n.to_string())),
        ),
    );
    line(
        "audit log",
        report
            .audit_log
            .as_ref()
            .map_or("off".to_string(), |p| p.display().to_string()),
    );
    line(
        "metrics",
        report
            .metrics_address
            .clone()
            .unwrap_or_else(|| "off".into()),
    );
    let _ = writeln!(out);
    out += &render_health(&report.queues);
    if !wide {
        return out;
    }
    // The agent-level series, as /metrics names them.
    if !report.agent_series.is_empty() {
        let header = ["METRIC", "VALUE"].map(String::from);
        let rows: Vec<[String; 2]> = std::iter::once(header)
            .chain(
                report
                    .agent_series
                    .iter()
                    .map(|row| [row.series.clone(), row.value.to_string()]),
            )
            .collect();
        let _ = writeln!(out);
        out += &table(&rows);
    }
    let _ = writeln!(out);
    out + &render_queues(report)
}

/// The DNS worker's set writes in one line: writes and the batches that
/// carried them, the write queue now and at its peak, replies held for
/// their writes (mean wait) and delayed by a full queue.
fn fqdn_writes(dns: &QueueReport) -> String {
    let n = |key: &str| dns.counters.get(key).unwrap_or(0);
    let held = n("replies_held");
    let wait = n("held_micros").checked_div(held).unwrap_or(0);
    format!(
        "{} in {} batches, queue {} (peak {}), {held} replies held {wait} µs avg, {} delayed",
        n("write_entries"),
        n("write_batches"),
        n("write_queue"),
        n("write_queue_peak"),
        n("replies_delayed"),
    )
}

/// One line per queue: its worker, `ok` or `CHECK` (a counter of
/// [`PROBLEMS`] above 0 since the start), the packets it received and
/// the problems counted.
fn render_health(queues: &[QueueReport]) -> String {
    let header = ["QUEUE", "WORKER", "HEALTH", "PACKETS", "PROBLEMS"].map(String::from);
    let rows: Vec<[String; 5]> = std::iter::once(header)
        .chain(queues.iter().map(|q| {
            let problems: Vec<String> = PROBLEMS
                .iter()
                .filter_map(|key| {
                    let n = q.counters.get(key).filter(|n| *n > 0)?;
                    Some(format!("{} {n}", key.replace('_', "-")))
                })
                .collect();
            [
                q.queue.to_string(),
                q.worker.clone(),
                if problems.is_empty() { "ok" } else { "CHECK" }.to_string(),
                q.counters
                    .get("packets")
                    .map_or("-".into(), |n| n.to_string()),
                if problems.is_empty() {
                    "-".to_string()
                } else {
                    problems.join(", ")
                },
            ]
        }))
        .collect();
    table(&rows)
}

/// `tollgate status queues`: one table per kind of worker, every counter
/// any of its queues has as a column (the kernel lists only the queues
/// bound now): `-` where a queue has no such counter.
pub fn render_queues(report: &StatusReport) -> String {
    let mut out = String::new();
    for (n, group) in report
        .queues
        .chunk_by(|a, b| a.worker == b.worker)
        .enumerate()
    {
        let mut keys: Vec<&str> = Vec::new();
        for (key, _) in group.iter().flat_map(|q| &q.counters.0) {
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
        let header = std::iter::once(group[0].worker.to_uppercase())
            .chain(keys.iter().map(|k| k.to_uppercase().replace('_', "-")))
            .collect();
        let rows: Vec<Vec<String>> = std::iter::once(header)
            .chain(group.iter().map(|q| {
                std::iter::once(q.queue.to_string())
                    .chain(
                        keys.iter()
                            .map(|k| q.counters.get(k).map_or("-".into(), |v| v.to_string())),
                    )
                    .collect()
            }))
            .collect();
        if n > 0 {
            let _ = writeln!(out);
        }
        out += &table(&rows);
    }
    out
}

/// Most policy warnings `status` prints; `-o json` lists them all.
const STATUS_WARNINGS: usize = 5;

/// `policy warnings:  N`, then the first few whole, one a line.
fn render_policy_warnings(out: &mut String, warnings: &[String], wide: bool) {
    if warnings.is_empty() {
        return;
    }
    field(out, "policy warnings", &warnings.len().to_string(), wide);
    for warning in warnings.iter().take(STATUS_WARNINGS) {
        let _ = writeln!(out, "  {warning}");
    }
    if warnings.len() > STATUS_WARNINGS {
        let _ = writeln!(
            out,
            "  … {} more (tollgate status -o json lists them)",
            warnings.len() - STATUS_WARNINGS
        );
    }
}
