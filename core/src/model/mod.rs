//! Typed objects tollgate reads — Antrea CRDs, Kubernetes NetworkPolicy, the
//! network-policy-api kinds and inventory — and the [`Snapshot`] a source
//! produces. Pure data: parsing from an already-decoded document is here,
//! reading files is in `source`.

pub mod antrea;
pub mod k8s;
pub mod memo;
pub mod meta;
pub mod npapi;
pub mod rule_name;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

pub use antrea::*;
pub use k8s::*;
pub use memo::Memo;
pub use meta::*;
pub use npapi::*;

/// The kinds tollgate understands, named as `kind:` spells them (the two
/// `NetworkPolicy` kinds are told apart by API group).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Tier,
    ClusterNetworkPolicy,
    AntreaNetworkPolicy,
    ClusterGroup,
    Group,
    K8sNetworkPolicy,
    Node,
    Namespace,
    Pod,
    Service,
    ServiceAccount,
    ExternalEntity,
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    /// `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy.
    NpClusterNetworkPolicy,
}

impl Kind {
    /// The name used in messages: `kind` as written, with the API group where
    /// it is needed to tell the two NetworkPolicies apart.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tier => "Tier",
            Kind::ClusterNetworkPolicy => "ClusterNetworkPolicy",
            Kind::AntreaNetworkPolicy => "NetworkPolicy.crd.antrea.io",
            Kind::ClusterGroup => "ClusterGroup",
            Kind::Group => "Group",
            Kind::K8sNetworkPolicy => "NetworkPolicy.networking.k8s.io",
            Kind::Node => "Node",
            Kind::Namespace => "Namespace",
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::ServiceAccount => "ServiceAccount",
            Kind::ExternalEntity => "ExternalEntity",
            Kind::AdminNetworkPolicy => "AdminNetworkPolicy",
            Kind::BaselineAdminNetworkPolicy => "BaselineAdminNetworkPolicy",
            Kind::NpClusterNetworkPolicy => "ClusterNetworkPolicy.policy.networking.k8s.io",
        }
    }

    /// Classifies an `apiVersion` / `kind` pair.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        TYPES
            .iter()
            .find(|(versions, name, _)| *name == kind && versions.contains(&api_version))
            .map(|(_, _, k)| *k)
    }

    /// The `apiVersion` and `kind` tollgate reads that are spelled
    /// `api_version` and `kind`, as static strings: what keeps them per
    /// object without a copy.
    pub fn spelling(api_version: &str, kind: &str) -> Option<(&'static str, &'static str)> {
        TYPES.iter().find_map(|(versions, name, _)| {
            let version = versions.iter().find(|v| **v == api_version)?;
            (*name == kind).then_some((*version, *name))
        })
    }

    /// Words that help with a type not read: the versions tollgate reads
    /// a known `kind` in, or the known kind nearest to a misspelt one.
    pub fn unknown_type_hint(kind: &str) -> Option<String> {
        let versions: Vec<&str> = TYPES
            .iter()
            .filter(|(_, name, _)| *name == kind)
            .flat_map(|(versions, _, _)| versions.iter().copied())
            .collect();
        if !versions.is_empty() {
            return Some(format!("tollgate reads {kind} as {}", versions.join(", ")));
        }
        crate::suggest::nearest(kind, TYPES.iter().map(|(_, name, _)| *name))
            .map(|near| format!("did you mean {near}?"))
    }

    /// The `apiVersion` and `kind` a document of this kind is written
    /// with (the newest version [`Kind::from_type`] reads).
    pub fn type_meta(self) -> (&'static str, &'static str) {
        match self {
            Kind::Tier => ("crd.antrea.io/v1beta1", "Tier"),
            Kind::ClusterNetworkPolicy => ("crd.antrea.io/v1beta1", "ClusterNetworkPolicy"),
            Kind::AntreaNetworkPolicy => ("crd.antrea.io/v1beta1", "NetworkPolicy"),
            Kind::ClusterGroup => ("crd.antrea.io/v1beta1", "ClusterGroup"),
            Kind::Group => ("crd.antrea.io/v1beta1", "Group"),
            Kind::K8sNetworkPolicy => ("networking.k8s.io/v1", "NetworkPolicy"),
            Kind::Node => ("v1", "Node"),
            Kind::Namespace => ("v1", "Namespace"),
            Kind::Pod => ("v1", "Pod"),
            Kind::Service => ("v1", "Service"),
            Kind::ServiceAccount => ("v1", "ServiceAccount"),
            Kind::ExternalEntity => ("crd.antrea.io/v1alpha2", "ExternalEntity"),
            Kind::AdminNetworkPolicy => ("policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy"),
            Kind::BaselineAdminNetworkPolicy => (
                "policy.networking.k8s.io/v1alpha1",
                "BaselineAdminNetworkPolicy",
            ),
            Kind::NpClusterNetworkPolicy => {
                ("policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy")
            }
        }
    }

    pub fn is_namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Tier
                | Kind::ClusterNetworkPolicy
                | Kind::ClusterGroup
                | Kind::Node
                | Kind::Namespace
                | Kind::AdminNetworkPolicy
                | Kind::BaselineAdminNetworkPolicy
                | Kind::NpClusterNetworkPolicy
        )
    }
}

