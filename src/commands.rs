//! The offline subcommands — `validate`, `trace`, `get policies` — as
//! functions from a loaded snapshot to the text they print. File reading is
//! delegated to `source`; printing and exit codes belong to `main.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cli::{NodeArgs, OutputFormat, TraceProtocol};
use crate::compile::{compile, LocalNode};
use crate::fqdn::{NoFqdn, StaticFqdn};
use crate::http::{self, HttpEvent, RequestHead, RequestTracker, DEFAULT_MAX_HEAD};
use crate::model::{Kind, Object, Snapshot};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::{Decision, DirectionDecision, Outcome, PolicySummary, Ruleset};
use crate::source;
use crate::status::{self, Request, Response};
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
    status::request(socket, request)
        .map_err(|e| CommandError::Usage(format!("{e} (is `tollgate run` running?)")))
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

/// What to trace.
#[derive(Clone, Debug)]
pub struct TraceRequest {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: TraceProtocol,
    pub src_port: u16,
    pub dst_port: Option<u16>,
    pub icmp_type: u8,
    pub icmp_code: u8,
    /// Treat `dst` as an address this name resolved to.
    pub fqdn: Option<String>,
    pub http_method: Option<String>,
    pub http_host: Option<String>,
    pub http_path: Option<String>,
}

impl TraceRequest {
    fn flow(&self) -> Result<Flow, CommandError> {
        let port = || {
            self.dst_port.ok_or_else(|| {
                CommandError::Usage("--dst-port is required for tcp, udp and sctp".into())
            })
        };
        let transport = match self.protocol {
            TraceProtocol::Tcp => Transport::Tcp {
                src_port: self.src_port,
                dst_port: port()?,
            },
            TraceProtocol::Udp => Transport::Udp {
                src_port: self.src_port,
                dst_port: port()?,
            },
            TraceProtocol::Sctp => Transport::Sctp {
                src_port: self.src_port,
                dst_port: port()?,
            },
            TraceProtocol::Icmp => Transport::Icmp {
                icmp_type: self.icmp_type,
                icmp_code: self.icmp_code,
            },
        };
        if self.src.is_ipv4() != self.dst.is_ipv4() {
            return Err(CommandError::Usage(
                "--src and --dst must be of the same address family".into(),
            ));
        }
        Ok(Flow {
            src: self.src,
            dst: self.dst,
            transport,
            local: None,
        })
    }

    /// The request the `--http-*` flags describe, parsed exactly as the
    /// datapath parses live requests (same normalisation and checks).
    fn http_request(&self) -> Result<Option<RequestHead>, CommandError> {
        if self.http_method.is_none() && self.http_host.is_none() && self.http_path.is_none() {
            return Ok(None);
        }
        let mut raw = format!(
            "{} {} HTTP/1.1\r\n",
            self.http_method.as_deref().unwrap_or("GET"),
            self.http_path.as_deref().unwrap_or("/")
        );
        if let Some(host) = &self.http_host {
            raw.push_str(&format!("Host: {host}\r\n"));
        }
        raw.push_str("\r\n");
        let mut tracker = RequestTracker::new(DEFAULT_MAX_HEAD);
        match tracker.feed(raw.as_bytes()).into_iter().next() {
            Some(HttpEvent::Request(head)) => Ok(Some(head)),
            Some(other) => Err(CommandError::Usage(format!(
                "the --http-* flags do not form a valid request: {other:?}"
            ))),
            None => Err(CommandError::Usage(
                "the --http-* flags do not form a complete request".into(),
            )),
        }
    }
}

/// The result of a trace: the L3/L4 decision and, for L7 flows, whether the
/// given HTTP request passes.
#[derive(Clone, Debug)]
pub struct Trace {
    pub decision: Decision,
    /// `Some` when the flow is allowed by L7 rules and an HTTP request was
    /// given: whether every rule's `l7Protocols` admits it.
    pub http_allowed: Option<bool>,
}

impl Trace {
    /// The verdict after L7 evaluation: an L7 flow whose request no rule
    /// admits is dropped, as the rule's implicit deny says.
    pub fn verdict(&self) -> Verdict {
        match self.http_allowed {
            Some(false) => Verdict::Drop,
            _ => self.decision.verdict,
        }
    }
}

/// `tollgate trace`: which rule decides a flow, and why.
pub fn trace(ruleset: &Ruleset, request: &TraceRequest) -> Result<Trace, CommandError> {
    let flow = request.flow()?;
    let decision = match &request.fqdn {
        Some(name) => ruleset.classify(&flow, &StaticFqdn(vec![(name.clone(), request.dst)])),
        None => ruleset.classify(&flow, &NoFqdn),
    };
    let http_allowed = match (request.http_request()?, decision.l7.is_empty()) {
        (Some(head), false) => Some(decision.l7.iter().all(|protocols| {
            let alternatives: Vec<_> = protocols.iter().filter_map(|p| p.http.clone()).collect();
            http::decide(&alternatives, &head)
        })),
        _ => None,
    };
    Ok(Trace {
        decision,
        http_allowed,
    })
}

