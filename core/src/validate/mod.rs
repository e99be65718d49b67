//! Admission validation: the checks Antrea's admission webhook (and the
//! Kubernetes API server, for NetworkPolicy) apply before accepting an
//! object, run over a whole [`Snapshot`] so that cross-object rules — Tier
//! and group references, Tier priorities, duplicate objects — are checked
//! as well. Pure: decoded objects in, [`Problem`]s out (errors refuse the
//! snapshot; warnings, such as a reference to a group not defined yet, do
//! not); it never reads files or the clock, and never rewrites an object.
//! A source that validates snapshot after snapshot keeps a [`Checker`],
//! which checks again only the objects that changed.

mod group;
mod intent;
mod k8s;
mod labels;
mod npapi;
mod policy;
mod rule;
mod tier;

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{
    AntreaGroup, Kind, LabelSelector, Memo, NamespacedName, Object, ObjectRef, SelectorOperator,
    Snapshot, Sourced, Tier, STATIC_TIERS,
};

use group::check_group;
pub use intent::{intent, inventory_nodes, review, Inventory, Whole, DEFAULT_NODE};
use k8s::check_k8s_policy;
use npapi::{anp_ports, check_admin_tier_priority, check_np_policy, cnp_protocols};
use policy::check_policy;
use tier::{check_tier, is_static_redeclaration};

#[cfg(test)]
mod tests;

/// One reason an object (or a document that should have been one) is
/// rejected. Displays as `PATH: Kind namespace/name: field: reason`; the
/// object and field parts are left out when unknown (a YAML syntax error
/// has no object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub origin: PathBuf,
    pub object: ObjectRef,
    /// Field path inside the object, e.g. `spec.ingress[1].from[0].ipBlock.except[0]`;
    /// for YAML syntax errors, the position (`line 3, column 7`).
    pub field: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.origin.display())?;
        if self.object.kind.is_some() || !self.object.name.is_empty() {
            write!(f, "{}: ", self.object)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Problem {}

/// Checks every object of `snapshot`, alone and against the others. The
/// result is empty when the snapshot would be admitted as a whole; warnings
/// are left out (see [`check`]).
pub fn validate(snapshot: &Snapshot) -> Vec<Problem> {
    check(snapshot).errors
}

/// What [`check`] found: errors refuse the snapshot, warnings do not (Antrea
/// admits those objects too, and `tollgate validate` prints them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

/// Checks every object of `snapshot` and returns errors and warnings.
pub fn check(snapshot: &Snapshot) -> Findings {
    Checker::new(false).check(snapshot)
}

/// A label selector met while checking, reduced to what [`intent`]
/// judges: where it is in its object, and the keys that narrow it (the
/// object and its origin are those it was met in: a [`Site`]).
struct SelectorSite {
    /// Field path of the selector, e.g. `spec.ingress[0].from[0].podSelector`.
    path: Box<str>,
    /// The keys a selected object must carry: each `matchLabels` key, and
    /// each `In` or `Exists` expression's (`NotIn` and `DoesNotExist` on a
    /// key nobody carries select everything).
    keys: Box<[(Narrows, Box<str>)]>,
}

/// Which part of a selector a key is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Narrows {
    MatchLabels,
    /// `matchExpressions[i]`.
    Expression(usize),
}

/// A selector site with the object it was met in.
type Site<'a> = (&'a Sourced, &'a SelectorSite);

/// Validation kept between the snapshots of one source. What an object's
/// own checks find (its problems, warnings and, for [`intent`], the
/// selectors met) depends on the object, where it came from, and the Tiers
/// and groups it is checked against ([`Index`]) alone: while those are the
/// same objects (the same [`Arc`]s) as at the last check, the findings
/// kept for the same object are used again instead of computed. A
/// Kubernetes source's snapshots share every unchanged object, and
/// validating all 4,500 policies of a cluster again for each change was a
/// quarter of an agent's CPU per change. What compares objects with each
/// other (a duplicate) is checked every time. The findings always equal
/// those of a fresh [`check`] of the same snapshot.
pub struct Checker {
    /// Whether the selectors met are collected (for [`intent`]).
    sites: bool,
    /// The Tiers and groups the kept findings were checked against, in
    /// snapshot order.
    index: Vec<Arc<Object>>,
    /// Each object of the last snapshot checked.
    kept: Memo<Kept>,
}