const NPAPI_V1ALPHA1: &str = "policy.networking.k8s.io/v1alpha1";
const NPAPI_V1ALPHA2: &str = "policy.networking.k8s.io/v1alpha2";

/// Every type tollgate reads: the `apiVersion`s, the `kind`, and what it is.
const TYPES: &[(&[&str], &str, Kind)] = &[
    (
        &["crd.antrea.io/v1beta1", "crd.antrea.io/v1alpha1"],
        "Tier",
        Kind::Tier,
    ),
    (
        &["crd.antrea.io/v1beta1", "crd.antrea.io/v1alpha1"],
        "ClusterNetworkPolicy",
        Kind::ClusterNetworkPolicy,
    ),
    (
        &[NPAPI_V1ALPHA2],
        "ClusterNetworkPolicy",
        Kind::NpClusterNetworkPolicy,
    ),
    (
        &["crd.antrea.io/v1beta1", "crd.antrea.io/v1alpha1"],
        "NetworkPolicy",
        Kind::AntreaNetworkPolicy,
    ),
    (
        &["networking.k8s.io/v1"],
        "NetworkPolicy",
        Kind::K8sNetworkPolicy,
    ),
    (
        &[
            "crd.antrea.io/v1beta1",
            "crd.antrea.io/v1alpha1",
            "crd.antrea.io/v1alpha3",
        ],
        "ClusterGroup",
        Kind::ClusterGroup,
    ),
    (
        &[
            "crd.antrea.io/v1beta1",
            "crd.antrea.io/v1alpha1",
            "crd.antrea.io/v1alpha3",
        ],
        "Group",
        Kind::Group,
    ),
    (&["v1"], "Node", Kind::Node),
    (&["v1"], "Namespace", Kind::Namespace),
    (&["v1"], "Pod", Kind::Pod),
    (&["v1"], "Service", Kind::Service),
    (&["v1"], "ServiceAccount", Kind::ServiceAccount),
    (
        &["crd.antrea.io/v1alpha2"],
        "ExternalEntity",
        Kind::ExternalEntity,
    ),
    (
        &[NPAPI_V1ALPHA1],
        "AdminNetworkPolicy",
        Kind::AdminNetworkPolicy,
    ),
    (
        &[NPAPI_V1ALPHA1],
        "BaselineAdminNetworkPolicy",
        Kind::BaselineAdminNetworkPolicy,
    ),
];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decoded object. Its serialized form is what decisions are made
/// from: the bookkeeping the API server adds to metadata
/// (`resourceVersion`, `uid`, timestamps) is accepted and dropped as it is
/// read, and so is a policy's `status`.
///
/// The policy and group kinds are boxed: an enum is as large as its
/// largest variant, and unboxed they made every object 520 bytes: every
/// Pod a watch-mode agent or the controller holds (150,000 at the scale
/// `docs/design/scale.md` aims for) carried 300 bytes it never used.
/// Objects of the inventory kinds (Pods, Namespaces, Nodes, Services) are
/// the many; they stay inline.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum Object {
    Tier(Tier),
    ClusterNetworkPolicy(Box<AntreaPolicy>),
    AntreaNetworkPolicy(Box<AntreaPolicy>),
    ClusterGroup(Box<AntreaGroup>),
    Group(Box<AntreaGroup>),
    K8sNetworkPolicy(Box<K8sNetworkPolicy>),
    Node(Node),
    Namespace(Namespace),
    Pod(Pod),
    Service(Service),
    ServiceAccount(ServiceAccount),
    ExternalEntity(ExternalEntity),
    AdminNetworkPolicy(Box<AdminNetworkPolicy>),
    BaselineAdminNetworkPolicy(Box<BaselineAdminNetworkPolicy>),
    NpClusterNetworkPolicy(Box<NpClusterNetworkPolicy>),
}

