//! The subcommands that read — `validate`, `trace`, `get`, `status` — as functions
//! from a loaded snapshot or the agent's answer to the text they print
//! (tables, JSON, YAML). File reading is delegated to `source`, the
//! evaluation to `explain`; printing and exit codes belong to `main.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::cli::{GetFilter, GetOutput, NodeArgs, OutputFormat, SkippedFilter};
use crate::compile::{compile, LocalNode};
use crate::explain::{DirectionReport, EndpointReport, TraceEndpoint, TraceReport};
use crate::model::{Kind, Object, Snapshot};
use crate::ruleset::{PolicySummary, Ruleset};
use crate::source;
use crate::status::{
    self, AntiSpoofReport, GuardedReport, ReloadReport, Request, Response, StatusError,
    StatusReport,
};
use crate::telemetry::Check;
use crate::validate::Problem;

/// Why an offline command could not produce its answer.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The policies did not validate; one entry per problem.
    #[error("{} problem(s) in the policies", .0.len())]
    Invalid(Vec<Problem>),
    #[error("{0}")]
    Usage(String),
}

/// The local Node's identity given on the command line; unset parts come
/// from the single `v1 Node` of the snapshot, if there is one.
#[derive(Clone, Debug, Default)]
pub struct NodeIdentity {
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub addresses: Vec<IpAddr>,
}

impl NodeIdentity {
    /// Resolves the identity against a snapshot's Node objects.
    pub fn resolve(&self, snapshot: &Snapshot) -> Result<LocalNode, CommandError> {
        let nodes: Vec<&str> = snapshot
            .iter()
            .filter_map(|o| match o {
                Object::Node(n) => Some(n.metadata.name.as_str()),
                _ => None,
            })
            .collect();
        let name = match (&self.name, nodes.as_slice()) {
            (Some(name), _) => name.clone(),
            (None, [only]) => only.to_string(),
            (None, []) => DEFAULT_NODE_NAME.to_string(),
            (None, several) => {
                return Err(CommandError::Usage(format!(
                    "the policies hold several Nodes ({}); say which is local with --node-name",
                    several.join(", ")
                )))
            }
        };
        Ok(LocalNode {
            name,
            labels: self.labels.clone(),
            addresses: self.addresses.clone(),
        })
    }
}

impl From<&NodeArgs> for NodeIdentity {
    fn from(args: &NodeArgs) -> NodeIdentity {
        NodeIdentity {
            name: args.node_name.clone(),
            labels: args.node_labels.clone().unwrap_or_default(),
            addresses: args.node_addresses.clone(),
        }
    }
}

/// Asks the running agent listening on `socket`.
pub fn ask(socket: &Path, request: &Request) -> Result<Response, CommandError> {
    status::request(socket, request).map_err(|e| match e {
        StatusError::Agent(message) => CommandError::Usage(message),
        e => CommandError::Usage(format!("{e} (is `tollgate run` running?)")),
    })
}

/// A probe's name as the command line spells it.
pub fn check_name(check: Check) -> &'static str {
    match check {
        Check::Live => "live",
        Check::Ready => "ready",
    }
}

/// The local Node's name when neither the command line nor the policies name it.
pub const DEFAULT_NODE_NAME: &str = "local-node";

/// Loads, validates and compiles the policies at `paths`.
pub fn load_ruleset(
    paths: &[PathBuf],
    node: &NodeIdentity,
) -> Result<(Snapshot, Ruleset), CommandError> {
    let snapshot = source::load_and_validate(paths).map_err(CommandError::Invalid)?;
    let local = node.resolve(&snapshot)?;
    let ruleset = compile(&snapshot, &local);
    Ok((snapshot, ruleset))
}

/// `tollgate validate`: the one-line summary of a valid set of objects.
pub fn validate_summary(snapshot: &Snapshot) -> String {
    let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
    for object in snapshot.iter() {
        *counts.entry(object.kind()).or_default() += 1;
    }
    let files: std::collections::BTreeSet<_> = snapshot.objects.iter().map(|s| &s.origin).collect();
    let parts: Vec<String> = counts
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    format!(
        "valid: {} object(s) in {} file(s){}{}",
        snapshot.objects.len(),
        files.len(),
        if parts.is_empty() { "" } else { ": " },
        parts.join(", ")
    )
}