fn direction_json(d: &DirectionDecision) -> Value {
    let mut out = json!({
        "endpoint": d.endpoint.as_ref().map(|e| e.to_string()),
        "outcome": outcome_name(&d.outcome),
    });
    if let Some(rule) = d.rule() {
        out["policy"] = json!(rule.policy.to_string());
        out["kind"] = json!(rule.policy.kind.as_str());
        out["tier"] = json!(rule.tier);
        out["rule"] = json!(rule.name);
        out["action"] = json!(format!("{:?}", rule.action));
    }
    if let Some(pass) = &d.passed_by {
        out["passedBy"] = json!(format!(
            "{} {}",
            pass.policy,
            pass.name.as_deref().unwrap_or("<nil>")
        ));
    }
    out
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::NotEnforced => "NotEnforced",
        Outcome::NoRuleMatched => "NoRuleMatched",
        Outcome::Rule { .. } => "Rule",
        Outcome::K8sDefaultDeny => "K8sDefaultDeny",
        Outcome::NodeToLocalPod => "NodeToLocalPod",
    }
}

fn direction_text(d: &DirectionDecision) -> String {
    let who = d.endpoint.as_ref().map_or_else(
        || "not an endpoint of this node".to_string(),
        |e| e.to_string(),
    );
    let what = match &d.outcome {
        Outcome::NotEnforced => "no policy applies".to_string(),
        Outcome::NoRuleMatched => "no rule matched (allowed)".to_string(),
        Outcome::Rule { rule } => format!(
            "{:?} by {} rule {}{}",
            rule.action,
            rule.policy,
            rule.name.as_deref().unwrap_or("<nil>"),
            rule.tier
                .as_deref()
                .map(|t| format!(" (tier {t})"))
                .unwrap_or_default()
        ),
        Outcome::K8sDefaultDeny => {
            "Drop: isolated by a K8s NetworkPolicy and no rule allows it".to_string()
        }
        Outcome::NodeToLocalPod => {
            "allowed: traffic from the Node to its own Pods is always allowed".to_string()
        }
    };
    let pass = d
        .passed_by
        .as_ref()
        .map(|p| {
            format!(
                "; passed by {} rule {}",
                p.policy,
                p.name.as_deref().unwrap_or("<nil>")
            )
        })
        .unwrap_or_default();
    format!("{} [{}]: {}{}", d.direction.as_str(), who, what, pass)
}

/// Renders a trace as text or JSON.
pub fn render_trace(trace: &Trace, format: OutputFormat) -> String {
    let d = &trace.decision;
    match format {
        OutputFormat::Json => {
            let mut out = json!({
                "verdict": trace.verdict().to_string(),
                "egress": direction_json(&d.egress),
                "ingress": direction_json(&d.ingress),
            });
            if let Some(allowed) = trace.http_allowed {
                out["http"] = json!(if allowed { "Allow" } else { "Drop" });
            } else if !d.l7.is_empty() {
                out["l7"] = json!("the flow is allowed subject to L7 inspection; pass --http-* to evaluate a request");
            }
            serde_json::to_string_pretty(&out).expect("json values serialize") + "\n"
        }
        OutputFormat::Text => {
            let mut out = String::new();
            let _ = writeln!(out, "verdict: {}", trace.verdict());
            let _ = writeln!(out, "  {}", direction_text(&d.egress));
            let _ = writeln!(out, "  {}", direction_text(&d.ingress));
            match trace.http_allowed {
                Some(true) => {
                    let _ = writeln!(out, "  L7: the HTTP request matches the rule's l7Protocols");
                }
                Some(false) => {
                    let _ = writeln!(
                        out,
                        "  L7: the HTTP request matches no l7Protocols entry: denied"
                    );
                }
                None if !d.l7.is_empty() => {
                    let _ = writeln!(
                        out,
                        "  L7: allowed subject to HTTP inspection (give --http-method/--http-host/--http-path to evaluate a request)"
                    );
                }
                None => {}
            }
            out
        }
    }
}