impl Object {
    /// The object as a document [`crate::decode::parse_documents`] reads
    /// back to an equal object: its serialized form with `apiVersion` and
    /// `kind` (how the status API hands the agent's snapshot to `tollgate
    /// diff live`).
    pub fn to_document(&self) -> serde_json::Value {
        let (api_version, kind) = self.kind().type_meta();
        let mut document = match serde_json::to_value(self) {
            // Externally tagged: `{"Pod": {...}}`.
            Ok(serde_json::Value::Object(tagged)) => tagged
                .into_iter()
                .next()
                .map(|(_, body)| body)
                .unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        if let serde_json::Value::Object(map) = &mut document {
            map.insert("apiVersion".into(), api_version.into());
            map.insert("kind".into(), kind.into());
        }
        document
    }

    pub fn kind(&self) -> Kind {
        match self {
            Object::Tier(_) => Kind::Tier,
            Object::ClusterNetworkPolicy(_) => Kind::ClusterNetworkPolicy,
            Object::AntreaNetworkPolicy(_) => Kind::AntreaNetworkPolicy,
            Object::ClusterGroup(_) => Kind::ClusterGroup,
            Object::Group(_) => Kind::Group,
            Object::K8sNetworkPolicy(_) => Kind::K8sNetworkPolicy,
            Object::Node(_) => Kind::Node,
            Object::Namespace(_) => Kind::Namespace,
            Object::Pod(_) => Kind::Pod,
            Object::Service(_) => Kind::Service,
            Object::ServiceAccount(_) => Kind::ServiceAccount,
            Object::ExternalEntity(_) => Kind::ExternalEntity,
            Object::AdminNetworkPolicy(_) => Kind::AdminNetworkPolicy,
            Object::BaselineAdminNetworkPolicy(_) => Kind::BaselineAdminNetworkPolicy,
            Object::NpClusterNetworkPolicy(_) => Kind::NpClusterNetworkPolicy,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::Tier(o) => &o.metadata,
            Object::ClusterNetworkPolicy(o) | Object::AntreaNetworkPolicy(o) => &o.metadata,
            Object::ClusterGroup(o) | Object::Group(o) => &o.metadata,
            Object::K8sNetworkPolicy(o) => &o.metadata,
            Object::Node(o) => &o.metadata,
            Object::Namespace(o) => &o.metadata,
            Object::Pod(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::ServiceAccount(o) => &o.metadata,
            Object::ExternalEntity(o) => &o.metadata,
            Object::AdminNetworkPolicy(o) => &o.metadata,
            Object::BaselineAdminNetworkPolicy(o) => &o.metadata,
            Object::NpClusterNetworkPolicy(o) => &o.metadata,
        }
    }

    /// The network-policy-api view of an AdminNetworkPolicy,
    /// BaselineAdminNetworkPolicy or `v1alpha2` ClusterNetworkPolicy.
    pub fn np_policy(&self) -> Option<NpPolicy<'_>> {
        match self {
            Object::AdminNetworkPolicy(o) => Some(o.view()),
            Object::BaselineAdminNetworkPolicy(o) => Some(o.view()),
            Object::NpClusterNetworkPolicy(o) => Some(o.view()),
            _ => None,
        }
    }

    /// `Kind namespace/name` (or `Kind name` for cluster-scoped kinds).
    pub fn object_ref(&self) -> ObjectRef {
        let meta = self.metadata();
        ObjectRef {
            kind: Some(self.kind()),
            namespace: if self.kind().is_namespaced() {
                Some(meta.namespace.clone().unwrap_or_else(|| "default".into()))
            } else {
                None
            },
            name: meta.name.clone(),
        }
    }

    /// Decodes one document. The error names the field path where decoding
    /// stopped (`spec.ingress[0].action`). A field set to `null` reads as
    /// absent, as the API server reads it (see [`drop_null_fields`]).
    pub fn from_value(mut value: serde_json::Value) -> Result<Object, DecodeError> {
        drop_null_fields(&mut value);
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .ok_or(DecodeError::MissingType("apiVersion"))?
            .to_string();
        let kind_str = value
            .get("kind")
            .and_then(|v| v.as_str())
            .ok_or(DecodeError::MissingType("kind"))?
            .to_string();
        let kind =
            Kind::from_type(&api_version, &kind_str).ok_or_else(|| DecodeError::UnknownKind {
                api_version: api_version.clone(),
                kind: kind_str.clone(),
            })?;
        // An Antrea policy's rules are named as they are decoded
        // ([`antrea::GeneratedNames`]): every copy of the object made
        // after carries the names.
        let named = |policy: Box<AntreaPolicy>| {
            policy.name_rules();
            policy
        };
        Ok(match kind {
            Kind::Tier => Object::Tier(decode(value)?),
            Kind::ClusterNetworkPolicy => Object::ClusterNetworkPolicy(named(decode(value)?)),
            Kind::AntreaNetworkPolicy => Object::AntreaNetworkPolicy(named(decode(value)?)),
            Kind::ClusterGroup => Object::ClusterGroup(decode(value)?),
            Kind::Group => Object::Group(decode(value)?),
            Kind::K8sNetworkPolicy => Object::K8sNetworkPolicy(decode(value)?),
            Kind::Node => Object::Node(decode(value)?),
            Kind::Namespace => Object::Namespace(decode(value)?),
            Kind::Pod => Object::Pod(decode(value)?),
            Kind::Service => Object::Service(decode(value)?),
            Kind::ServiceAccount => Object::ServiceAccount(decode(value)?),
            Kind::ExternalEntity => Object::ExternalEntity(decode(value)?),
            Kind::AdminNetworkPolicy => Object::AdminNetworkPolicy(decode(value)?),
            Kind::BaselineAdminNetworkPolicy => Object::BaselineAdminNetworkPolicy(decode(value)?),
            Kind::NpClusterNetworkPolicy => Object::NpClusterNetworkPolicy(decode(value)?),
        })
    }
}

/// Removes every `key: null` from the maps of `value`, at any depth. The
/// Kubernetes API server reads a null optional field as absent (a CRD's
/// structural schema prunes it, a built-in type decodes it to its zero
/// value), so `podSelector:` left empty in YAML selects all Pods. A required
/// field set to null is then reported as missing. Null list items are kept,
/// and refused by the decoder.
pub fn drop_null_fields(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_null_fields);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_null_fields),
        _ => {}
    }
}