/// `tollgate validate`: what is valid but probably not what the author
/// meant (printed as warnings, exit 0). For a policy directory (among
/// `directories`, the paths given that are directories, as the agent reads
/// them): no objects at all, or no inventory (no Pod, Namespace or Node, so
/// no selector can be checked; a policy file validated alone is not
/// warned about). For any input with inventory: policies whose appliedTo
/// selects nothing on any Node of the inventory. Each Node named in the
/// inventory (by a Node, a Pod's `nodeName` or an ExternalEntity's
/// `externalNode`) is compiled as the local one; a policy that applies on
/// none of them selects nothing.
pub fn inventory_warnings(directories: &[PathBuf], snapshot: &Snapshot) -> Vec<String> {
    let origin = directories
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let inventory = snapshot
        .iter()
        .any(|o| matches!(o, Object::Pod(_) | Object::Namespace(_) | Object::Node(_)));
    if directories.is_empty() && !inventory {
        return Vec::new();
    }
    if snapshot.objects.is_empty() {
        return vec![format!("{origin}: no objects found")];
    }
    if !inventory {
        return vec![format!(
            "{origin}: no inventory (no Pod, Namespace or Node): appliedTo and peer selectors cannot be checked"
        )];
    }
    let mut nodes: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for object in snapshot.iter() {
        let name = match object {
            Object::Node(node) => Some(node.metadata.name.as_str()),
            Object::Pod(pod) => pod.spec.node_name.as_deref(),
            Object::ExternalEntity(ee) => ee.spec.external_node.as_deref(),
            _ => None,
        };
        nodes.extend(name.filter(|n| !n.is_empty()));
    }
    if nodes.is_empty() {
        // Pods without a nodeName are local to any Node.
        nodes.insert(DEFAULT_NODE_NAME);
    }
    let mut applied: std::collections::BTreeSet<(Option<String>, String)> = Default::default();
    let mut listed: std::collections::BTreeSet<(Option<String>, String)> = Default::default();
    for node in nodes {
        let local = LocalNode {
            name: node.to_string(),
            ..LocalNode::default()
        };
        for summary in compile(snapshot, &local).policies() {
            let key = (
                summary.policy.namespace.clone(),
                format!("{}:{}", summary.policy.kind.as_str(), summary.policy.name),
            );
            if !summary.applied_to.is_empty() {
                applied.insert(key.clone());
            }
            listed.insert(key);
        }
    }
    let mut warnings = Vec::new();
    for sourced in &snapshot.objects {
        let kind = match sourced.object {
            Object::ClusterNetworkPolicy(_) => {
                crate::ruleset::PolicyKind::AntreaClusterNetworkPolicy
            }
            Object::AntreaNetworkPolicy(_) => crate::ruleset::PolicyKind::AntreaNetworkPolicy,
            Object::K8sNetworkPolicy(_) => crate::ruleset::PolicyKind::K8sNetworkPolicy,
            _ => continue,
        };
        let object = sourced.object.object_ref();
        let key = (
            object.namespace.clone(),
            format!("{}:{}", kind.as_str(), object.name),
        );
        if listed.contains(&key) && !applied.contains(&key) {
            warnings.push(format!(
                "{}: {object}: spec: selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)",
                sourced.origin.display()
            ));
        }
    }
    warnings
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

impl GetFilter {
    /// The Namespace asked for (`-p` without `-n` means `default`).
    fn namespace(&self) -> Option<&str> {
        match (&self.namespace, &self.pod) {
            (Some(ns), _) => Some(ns),
            (None, Some(_)) => Some("default"),
            (None, None) => None,
        }
    }

    /// Whether an endpoint (`namespace/name`, or a Node's name) is asked for.
    fn endpoint(&self, endpoint: &str) -> bool {
        match (self.namespace(), &self.pod) {
            (Some(ns), Some(pod)) => endpoint == format!("{ns}/{pod}"),
            (Some(ns), None) => endpoint
                .strip_prefix(ns)
                .is_some_and(|r| r.starts_with('/')),
            _ => true,
        }
    }

    /// Whether a policy is asked for: in the Namespace, or applied to an
    /// endpoint asked for.
    fn policy(&self, policy: &PolicySummary) -> bool {
        let applied = || policy.applied_to.iter().any(|e| self.endpoint(e));
        match (self.namespace(), &self.pod) {
            (None, _) => true,
            (Some(_), Some(_)) => applied(),
            (Some(ns), None) => policy.policy.namespace.as_deref() == Some(ns) || applied(),
        }
    }
}

/// One row of `tollgate get fqdn`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FqdnRow {
    pub selector: Option<String>,
    pub set: Option<String>,
    pub address: Option<IpAddr>,
    pub ttl: Option<u32>,
    pub source: Option<String>,
}

