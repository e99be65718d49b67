//! Every rendering of the reading subcommands: `trace` as text, the `get`
//! tables (policies, endpoints, FQDN rows, skipped objects) and `status`
//! as text, and JSON or YAML where asked; every table drawn by the one
//! `table()`. Pure: from the answer to a string; it never asks the agent,
//! reads a file or prints.

use std::fmt::Write as _;

use super::get::FqdnRow;
use super::CommandError;
use crate::cli::{GetFilter, GetOutput, OutputFormat, SkippedFilter};
use crate::explain::{DirectionReport, EndpointReport, TraceEndpoint, TraceReport};
use crate::ruleset::PolicySummary;
use crate::status::{AntiSpoofReport, GuardedReport, ReloadReport, StatusReport};

/// `tollgate trace` as text (`verbose`: every rule consulted and the K8s
/// NetworkPolicies isolating each side) or JSON (everything, the
/// consulted rules and isolating policies included).
pub fn render_trace(
    report: &TraceReport,
    format: OutputFormat,
    verbose: bool,
) -> Result<String, CommandError> {
    if format == OutputFormat::Json {
        return Ok(json(report)? + "\n");
    }
    let mut out = String::new();
    let _ = writeln!(out, "verdict: {}", report.verdict);
    let side = |e: &TraceEndpoint, port: Option<u16>| {
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        match &e.name {
            Some(name) => format!("{}{port} ({name})", e.address),
            None => format!("{}{port}", e.address),
        }
    };
    let _ = writeln!(
        out,
        "  flow: {} {} -> {}",
        report.protocol,
        side(&report.src, report.src_port),
        side(&report.dst, report.dst_port)
    );
    for d in [&report.egress, &report.ingress] {
        let _ = writeln!(out, "  {}", direction_text(d));
        if verbose {
            if d.consulted.is_empty() {
                let _ = writeln!(out, "    no rule consulted");
            }
            for (n, c) in d.consulted.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "    {}. {} rule {}{}: {} ({})",
                    n + 1,
                    c.policy,
                    c.rule.as_deref().unwrap_or("<nil>"),
                    c.tier
                        .as_deref()
                        .map(|t| format!(" (tier {t})"))
                        .unwrap_or_default(),
                    if c.matched { "matched" } else { "no match" },
                    c.action
                );
            }
            if !d.isolated_by.is_empty() {
                let _ = writeln!(
                    out,
                    "    isolated by {}: past the Antrea tiers, only their rules allow",
                    d.isolated_by.join(", ")
                );
            }
        }
    }
    if let Some(entry) = &report.privileged {
        let _ = writeln!(
            out,
            "  privileged: accepted by datapath.privileged {entry} before any policy"
        );
    }
    if !report.fqdn.is_empty() {
        let _ = writeln!(
            out,
            "  FQDN: the destination is an address of {}",
            report.fqdn.join(", ")
        );
    }
    match report.http.as_deref() {
        Some("Allow") => {
            let _ = writeln!(out, "  L7: the HTTP request matches the rule's l7Protocols");
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "  L7: the HTTP request matches no l7Protocols entry: denied"
            );
        }
        None if report.l7.is_some() => {
            let _ = writeln!(
                out,
                "  L7: allowed subject to HTTP inspection (give --http-method/--http-host/--http-path to evaluate a request)"
            );
        }
        None => {}
    }
    Ok(out)
}

fn direction_text(d: &DirectionReport) -> String {
    let who = d
        .endpoint
        .clone()
        .unwrap_or_else(|| "not an endpoint of this node".to_string());
    let what = match d.outcome.as_str() {
        "NotEnforced" => "no policy applies".to_string(),
        "NoRuleMatched" => "no rule matched (allowed)".to_string(),
        "K8sDefaultDeny" if !d.isolated_by.is_empty() => format!(
            "Drop: isolated by {} and no rule allows it",
            d.isolated_by.join(", ")
        ),
        "K8sDefaultDeny" => {
            "Drop: isolated by a K8s NetworkPolicy and no rule allows it".to_string()
        }
        "NodeToLocalPod" => {
            "allowed: traffic from the Node to its own Pods is always allowed".to_string()
        }
        _ => format!(
            "{} by {} rule {}{}",
            d.action.as_deref().unwrap_or("?"),
            d.policy.as_deref().unwrap_or("?"),
            d.rule.as_deref().unwrap_or("<nil>"),
            d.tier
                .as_deref()
                .map(|t| format!(" (tier {t})"))
                .unwrap_or_default()
        ),
    };
    let pass = d
        .passed_by
        .as_ref()
        .map(|p| format!("; passed by {} rule {}", rest_policy(p), rest_rule(p)))
        .unwrap_or_default();
    format!("{} [{}]: {}{}", d.direction, who, what, pass)
}

