//! Every rendering of the reading subcommands: `trace` as text, the `get`
//! tables (policies, endpoints, FQDN rows, skipped objects), `observe`'s
//! lines and (in `status.rs`) `status` as text, and JSON, YAML or a
//! JSONPath's values where asked; every table drawn by the one `table()`.
//! Default output fits a terminal of [`COLUMNS`]; `-o wide` does not
//! try. Pure: from the answer to a string; it never asks the agent, reads
//! a file or prints.

use std::fmt::Write as _;

use super::CommandError;
use crate::cli::{GetFilter, GetOutput, OutputFormat, SkippedFilter};
use crate::explain::{DirectionReport, DryRunReport, EndpointReport, TraceEndpoint, TraceReport};
use crate::observe::{FlowEvent, FlowSide};
use crate::ruleset::PolicySummary;

mod status;

pub use status::{render_queues, render_status};

/// One row of `tollgate get fqdn`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FqdnRow {
    pub selector: Option<String>,
    pub set: Option<String>,
    pub address: Option<std::net::IpAddr>,
    pub ttl: Option<u32>,
    pub source: Option<String>,
}

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
                if let Some(why) = &c.why {
                    let _ = writeln!(out, "       {why}");
                }
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
    if let Some(dry_run) = &report.dry_run {
        let _ = writeln!(out, "  {}", dry_run_text(dry_run));
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
            if verbose {
                for why in &report.http_why {
                    let _ = writeln!(out, "    {why}");
                }
            }
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

/// The dry-run line of a trace: what the dry-run policies would decide,
/// never what is enforced.
pub(super) fn dry_run_text(d: &DryRunReport) -> String {
    let by = match (&d.direction, &d.policy) {
        (Some(direction), Some(policy)) => {
            let what = match &d.rule {
                Some(rule) => format!("rule {rule}"),
                None if d.action.as_deref() == Some("Drop") && d.tier.is_none() => {
                    "isolation".to_string()
                }
                None => "rule <nil>".to_string(),
            };
            let tier = d
                .tier
                .as_deref()
                .map(|t| format!(" (tier {t})"))
                .unwrap_or_default();
            format!(" by {direction} {policy} {what}{tier}")
        }
        _ => String::new(),
    };
    if d.changed {
        format!("dry-run: would {}{by} (not enforced)", d.verdict)
    } else {
        format!("dry-run: {}{by}, as enforced", d.verdict)
    }
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

pub(super) fn json<T: serde::Serialize>(value: &T) -> Result<String, CommandError> {
    serde_json::to_string_pretty(value).map_err(|e| CommandError::Usage(e.to_string()))
}

pub(super) fn yaml<T: serde::Serialize>(value: &T) -> Result<String, CommandError> {
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

/// Addresses shown whole in a table cell; a Node's many (every address
/// of every interface) show how many there are and the first ones.
pub const TABLE_ADDRESSES: usize = 2;

/// The addresses of an endpoint in a table cell: whole when `wide` or at
/// most [`TABLE_ADDRESSES`], else `N: first,second,...`.
fn addresses_cell(addresses: &[String], wide: bool) -> String {
    match addresses.len() {
        0 => "<none>".to_string(),
        n if wide || n <= TABLE_ADDRESSES => addresses.join(","),
        n => format!("{n}: {},...", addresses[..TABLE_ADDRESSES].join(",")),
    }
}

/// Columns default output fits in.
pub const COLUMNS: usize = 120;

/// The values an RFC 9535 JSONPath `path` selects in the JSON document
/// `json`: strings as they are, other values as compact JSON, separated
/// by spaces (as kubectl's `-o jsonpath` prints them), on one line.
pub fn select_json(json: &str, path: &str) -> Result<String, CommandError> {
    let path = serde_json_path::JsonPath::parse(path)
        .map_err(|e| CommandError::Usage(format!("jsonpath {path:?}: {e}")))?;
    let document: serde_json::Value =
        serde_json::from_str(json).map_err(|e| CommandError::Usage(e.to_string()))?;
    let values: Vec<String> = path
        .query(&document)
        .all()
        .into_iter()
        .map(|value| match value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect();
    Ok(values.join(" ") + "\n")
}

/// One decision of `tollgate observe` as a line:
/// `2026-11-22T00:53:26.178112Z apps/client:43936 -> 10.61.1.1:8080 TCP
/// Drop by AntreaClusterNetworkPolicy:observe rule drop-web (Ingress)`;
/// an L7 decision adds the request (`GET shop.test/api`).
pub fn render_event(event: &FlowEvent) -> String {
    let side = |s: &FlowSide| {
        let at = match (&s.name, s.address) {
            (Some(name), _) => name.clone(),
            (None, std::net::IpAddr::V6(v6)) if s.port.is_some() => format!("[{v6}]"),
            (None, ip) => ip.to_string(),
        };
        match s.port {
            Some(port) => format!("{at}:{port}"),
            None => at,
        }
    };
    let mut line = format!(
        "{} {} -> {} {} {}",
        event.time,
        side(&event.src),
        side(&event.dst),
        event.protocol,
        event.verdict
    );
    if let Some(http) = &event.http {
        let _ = write!(
            line,
            " {} {}{}",
            http.method,
            http.host.as_deref().unwrap_or(""),
            http.path
        );
    }
    match (&event.policy, &event.rule) {
        (Some(policy), Some(rule)) => {
            let _ = write!(line, " by {policy} rule {rule}");
        }
        (Some(policy), None) => {
            let _ = write!(line, " by {policy}");
        }
        _ => line.push_str(" (no rule)"),
    }
    if let Some(direction) = &event.direction {
        let _ = write!(line, " ({direction})");
    }
    line
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
pub(super) fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
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
            if p.dry_run {
                format!("{} (dry-run)", p.policy)
            } else {
                p.policy.to_string()
            },
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
                addresses_cell(&addresses, wide),
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