/// `tollgate get fqdn`: what a running agent has learned, from the kernel's
/// FQDN sets — one row per selector, set and address with the remaining
/// TTL in seconds and how the agent learned it (`sources`, from the agent:
/// `snooped` or `resolved`; `-` when it did not say). Selectors of
/// `patterns` name their sets; a set no selector maps to shows `-`; a
/// selector with nothing learned shows one row without address.
pub fn render_fqdn(
    sets: &BTreeMap<String, crate::datapath::LearnedSet>,
    patterns: &[crate::fqdn::FqdnPattern],
    sources: &[crate::status::FqdnSource],
) -> String {
    use crate::datapath::{plan::fqdn_set, Family};
    let source = |selector: &str, address: &std::net::IpAddr| {
        sources
            .iter()
            .find(|s| s.selector == selector && s.address == *address)
            .map_or("-".to_string(), |s| s.source.clone())
    };
    let mut rows = vec![[
        "SELECTOR".to_string(),
        "SET".to_string(),
        "ADDRESS".to_string(),
        "TTL".to_string(),
        "SOURCE".to_string(),
    ]];
    let mut named = std::collections::BTreeSet::new();
    for pattern in patterns {
        let mut any = false;
        for family in Family::ALL {
            let name = fqdn_set(pattern, family);
            if let Some(set) = sets.get(&name) {
                for (address, ttl) in sorted(&set.entries) {
                    rows.push([
                        pattern.to_string(),
                        name.clone(),
                        address.to_string(),
                        ttl.to_string(),
                        source(pattern.as_str(), &address),
                    ]);
                    any = true;
                }
            }
            named.insert(name);
        }
        if !any {
            rows.push([
                pattern.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
        }
    }
    for (name, set) in sets.iter().filter(|(n, _)| !named.contains(*n)) {
        for (address, ttl) in sorted(&set.entries) {
            rows.push([
                "-".into(),
                name.clone(),
                address.to_string(),
                ttl.to_string(),
                "-".into(),
            ]);
        }
    }
    table(&rows)
}

fn sorted(entries: &[(IpAddr, u32)]) -> Vec<(IpAddr, u32)> {
    let mut entries = entries.to_vec();
    entries.sort();
    entries
}

fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join(" ").trim_end());
    }
    out
}

/// `tollgate get policies`: the table of `antctl get netpol
/// --sort-by=effectivePriority`.
pub fn render_policies(policies: &[PolicySummary]) -> String {
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
            if p.applied_to.is_empty() {
                "<none on this node>".to_string()
            } else {
                p.applied_to.join(",")
            },
            if p.rule_names.is_empty() {
                "<NONE>".to_string()
            } else {
                p.rule_names.join(",")
            },
        ]);
    }
    table(&rows)
}

/// `tollgate get skipped`: one row per object, its problems joined; JSON
/// and YAML carry every field.
pub fn render_skipped(
    refused: &[crate::source::kube::Refusal],
    format: crate::cli::SkippedFormat,
) -> Result<String, CommandError> {
    use crate::cli::SkippedFormat;
    let encoding = |e: &dyn std::fmt::Display| CommandError::Usage(format!("encoding: {e}"));
    match format {
        SkippedFormat::Json => serde_json::to_string_pretty(refused)
            .map(|s| s + "\n")
            .map_err(|e| encoding(&e)),
        SkippedFormat::Yaml => serde_saphyr::to_string(&refused).map_err(|e| encoding(&e)),
        SkippedFormat::Text if refused.is_empty() => {
            Ok("no object skipped or partly enforced\n".into())
        }
        SkippedFormat::Text => {
            let mut rows = vec![[
                "KIND".to_string(),
                "NAMESPACE".to_string(),
                "NAME".to_string(),
                "REASON".to_string(),
                "MESSAGE".to_string(),
            ]];
            for r in refused {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::{plan::fqdn_set, Family, LearnedSet};
    use crate::fqdn::FqdnPattern;

    #[test]
    fn skipped_objects_render_as_a_table_json_and_yaml() {
        use crate::cli::SkippedFormat;
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
        let text = render_skipped(&refused, SkippedFormat::Text).unwrap();
        assert_eq!(
            text,
            "KIND                 NAMESPACE NAME        REASON        MESSAGE\n\
             ClusterNetworkPolicy -         in-bad-tier PolicySkipped spec.tier: no Tier `bad`\n"
        );
        let json = render_skipped(&refused, SkippedFormat::Json).unwrap();
        let back: Vec<Refusal> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, refused);
        assert!(json.contains(r#""resourceVersion": "41""#), "{json}");
        let yaml = render_skipped(&refused, SkippedFormat::Yaml).unwrap();
        assert!(
            yaml.contains("uid: u-1") && yaml.contains("generation: 2"),
            "{yaml}"
        );
        assert_eq!(
            render_skipped(&[], SkippedFormat::Text).unwrap(),
            "no object skipped or partly enforced\n"
        );
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
        let text = render_fqdn(&sets, &[allowed.clone(), empty], &sources);
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