/// `passedBy` is `policy rule`; the policy part.
fn rest_policy(passed_by: &str) -> &str {
    passed_by.split_once(' ').map_or(passed_by, |(p, _)| p)
}

/// `passedBy` is `policy rule`; the rule part.
fn rest_rule(passed_by: &str) -> &str {
    passed_by.split_once(' ').map_or("<nil>", |(_, r)| r)
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, CommandError> {
    serde_json::to_string_pretty(value).map_err(|e| CommandError::Usage(e.to_string()))
}

fn yaml<T: serde::Serialize>(value: &T) -> Result<String, CommandError> {
    serde_saphyr::to_string(value).map_err(|e| CommandError::Usage(e.to_string()))
}

/// Items of a list shown whole in a table cell; longer lists show how
/// many there are and the first of them.
pub const TABLE_LIST: usize = 3;

/// A list in a table cell: whole when `wide` or short, else summarised as
/// `N: first,second,third,...`.
fn cell(items: &[String], wide: bool, empty: &str) -> String {
    match items.len() {
        0 => empty.to_string(),
        n if wide || n <= TABLE_LIST => items.join(","),
        n => format!("{n}: {},...", items[..TABLE_LIST].join(",")),
    }
}

/// `tollgate get fqdn` in the format asked for.
pub fn render_fqdn(rows: &[FqdnRow], output: GetOutput) -> Result<String, CommandError> {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    match output {
        GetOutput::Json => Ok(json(&rows)? + "\n"),
        GetOutput::Yaml => yaml(&rows),
        GetOutput::Table | GetOutput::Wide => {
            let mut table_rows = vec![[
                "SELECTOR".to_string(),
                "SET".to_string(),
                "ADDRESS".to_string(),
                "TTL".to_string(),
                "SOURCE".to_string(),
            ]];
            table_rows.extend(rows.iter().map(|r| {
                [
                    dash(r.selector.clone()),
                    dash(r.set.clone()),
                    dash(r.address.map(|a| a.to_string())),
                    dash(r.ttl.map(|t| t.to_string())),
                    dash(r.source.clone()),
                ]
            }));
            Ok(table(&table_rows))
        }
    }
}

/// Rows as a table, the first the header: each column as wide as its
/// widest cell, one space between columns, no trailing blanks.
fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
    let columns = rows.first().map_or(0, |r| r.as_ref().len());
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r.as_ref()[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join(" ").trim_end());
    }
    out
}

/// `tollgate get policies`: the table of `antctl get netpol
/// --sort-by=effectivePriority`, of the policies `filter` asks for.
pub fn render_policies(
    policies: &[PolicySummary],
    filter: &GetFilter,
    output: GetOutput,
) -> Result<String, CommandError> {
    let policies: Vec<&PolicySummary> = policies.iter().filter(|p| filter.policy(p)).collect();
    let wide = match output {
        GetOutput::Json => return Ok(json(&policies)? + "\n"),
        GetOutput::Yaml => return yaml(&policies),
        GetOutput::Table => false,
        GetOutput::Wide => true,
    };
    let mut rows = vec![[
        "SOURCE".to_string(),
        "TIER".to_string(),
        "TIER-PRIORITY".to_string(),
        "PRIORITY".to_string(),
        "RULES".to_string(),
        "APPLIED-TO".to_string(),
        "RULE-NAMES".to_string(),
    ]];
    for p in policies {
        rows.push([
            p.policy.to_string(),
            p.tier.clone().unwrap_or_else(|| "<NONE>".into()),
            p.tier_priority
                .map_or_else(|| "<NONE>".into(), |t| t.to_string()),
            p.priority
                .map_or_else(|| "<NONE>".into(), |x| x.to_string()),
            p.rules.to_string(),
            cell(&p.applied_to, wide, "<none on this node>"),
            cell(&p.rule_names, wide, "<NONE>"),
        ]);
    }
    Ok(table(&rows))
}