impl fmt::Debug for Checker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checker")
            .field("sites", &self.sites)
            .field("kept", &self.kept.len())
            .finish()
    }
}

/// One object's own findings.
struct Kept {
    origin: Arc<Path>,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    sites: Vec<SelectorSite>,
}

impl Checker {
    /// A checker that collects the selectors met when `sites`.
    pub fn new(sites: bool) -> Checker {
        Checker {
            sites,
            index: Vec::new(),
            kept: Memo::default(),
        }
    }

    /// [`check`] of `snapshot`.
    pub fn check(&mut self, snapshot: &Snapshot) -> Findings {
        self.walk(snapshot, true).0
    }

    /// Checks every object of `snapshot`: the findings, and (when the
    /// checker collects them) every label selector met on the way. Without
    /// `errors`, for a snapshot admitted already, whose errors the caller
    /// does not read, only the warnings are found: the names are not
    /// compared (the duplicate check was about a fifth of an agent's
    /// review).
    fn walk<'a>(&'a mut self, snapshot: &'a Snapshot, errors: bool) -> (Findings, Vec<Site<'a>>) {
        let index_objects: Vec<Arc<Object>> = snapshot
            .objects
            .iter()
            .filter(|s| {
                matches!(
                    *s.object,
                    Object::Tier(_) | Object::ClusterGroup(_) | Object::Group(_)
                )
            })
            .map(|s| Arc::clone(&s.object))
            .collect();
        let same_index = index_objects.len() == self.index.len()
            && index_objects
                .iter()
                .zip(&self.index)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !same_index {
            self.kept.clear();
        }
        self.index = index_objects;
        let index = Index::build(snapshot);
        let mut problems = Vec::new();
        let mut warnings = Vec::new();
        // Kind, Namespace (as `object_ref` gives it) and name. Hashed
        // with foldhash (seeded per process), not SipHash: SipHash of
        // these keys was 7 % of the local agent's samples at 6,000
        // objects.
        let mut seen: HashMap<(Kind, &str, &str), &Path, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(
                if errors { snapshot.objects.len() } else { 0 },
                Default::default(),
            );
        for sourced in &snapshot.objects {
            let object = &*sourced.object;
            // Origins compared as bytes: `Path`'s equality walks components.
            let own = self.kept.visit(
                &sourced.object,
                |kept| kept.origin.as_os_str() != sourced.origin.as_os_str(),
                || own(self.sites, sourced, object.object_ref(), &index),
            );
            warnings.extend(own.warnings.iter().cloned());
            if !errors {
                continue;
            }
            let meta = object.metadata();
            let kind = object.kind();
            let namespace = match kind.is_namespaced() {
                true => meta.namespace.as_deref().unwrap_or("default"),
                false => "",
            };
            let problem = |reason: String| Problem {
                origin: sourced.origin.to_path_buf(),
                object: object.object_ref(),
                field: "metadata.name".into(),
                reason,
            };
            if meta.name.is_empty() {
                problems.push(problem("must not be empty".into()));
            } else {
                // One hash of the key (a look-up and an insert hashed it
                // twice).
                match seen.entry((kind, namespace, meta.name.as_str())) {
                    Entry::Occupied(first) => {
                        let reason = format!(
                            "duplicate object: already defined in {}",
                            first.get().display()
                        );
                        problems.push(problem(reason));
                    }
                    Entry::Vacant(vacant) => {
                        vacant.insert(&sourced.origin);
                    }
                }
            }
            problems.extend(own.problems.iter().cloned());
        }
        self.kept.sweep();
        let sites = snapshot
            .objects
            .iter()
            .filter_map(|sourced| Some((sourced, self.kept.get(&sourced.object)?)))
            .flat_map(|(sourced, own)| own.sites.iter().map(move |site| (sourced, site)))
            .collect();
        let findings = Findings {
            errors: problems,
            warnings,
        };
        (findings, sites)
    }
}