fn decode<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|e| DecodeError::Field {
        path: e.path().to_string(),
        reason: e.into_inner().to_string(),
    })
}

/// Why a document could not be turned into an [`Object`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}: missing or not a string")]
    MissingType(&'static str),
    #[error("kind: {api_version}/{kind} is not a kind tollgate reads")]
    UnknownKind { api_version: String, kind: String },
    #[error("{path}: {reason}")]
    Field { path: String, reason: String },
}

/// Identifies an object in messages: `Kind namespace/name`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: Option<Kind>,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Some(kind) => write!(f, "{kind} ")?,
            None => f.write_str("document ")?,
        }
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(if self.name.is_empty() {
                "-"
            } else {
                &self.name
            }),
        }
    }
}

/// An object and where it came from. The object is shared: a source's
/// store, the snapshots it admits and the compiler's copies of them hold
/// one decoded object, not one each (at 150,000 Pods and 4,500 policies a
/// deep copy of every object per snapshot was most of an agent's memory
/// and a seventh of its CPU per change). Two copies of one object are
/// equal without comparing it.
#[derive(Clone, Debug)]
pub struct Sourced {
    /// Shared by the objects of one file (or one source): copying a
    /// snapshot's objects copies no path.
    pub origin: Arc<Path>,
    pub object: Arc<Object>,
}

impl Sourced {
    pub fn new(origin: impl Into<Arc<Path>>, object: Object) -> Sourced {
        Sourced {
            origin: origin.into(),
            object: Arc::new(object),
        }
    }
}

impl PartialEq for Sourced {
    fn eq(&self, other: &Sourced) -> bool {
        (Arc::ptr_eq(&self.origin, &other.origin) || self.origin == other.origin)
            && (Arc::ptr_eq(&self.object, &other.object) || self.object == other.object)
    }
}

/// Everything one source read, in the order it read it. Validation and
/// compilation take a snapshot; hot reload replaces it whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub objects: Vec<Sourced>,
}

impl Snapshot {
    pub fn iter(&self) -> impl Iterator<Item = &Object> {
        self.objects.iter().map(|s| &*s.object)
    }
}