/// `tollgate get fqdn`: what a running agent has learned, from the kernel's
/// FQDN sets — one row per selector, set and address with the remaining
/// TTL in seconds and how the agent learned it (`sources`, from the agent:
/// `snooped` or `resolved`; `-` when it did not say). Selectors of
/// `patterns` name their sets; a set no selector maps to shows `-`; a
/// selector with nothing learned shows one row without address.
pub fn fqdn_rows(
    sets: &BTreeMap<String, crate::datapath::LearnedSet>,
    patterns: &[crate::fqdn::FqdnPattern],
    sources: &[crate::status::FqdnSource],
) -> Vec<FqdnRow> {
    use crate::datapath::{plan::fqdn_set, Family};
    let source = |selector: &str, address: &std::net::IpAddr| {
        sources
            .iter()
            .find(|s| s.selector == selector && s.address == *address)
            .map(|s| s.source.clone())
    };
    let mut rows = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for pattern in patterns {
        let mut any = false;
        for family in Family::ALL {
            let name = fqdn_set(pattern, family);
            if let Some(set) = sets.get(&name) {
                for (address, ttl) in sorted(&set.entries) {
                    rows.push(FqdnRow {
                        selector: Some(pattern.to_string()),
                        set: Some(name.clone()),
                        address: Some(address),
                        ttl: Some(ttl),
                        source: source(pattern.as_str(), &address),
                    });
                    any = true;
                }
            }
            named.insert(name);
        }
        if !any {
            rows.push(FqdnRow {
                selector: Some(pattern.to_string()),
                set: None,
                address: None,
                ttl: None,
                source: None,
            });
        }
    }
    for (name, set) in sets.iter().filter(|(n, _)| !named.contains(*n)) {
        for (address, ttl) in sorted(&set.entries) {
            rows.push(FqdnRow {
                selector: None,
                set: Some(name.clone()),
                address: Some(address),
                ttl: Some(ttl),
                source: None,
            });
        }
    }
    rows
}

/// The FQDN selectors `get fqdn` names sets by: those of `all` (the
/// policies given) or, without them, every selector of the endpoints'
/// egress rules; with `-n`/`-p` only those of the endpoints asked for.
pub fn fqdn_selectors(
    all: &[crate::fqdn::FqdnPattern],
    endpoints: &[EndpointReport],
    filter: &GetFilter,
) -> Vec<crate::fqdn::FqdnPattern> {
    let asked: Vec<&str> = endpoints
        .iter()
        .filter(|e| filter.namespace().is_none() || filter.endpoint(&e.endpoint))
        .flat_map(|e| e.fqdn.iter().map(String::as_str))
        .collect();
    if all.is_empty() {
        let mut patterns: Vec<crate::fqdn::FqdnPattern> = Vec::new();
        for selector in asked {
            let pattern = crate::fqdn::FqdnPattern::new(selector);
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
            }
        }
        return patterns;
    }
    all.iter()
        .filter(|p| filter.namespace().is_none() || asked.contains(&p.as_str()))
        .cloned()
        .collect()
}

