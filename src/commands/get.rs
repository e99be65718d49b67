//! `tollgate get`: what it lists (policies, endpoints, the FQDN sets'
//! addresses, skipped objects), read through the [`View`] (the agent or
//! the policies given); which of them `-n`/`-p` ask for; and the rows of
//! `get fqdn`, joined from the agent's FQDN sets (read by the agent in its
//! own namespace), the selectors and how the agent learned each address.
//! Rendering is `render.rs`'s; nothing here writes the kernel or the
//! agent's state.

use std::net::IpAddr;
use std::process::ExitCode;

use super::render::{
    render_endpoints, render_fqdn, render_policies, render_skipped, select_json, FqdnRow,
};
use super::{ask, policy_files, repeat, unexpected, CommandError, View};
use crate::cli::{GetCommand, GetFilter, GetFormat, SkippedFilter};
use crate::explain::EndpointReport;
use crate::ruleset::PolicySummary;
use crate::status::{LearnedSetReport, Request, Response};

/// `tollgate get`: policies, endpoints and FQDN sets of the running agent
/// or of the policies given; the objects the agent skipped.
pub fn get(what: &GetCommand) -> Result<ExitCode, CommandError> {
    match what {
        GetCommand::Policies {
            policies,
            limits,
            node,
            socket,
            filter,
            output,
            ..
        } => {
            let view = View::new(policies, &policy_files(limits)?, node, &socket.socket)?;
            let list = view.policies()?;
            if filter.pod.is_some() {
                warn_unknown(filter, &view.endpoints()?);
            }
            let text = render_policies(&list, filter, output.output.plain())?;
            print!("{}", formatted(text, &output.output)?);
        }
        GetCommand::Endpoints {
            policies,
            limits,
            node,
            socket,
            filter,
            output,
            watch,
        } => {
            let view = View::new(policies, &policy_files(limits)?, node, &socket.socket)?;
            warn_unknown(filter, &view.endpoints()?);
            return repeat(watch, false, || {
                let list = view.endpoints()?;
                let text = render_endpoints(&list, filter, output.output.plain())?;
                formatted(text, &output.output)
            });
        }
        GetCommand::Fqdn {
            policies,
            limits,
            node,
            socket,
            filter,
            output,
        } => {
            let view = View::new(policies, &policy_files(limits)?, node, &socket.socket)?;
            let patterns = view.fqdn_selectors(filter);
            let report = match ask(&socket.socket, &Request::Fqdn)? {
                Response::Fqdn(report) => report,
                other => return Err(unexpected(&other)),
            };
            let rows = fqdn_rows(&report.sets, &patterns, &report.sources);
            let rows = filter_fqdn_rows(rows, filter);
            let text = render_fqdn(&rows, output.output.plain())?;
            print!("{}", formatted(text, &output.output)?);
        }
        GetCommand::Matrix(args) => return super::matrix(args),
        GetCommand::Skipped {
            socket,
            filter,
            output,
        } => match ask(&socket.socket, &Request::Skipped)? {
            Response::Skipped(refused) => {
                let text = render_skipped(&refused, filter, output.output.plain())?;
                print!("{}", formatted(text, &output.output)?);
            }
            other => return Err(unexpected(&other)),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr when `-n`/`-p` name no endpoint this node enforces for,
/// with the nearest name that it does: a typo must not read as "no
/// policy applies".
fn warn_unknown(filter: &GetFilter, endpoints: &[EndpointReport]) {
    if let Some(missing) = filter.unknown(endpoints) {
        eprintln!("warning: {missing}");
    }
}

/// The rendering `format` asks for, from the table, JSON or YAML: a
/// JSONPath's values are selected from the JSON.
fn formatted(text: String, format: &GetFormat) -> Result<String, CommandError> {
    match format {
        GetFormat::Plain(_) => Ok(text),
        GetFormat::JsonPath(path) => select_json(&text, path),
    }
}

impl GetFilter {
    /// What `-n`/`-p` ask for that no endpoint of `endpoints` is, and the
    /// nearest that is; `None` when something matches or nothing is asked.
    pub(super) fn unknown(&self, endpoints: &[EndpointReport]) -> Option<String> {
        let ns = self.namespace()?;
        if endpoints.iter().any(|e| self.endpoint(&e.endpoint)) {
            return None;
        }
        let names = endpoints.iter().map(|e| e.endpoint.as_str());
        Some(match &self.pod {
            Some(pod) => {
                let asked = format!("{ns}/{pod}");
                let hint = crate::suggest::did_you_mean(&asked, names);
                format!("no endpoint {asked} on this node{hint}")
            }
            None => {
                let namespaces: std::collections::BTreeSet<&str> = endpoints
                    .iter()
                    .filter_map(|e| e.namespace.as_deref())
                    .collect();
                let hint = crate::suggest::did_you_mean(ns, namespaces);
                format!("no endpoint in Namespace {ns} on this node{hint}")
            }
        })
    }

    /// The Namespace asked for (`-p` without `-n` means `default`).
    pub(super) fn namespace(&self) -> Option<&str> {
        match (&self.namespace, &self.pod) {
            (Some(ns), _) => Some(ns),
            (None, Some(_)) => Some("default"),
            (None, None) => None,
        }
    }

    /// Whether an endpoint (`namespace/name`, or a Node's name) is asked for.
    pub(super) fn endpoint(&self, endpoint: &str) -> bool {
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
    pub(super) fn policy(&self, policy: &PolicySummary) -> bool {
        let applied = || policy.applied_to.iter().any(|e| self.endpoint(e));
        match (self.namespace(), &self.pod) {
            (None, _) => true,
            (Some(_), Some(_)) => applied(),
            (Some(ns), None) => policy.policy.namespace.as_deref() == Some(ns) || applied(),
        }
    }
}

/// `tollgate get fqdn`: what a running agent has learned, from the kernel's
/// FQDN sets — one row per selector, set and address with the remaining
/// TTL in seconds and how the agent learned it (`sources`, from the agent:
/// `snooped` or `resolved`; `-` when it did not say). Selectors of
/// `patterns` name their sets; a set no selector maps to shows `-`; a
/// selector with nothing learned shows one row without address.
pub fn fqdn_rows(
    sets: &[LearnedSetReport],
    patterns: &[crate::fqdn::FqdnPattern],
    sources: &[crate::status::FqdnSource],
) -> Vec<FqdnRow> {
    let sets: std::collections::BTreeMap<&str, &LearnedSetReport> =
        sets.iter().map(|s| (s.name.as_str(), s)).collect();
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
            if let Some(set) = sets.get(name.as_str()) {
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
    for (name, set) in sets.iter().filter(|(n, _)| !named.contains(**n)) {
        for (address, ttl) in sorted(&set.entries) {
            rows.push(FqdnRow {
                selector: None,
                set: Some(name.to_string()),
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

fn sorted(entries: &[(IpAddr, u32)]) -> Vec<(IpAddr, u32)> {
    let mut entries = entries.to_vec();
    entries.sort();
    entries
}

impl SkippedFilter {
    /// Whether a skipped object is asked for: in the Namespace (`-n`),
    /// of the name (`-p`).
    pub(super) fn object(&self, refused: &crate::source::kube::Refusal) -> bool {
        let namespace = self
            .namespace
            .as_deref()
            .is_none_or(|ns| refused.namespace.as_deref() == Some(ns));
        let name = self.name.as_deref().is_none_or(|n| refused.name == n);
        namespace && name
    }
}