/// The object's own checks, against `index` (collecting the selectors met
/// when `collect`).
fn own(collect: bool, sourced: &Sourced, object_ref: ObjectRef, index: &Index<'_>) -> Kept {
    let object = &*sourced.object;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let mut sites = Vec::new();
    let mut report = Report {
        origin: &sourced.origin,
        object: object_ref,
        problems: &mut problems,
        warnings: &mut warnings,
        sites: collect.then_some(&mut sites),
    };
    match object {
        Object::Tier(tier) => check_tier(&mut report, index, tier),
        Object::ClusterNetworkPolicy(policy) => {
            check_policy(&mut report, index, policy, Scope::Cluster)
        }
        Object::AntreaNetworkPolicy(policy) => {
            let namespace = report.object.namespace.clone().unwrap_or_default();
            check_policy(&mut report, index, policy, Scope::Namespace(&namespace))
        }
        Object::ClusterGroup(group) => check_group(&mut report, index, group, Scope::Cluster),
        Object::Group(group) => {
            let namespace = report.object.namespace.clone().unwrap_or_default();
            check_group(&mut report, index, group, Scope::Namespace(&namespace))
        }
        Object::K8sNetworkPolicy(policy) => check_k8s_policy(&mut report, policy),
        Object::AdminNetworkPolicy(policy) => {
            let ports = anp_ports(&policy.spec.ingress, &policy.spec.egress);
            check_np_policy(&mut report, &policy.view(), &ports, &[]);
        }
        Object::BaselineAdminNetworkPolicy(policy) => {
            let ports = anp_ports(&policy.spec.ingress, &policy.spec.egress);
            check_np_policy(&mut report, &policy.view(), &ports, &[]);
        }
        Object::NpClusterNetworkPolicy(policy) => {
            let protocols = cnp_protocols(policy);
            check_np_policy(&mut report, &policy.view(), &[], &protocols);
            check_admin_tier_priority(&mut report, index, policy);
        }
        Object::Node(_)
        | Object::Namespace(_)
        | Object::Pod(_)
        | Object::Service(_)
        | Object::ServiceAccount(_)
        | Object::ExternalEntity(_) => {}
    }
    check_dry_run_annotation(&mut report, object);
    Kept {
        origin: sourced.origin.clone(),
        problems,
        warnings,
        sites,
    }
}

/// [`crate::model::DRY_RUN_ANNOTATION`] with another value than `"true"`
/// (a `True` or `yes` meant as dry-run would enforce the policy), or on an
/// object that is not a policy, is warned about: the object is admitted,
/// and enforced.
fn check_dry_run_annotation(report: &mut Report<'_>, object: &Object) {
    let field = format!("metadata.annotations.{}", crate::model::DRY_RUN_ANNOTATION);
    let Some(value) = object
        .metadata()
        .annotations
        .get(crate::model::DRY_RUN_ANNOTATION)
    else {
        return;
    };
    let policy = matches!(
        object,
        Object::ClusterNetworkPolicy(_)
            | Object::AntreaNetworkPolicy(_)
            | Object::K8sNetworkPolicy(_)
            | Object::AdminNetworkPolicy(_)
            | Object::BaselineAdminNetworkPolicy(_)
            | Object::NpClusterNetworkPolicy(_)
    );
    if !policy {
        report.warn(field, "only policies can be dry-run: ignored");
    } else if value != "true" {
        report.warn(
            field,
            format!("{value:?} is not \"true\": the policy is enforced (remove the annotation, or set it to \"true\" for a dry-run)"),
        );
    }
}

/// Collects problems for one object.
struct Report<'a> {
    origin: &'a Path,
    object: ObjectRef,
    problems: &'a mut Vec<Problem>,
    warnings: &'a mut Vec<Problem>,
    /// Where the selectors met go, when they are collected.
    sites: Option<&'a mut Vec<SelectorSite>>,
}

