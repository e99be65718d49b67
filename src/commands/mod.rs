//! The subcommands that read — `validate`, `trace`, `get`, `status` — as
//! functions from a loaded snapshot or the agent's answer to the text they
//! print (tables, JSON, YAML). File reading is delegated to `source`, the
//! evaluation to `explain`, the asking to `status`'s client; printing and
//! exit codes belong to `main.rs`. Nothing here decides a verdict or
//! touches the kernel's tables.
//!
//! - this file: the errors, the local Node's identity, loading policies,
//!   asking the agent, `validate`'s summary and warnings;
//! - `get.rs`: what `get` selects (its filters, the FQDN rows);
//! - `render.rs`: every rendering, and the one `table()`.

mod get;
mod render;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use get::{filter_fqdn_rows, fqdn_rows, fqdn_selectors, FqdnRow};
pub use render::{
    render_endpoints, render_fqdn, render_policies, render_skipped, render_status, render_trace,
    TABLE_LIST,
};

use crate::cli::NodeArgs;
use crate::compile::{compile, LocalNode};
use crate::model::{Kind, Object, Snapshot};
use crate::ruleset::Ruleset;
use crate::source;
use crate::status::{self, Request, Response, StatusError};
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