/// `tollgate get endpoints`: the endpoints `filter` asks for with their
/// effective policies in evaluation order.
pub fn render_endpoints(
    endpoints: &[EndpointReport],
    filter: &GetFilter,
    output: GetOutput,
) -> Result<String, CommandError> {
    let endpoints: Vec<&EndpointReport> = endpoints
        .iter()
        .filter(|e| e.kind != "Node" || filter.namespace().is_none())
        .filter(|e| e.kind == "Node" || filter.endpoint(&e.endpoint))
        .collect();
    let wide = match output {
        GetOutput::Json => return Ok(json(&endpoints)? + "\n"),
        GetOutput::Yaml => return yaml(&endpoints),
        GetOutput::Table => false,
        GetOutput::Wide => true,
    };
    let header = ["ENDPOINT", "KIND", "ADDRESSES", "POLICIES", "FQDN"].map(String::from);
    let rows: Vec<[String; 5]> = std::iter::once(header)
        .chain(endpoints.iter().map(|e| {
            let addresses: Vec<String> = e.addresses.iter().map(ToString::to_string).collect();
            [
                e.endpoint.clone(),
                e.kind.clone(),
                cell(&addresses, true, "<none>"),
                cell(&e.policies, wide, "<none>"),
                cell(&e.fqdn, true, "<none>"),
            ]
        }))
        .collect();
    if wide {
        return Ok(table(&rows));
    }
    // The table leaves the FQDN column to `-o wide`.
    let narrow: Vec<[String; 4]> = rows
        .into_iter()
        .map(|[endpoint, kind, addresses, policies, _]| [endpoint, kind, addresses, policies])
        .collect();
    Ok(table(&narrow))
}

/// `tollgate get skipped`: one row per object `filter` asks for, its
/// problems joined; JSON and YAML carry every field.
pub fn render_skipped(
    refused: &[crate::source::kube::Refusal],
    filter: &SkippedFilter,
    format: GetOutput,
) -> Result<String, CommandError> {
    let refused: Vec<&crate::source::kube::Refusal> =
        refused.iter().filter(|r| filter.object(r)).collect();
    let encoding = |e: &dyn std::fmt::Display| CommandError::Usage(format!("encoding: {e}"));
    match format {
        GetOutput::Json => serde_json::to_string_pretty(&refused)
            .map(|s| s + "\n")
            .map_err(|e| encoding(&e)),
        GetOutput::Yaml => serde_saphyr::to_string(&refused).map_err(|e| encoding(&e)),
        GetOutput::Table | GetOutput::Wide if refused.is_empty() => {
            Ok("no object skipped or partly enforced\n".into())
        }
        GetOutput::Table | GetOutput::Wide => {
            let mut rows = vec![[
                "KIND".to_string(),
                "NAMESPACE".to_string(),
                "NAME".to_string(),
                "REASON".to_string(),
                "MESSAGE".to_string(),
            ]];
            for r in &refused {
                rows.push([
                    r.kind.clone(),
                    r.namespace.clone().unwrap_or_else(|| "-".into()),
                    r.name.clone(),
                    r.reason.to_string(),
                    r.message(),
                ]);
            }
            Ok(table(&rows))
        }
    }
}

/// The anti-spoofing rows: a summary, each unguarded endpoint with the
/// reason, each guarded one that had packets dropped.
fn render_anti_spoofing(out: &mut String, report: Option<&AntiSpoofReport>) {
    let Some(report) = report else {
        return;
    };
    if !report.enabled {
        let _ = writeln!(out, "anti-spoofing:      off (antiSpoofing.enabled)");
        return;
    }
    let total = |g: &GuardedReport| g.dropped.values().sum::<u64>();
    let _ = writeln!(
        out,
        "anti-spoofing:      {} endpoints guarded, {} dropped packets; {}",
        report.guarded.len(),
        report.guarded.iter().map(total).sum::<u64>(),
        match report.unguarded.len() {
            0 => "none unguarded".to_string(),
            n => format!("{n} UNGUARDED"),
        }
    );
    for u in &report.unguarded {
        let _ = writeln!(out, "  {:<30} UNGUARDED: {}", u.endpoint, u.reason);
    }
    for g in report.guarded.iter().filter(|g| total(g) > 0) {
        let dropped: Vec<String> = g
            .dropped
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {:<30} {}: dropped {}",
            g.endpoint,
            g.interface,
            dropped.join(", ")
        );
    }
}