/// Rows of the selectors `filter` asks for: sets no selector names are
/// left out once `-n`/`-p` is given.
pub fn filter_fqdn_rows(rows: Vec<FqdnRow>, filter: &GetFilter) -> Vec<FqdnRow> {
    match filter.namespace() {
        None => rows,
        Some(_) => rows.into_iter().filter(|r| r.selector.is_some()).collect(),
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

fn sorted(entries: &[(IpAddr, u32)]) -> Vec<(IpAddr, u32)> {
    let mut entries = entries.to_vec();
    entries.sort();
    entries
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

impl SkippedFilter {
    /// Whether a skipped object is asked for: in the Namespace (`-n`),
    /// of the name (`-p`).
    fn object(&self, refused: &crate::source::kube::Refusal) -> bool {
        let namespace = self
            .namespace
            .as_deref()
            .is_none_or(|ns| refused.namespace.as_deref() == Some(ns));
        let name = self.name.as_deref().is_none_or(|n| refused.name == n);
        namespace && name
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::{plan::fqdn_set, Family, LearnedSet};
    use crate::fqdn::FqdnPattern;

    #[test]
    fn skipped_objects_render_as_a_table_json_and_yaml() {
        use crate::source::kube::{Identity, Reason, Refusal};
        let refused = [Refusal {
            kind: "ClusterNetworkPolicy".into(),
            namespace: None,
            name: "in-bad-tier".into(),
            id: Identity {
                api_version: "crd.antrea.io/v1beta1".into(),
                api_kind: "ClusterNetworkPolicy".into(),
                uid: "u-1".into(),
                generation: Some(2),
                resource_version: "41".into(),
            },
            reason: Reason::PolicySkipped,
            problems: vec!["spec.tier: no Tier `bad`".into()],
        }];
        let all = SkippedFilter::default();
        let text = render_skipped(&refused, &all, GetOutput::Table).unwrap();
        assert_eq!(
            text,
            "KIND                 NAMESPACE NAME        REASON        MESSAGE\n\
             ClusterNetworkPolicy -         in-bad-tier PolicySkipped spec.tier: no Tier `bad`\n"
        );
        let json = render_skipped(&refused, &all, GetOutput::Json).unwrap();
        let back: Vec<Refusal> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, refused);
        assert!(json.contains(r#""resourceVersion": "41""#), "{json}");
        let yaml = render_skipped(&refused, &all, GetOutput::Yaml).unwrap();
        assert!(
            yaml.contains("uid: u-1") && yaml.contains("generation: 2"),
            "{yaml}"
        );
        assert_eq!(
            render_skipped(&[], &all, GetOutput::Table).unwrap(),
            "no object skipped or partly enforced\n"
        );
    }

    /// `-n` keeps the objects of a Namespace, `-p` those of a name (in any
    /// Namespace, or cluster-scoped, without `-n`), in every format.
    #[test]
    fn skipped_objects_filter_by_namespace_and_name() {
        use crate::source::kube::{Identity, Reason, Refusal};
        let refusal = |kind: &str, namespace: Option<&str>, name: &str| Refusal {
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
            id: Identity {
                api_version: "v1".into(),
                api_kind: kind.into(),
                uid: format!("u-{name}"),
                generation: None,
                resource_version: "1".into(),
            },
            reason: Reason::PolicyPartiallyEnforced,
            problems: vec!["spec.appliedTo[0].group: no group".into()],
        };
        let refused = [
            refusal("ClusterNetworkPolicy", None, "web"),
            refusal("NetworkPolicy", Some("shop"), "web"),
            refusal("NetworkPolicy", Some("shop"), "db"),
            refusal("NetworkPolicy", Some("bank"), "web"),
        ];
        let filter = |namespace: Option<&str>, name: Option<&str>| SkippedFilter {
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
        };
        let shown = |filter: SkippedFilter| -> Vec<String> {
            let json = render_skipped(&refused, &filter, GetOutput::Json).unwrap();
            let back: Vec<Refusal> = serde_json::from_str(&json).unwrap();
            back.iter()
                .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or("-"), r.name))
                .collect()
        };
        assert_eq!(shown(filter(Some("shop"), None)), ["shop/web", "shop/db"]);
        assert_eq!(
            shown(filter(None, Some("web"))),
            ["-/web", "shop/web", "bank/web"]
        );
        assert_eq!(shown(filter(Some("bank"), Some("web"))), ["bank/web"]);
        assert!(shown(filter(Some("shop"), Some("nobody"))).is_empty());
        let table =
            render_skipped(&refused, &filter(Some("shop"), Some("db")), GetOutput::Wide).unwrap();
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("NetworkPolicy shop      db "),
            "{table}"
        );
        assert_eq!(
            render_skipped(&refused, &filter(Some("none"), None), GetOutput::Table).unwrap(),
            "no object skipped or partly enforced\n"
        );
    }

    /// A long applied-to list is summarised in the table (how many, the
    /// first three) and whole in `-o wide` and JSON.
    #[test]
    fn policies_summarise_long_applied_to_lists_in_the_table_only() {
        use crate::ruleset::{PolicyKind, PolicyRef};
        let summary = PolicySummary {
            policy: PolicyRef {
                kind: PolicyKind::AntreaClusterNetworkPolicy,
                namespace: None,
                name: "wide-net".into(),
            },
            tier: Some("application".into()),
            tier_priority: Some(250),
            priority: Some(5.0),
            rules: 1,
            rule_names: vec!["allow-all".into()],
            applied_to: ["a", "b", "c", "d", "e"].map(String::from).to_vec(),
        };
        let all = GetFilter::default();
        let cell = |output: GetOutput| -> String {
            let text = render_policies(std::slice::from_ref(&summary), &all, output).unwrap();
            let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
            row[5..row.len() - 1].join(" ")
        };
        assert_eq!(cell(GetOutput::Table), "5: a,b,c,...");
        assert_eq!(cell(GetOutput::Wide), "a,b,c,d,e");
        let json = render_policies(std::slice::from_ref(&summary), &all, GetOutput::Json).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v[0]["appliedTo"],
            serde_json::json!(["a", "b", "c", "d", "e"])
        );
        let yaml = render_policies(&[summary], &all, GetOutput::Yaml).unwrap();
        assert!(yaml.contains("- e"), "{yaml}");
    }

    #[test]
    fn fqdn_selectors_follow_the_endpoints_asked_for() {
        let endpoint = |name: &str, fqdn: &[&str]| EndpointReport {
            endpoint: name.into(),
            kind: "Pod".into(),
            namespace: name.split_once('/').map(|(ns, _)| ns.to_string()),
            addresses: Vec::new(),
            policies: Vec::new(),
            fqdn: fqdn.iter().map(|s| s.to_string()).collect(),
        };
        let endpoints = [
            endpoint("a/x", &["*.x.test"]),
            endpoint("a/y", &["y.test", "*.x.test"]),
            endpoint("b/z", &["z.test"]),
        ];
        let filter = |namespace: Option<&str>, pod: Option<&str>| GetFilter {
            namespace: namespace.map(str::to_string),
            pod: pod.map(str::to_string),
        };
        let names = |patterns: Vec<FqdnPattern>| -> Vec<String> {
            patterns.iter().map(ToString::to_string).collect()
        };
        // From the agent's endpoints (no policies given).
        let every = fqdn_selectors(&[], &endpoints, &filter(None, None));
        assert_eq!(names(every), ["*.x.test", "y.test", "z.test"]);
        let a = fqdn_selectors(&[], &endpoints, &filter(Some("a"), None));
        assert_eq!(names(a), ["*.x.test", "y.test"]);
        let y = fqdn_selectors(&[], &endpoints, &filter(Some("a"), Some("y")));
        assert_eq!(names(y), ["y.test", "*.x.test"]);
        // From the policies given: their order, filtered the same way.
        let all = [FqdnPattern::new("z.test"), FqdnPattern::new("y.test")];
        assert_eq!(
            names(fqdn_selectors(&all, &endpoints, &filter(None, None))),
            ["z.test", "y.test"]
        );
        assert_eq!(
            names(fqdn_selectors(&all, &endpoints, &filter(Some("b"), None))),
            ["z.test"]
        );
        assert!(fqdn_selectors(&all, &endpoints, &filter(None, Some("nobody"))).is_empty());
        // Unnamed sets go once a filter is given.
        let rows = vec![
            FqdnRow {
                selector: Some("z.test".into()),
                set: None,
                address: None,
                ttl: None,
                source: None,
            },
            FqdnRow {
                selector: None,
                set: Some("s".into()),
                address: None,
                ttl: None,
                source: None,
            },
        ];
        assert_eq!(filter_fqdn_rows(rows.clone(), &filter(None, None)).len(), 2);
        assert_eq!(filter_fqdn_rows(rows, &filter(Some("b"), None)).len(), 1);
    }

    #[test]
    fn fqdn_table_names_sets_by_selector() {
        let allowed = FqdnPattern::new("*.allowed.test");
        let empty = FqdnPattern::new("quiet.test");
        let sets: BTreeMap<String, LearnedSet> = [
            (
                fqdn_set(&allowed, Family::V4),
                LearnedSet {
                    family: Family::V4,
                    entries: vec![
                        ("10.0.0.9".parse().unwrap(), 20),
                        ("10.0.0.1".parse().unwrap(), 7),
                    ],
                },
            ),
            (
                "tollgate-fqdn-stale-v4".to_string(),
                LearnedSet {
                    family: Family::V4,
                    entries: vec![("10.0.0.2".parse().unwrap(), 3)],
                },
            ),
        ]
        .into();
        let sources = [crate::status::FqdnSource {
            selector: "*.allowed.test".into(),
            address: "10.0.0.9".parse().unwrap(),
            source: "resolved".into(),
        }];
        let rows = fqdn_rows(&sets, &[allowed.clone(), empty], &sources);
        let text = render_fqdn(&rows, GetOutput::Table).unwrap();
        let set = fqdn_set(&allowed, Family::V4);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            vec![
                vec!["SELECTOR", "SET", "ADDRESS", "TTL", "SOURCE"],
                vec!["*.allowed.test", &set, "10.0.0.1", "7", "-"],
                vec!["*.allowed.test", &set, "10.0.0.9", "20", "resolved"],
                vec!["quiet.test", "-", "-", "-", "-"],
                vec!["-", "tollgate-fqdn-stale-v4", "10.0.0.2", "3", "-"],
            ]
        );
    }
}