impl Report<'_> {
    fn problem(&self, field: String, reason: String) -> Problem {
        Problem {
            origin: self.origin.to_path_buf(),
            object: self.object.clone(),
            field,
            reason,
        }
    }

    /// An error: the object is refused.
    fn add(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        let problem = self.problem(field.into(), reason.into());
        self.problems.push(problem);
    }

    /// A warning: the object is admitted as Antrea admits it.
    fn warn(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        let problem = self.problem(field.into(), reason.into());
        self.warnings.push(problem);
    }

    /// A label selector at `path`, for [`intent`] to compare with the
    /// inventory.
    fn selector(&mut self, path: &str, selector: &LabelSelector) {
        let Some(sites) = self.sites.as_deref_mut() else {
            return;
        };
        let labels = selector
            .match_labels
            .keys()
            .map(|key| (Narrows::MatchLabels, key.as_str().into()));
        let expressions = selector
            .match_expressions
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.operator, SelectorOperator::In | SelectorOperator::Exists))
            .map(|(i, e)| (Narrows::Expression(i), e.key.as_str().into()));
        sites.push(SelectorSite {
            path: path.into(),
            keys: labels.chain(expressions).collect(),
        });
    }
}

/// Cluster-scoped (ACNP, ClusterGroup) or in one Namespace (ANNP, Group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope<'a> {
    Cluster,
    Namespace(&'a str),
}

impl Scope<'_> {
    /// What a `group:` reference names in this scope.
    fn group_kind(self) -> &'static str {
        match self {
            Scope::Cluster => "ClusterGroup",
            Scope::Namespace(_) => "Group",
        }
    }
}

/// Lookups across the snapshot: Tiers and groups by name.
struct Index<'a> {
    /// Tier name → priority, static tiers included.
    tiers: HashMap<&'a str, i32>,
    /// Custom tiers in snapshot order (names may repeat).
    custom_tiers: Vec<&'a Tier>,
    cluster_groups: HashMap<&'a str, &'a AntreaGroup>,
    groups: HashMap<(&'a str, &'a str), &'a AntreaGroup>,
}

impl<'a> Index<'a> {
    fn build(snapshot: &'a Snapshot) -> Index<'a> {
        let mut index = Index {
            tiers: STATIC_TIERS.iter().copied().collect(),
            custom_tiers: Vec::new(),
            cluster_groups: HashMap::new(),
            groups: HashMap::new(),
        };
        for object in snapshot.iter() {
            match object {
                Object::Tier(tier) if !is_static_redeclaration(tier) => {
                    index.custom_tiers.push(tier);
                    index
                        .tiers
                        .entry(&tier.metadata.name)
                        .or_insert(tier.spec.priority);
                }
                Object::ClusterGroup(group) => {
                    index
                        .cluster_groups
                        .entry(&group.metadata.name)
                        .or_insert(group);
                }
                Object::Group(group) => {
                    let namespace = group.metadata.namespace.as_deref().unwrap_or("default");
                    index
                        .groups
                        .entry((namespace, &group.metadata.name))
                        .or_insert(group);
                }
                _ => {}
            }
        }
        index
    }

    fn group(&self, scope: Scope<'_>, name: &str) -> Option<&'a AntreaGroup> {
        match scope {
            Scope::Cluster => self.cluster_groups.get(name).copied(),
            Scope::Namespace(ns) => self.groups.get(&(ns, name)).copied(),
        }
    }
}

/// A `{name, namespace}` reference: the name is required, and so is the
/// Namespace where the referring object is cluster-scoped.
fn check_namespaced_name(report: &mut Report<'_>, scope: Scope, path: &str, r: &NamespacedName) {
    if r.name.is_empty() {
        report.add(format!("{path}.name"), "must not be empty");
    }
    if scope == Scope::Cluster && r.namespace.is_empty() {
        report.add(
            format!("{path}.namespace"),
            "must be set in a cluster-scoped object",
        );
    }
}

/// Returns the group a `group:` reference names. A reference to a group
/// not defined (yet) is valid, as in Antrea: it selects nothing until the
/// group appears, so it is only a warning.
fn check_group_ref<'a>(
    report: &mut Report<'_>,
    index: &Index<'a>,
    scope: Scope,
    path: &str,
    name: &str,
) -> Option<&'a AntreaGroup> {
    if name.is_empty() {
        report.add(path, "must not be empty");
        return None;
    }
    let found = index.group(scope, name);
    if found.is_none() {
        let reason = match scope {
            Scope::Cluster => format!("ClusterGroup `{name}` does not exist"),
            Scope::Namespace(ns) => format!("Group `{name}` does not exist in Namespace {ns}"),
        };
        report.warn(
            path,
            format!("{reason} (yet): selects nothing until it is defined"),
        );
    }
    found
}