/// `tollgate status` as text.
/// Most policy warnings `status` prints; `-o json` lists them all.
const STATUS_WARNINGS: usize = 5;

/// `policy warnings:  N`, then the first few, one a line.
fn render_policy_warnings(out: &mut String, warnings: &[String]) {
    if warnings.is_empty() {
        return;
    }
    let _ = writeln!(out, "policy warnings:    {}", warnings.len());
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

pub fn render_status(report: &StatusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "node:               {}", report.node_name);
    let _ = writeln!(
        out,
        "version:            {} (commit {})",
        report.version, report.commit
    );
    let _ = writeln!(out, "uptime:             {}s", report.uptime_seconds);
    let _ = writeln!(out, "ruleset generation: {}", report.ruleset_generation);
    let _ = writeln!(
        out,
        "policies loaded:    {} ({} rules)",
        report.policies, report.rules
    );
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
    let _ = writeln!(out, "enforced endpoints: {}", report.enforced_endpoints);
    let source = if report.snapshot_complete {
        "complete snapshot"
    } else {
        "waiting for a complete snapshot"
    };
    let _ = writeln!(out, "policy source:      {source}");
    if let Some(k) = &report.kubernetes {
        let _ = writeln!(
            out,
            "kubernetes:         {}, {} skipped, {} partly enforced (tollgate get skipped)",
            if k.synced {
                "synced"
            } else {
                "NOT SYNCED (first list pending, or a watch failed: listing again)"
            },
            k.skipped,
            k.partly_enforced
        );
    }
    if let Some(inventory) = &report.inventory {
        let _ = writeln!(out, "inventory:          {inventory}");
    }
    let applied = report
        .last_applied_seconds_ago
        .map_or("never".to_string(), |s| format!("{s}s ago"));
    let _ = writeln!(out, "last applied:       {applied}");
    let _ = writeln!(out, "last reload:        {reload}");
    let datapath = match &report.datapath_behind {
        None => "in sync".to_string(),
        Some(error) => format!("BEHIND, retrying: {error}"),
    };
    let _ = writeln!(out, "datapath:           {datapath}");
    if let Some(hits) = report.verdict_cache_hits {
        let _ = writeln!(
            out,
            "verdict cache:      {hits} connections answered by the kernel (read every drift check, or 10 s)"
        );
    }
    if let Some(why) = &report.bridged_traffic_unseen {
        let _ = writeln!(out, "bridged traffic:    NOT SEEN: {why}");
    }
    if !report.endpoint_traffic_unseen.is_empty() {
        let _ = writeln!(
            out,
            "endpoint traffic:   NOT SEEN for {} endpoint addresses (not enforced):",
            report.endpoint_traffic_unseen.len()
        );
        for line in &report.endpoint_traffic_unseen {
            let _ = writeln!(out, "  {line}");
        }
    }
    render_policy_warnings(&mut out, &report.policy_warnings);
    render_anti_spoofing(&mut out, report.anti_spoofing.as_ref());
    let _ = writeln!(out, "fail mode:          {}", report.fail_mode);
    let unknown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    let p = &report.process;
    let _ = writeln!(
        out,
        "process:            cpu {}s, resident {} MiB, fds {}/{}",
        unknown(p.cpu_seconds.map(|s| format!("{s:.2}"))),
        unknown(p.resident_bytes.map(|b| (b / (1024 * 1024)).to_string())),
        unknown(p.open_fds.map(|n| n.to_string())),
        unknown(p.max_fds.map(|n| n.to_string())),
    );
    let _ = writeln!(
        out,
        "audit log:          {}",
        report
            .audit_log
            .as_ref()
            .map_or("off".to_string(), |p| p.display().to_string())
    );
    let _ = writeln!(
        out,
        "metrics:            {}",
        report.metrics_address.as_deref().unwrap_or("off")
    );
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
    // One table per kind of worker, every counter any of its queues has
    // as a column (the kernel lists only the queues bound now): `-` where
    // a queue has no such counter.
    for group in report.queues.chunk_by(|a, b| a.worker == b.worker) {
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
        let _ = writeln!(out);
        out += &table(&rows);
    }
    out
}
