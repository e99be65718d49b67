//! The AddressGroup: how one [`Selection`]'s members are published by the
//! `tollgate controller` and read by agents in controller mode
//! (`tollgate.io/v1alpha1`, a cluster-scoped custom resource; the design
//! is in `docs/design/scale.md`).
//!
//! A selection is published as slices of at most [`SLICE_MEMBERS`]
//! members, each an `AddressGroup` object named [`slice_name`] and
//! labelled [`SELECTION_LABEL`]`=<key>`, where the key ([`key`]) is the
//! same on the controller and on every agent because both compute it from
//! the selection's normal form with this code. Slice 0 always exists once
//! the selection is published, even empty: "present and empty" is not
//! "absent". Slice 0 also lists the selection's other slices
//! ([`AddressGroupSpec::slices`]): a reader holds the whole selection only
//! when it holds slice 0 and every slice it lists, so a selection being
//! published (its slice 0 written, its slice 7 not yet) is never read as
//! complete, which would let a Drop rule miss the members of slice 7. The
//! controller writes a selection's other slices before its slice 0
//! ([`crate::selection::publish::Write::phase`]). This module owns the
//! names, the key and the wire form; it never decides which selections
//! exist nor talks to an API server.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use smallvec::SmallVec;

use crate::model::PortProtocol;

use super::Selection;

/// The custom resource's API group.
pub const GROUP: &str = "tollgate.io";
/// Its version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of an AddressGroup.
pub const API_VERSION: &str = "tollgate.io/v1alpha1";
/// Its kind.
pub const KIND: &str = "AddressGroup";
/// Its plural (the collection's path segment).
pub const PLURAL: &str = "addressgroups";
/// The label holding a slice's selection key: agents watch the groups
/// they need with `tollgate.io/selection in (k1,k2,…)`.
pub const SELECTION_LABEL: &str = "tollgate.io/selection";
/// Members in one slice at most (about 3 KB of JSON).
pub const SLICE_MEMBERS: usize = 100;
/// Bytes of the SHA-1 kept in a key (20 hex digits).
const KEY_BYTES: usize = 10;

/// The key of a selection: the first 10 bytes of the SHA-1 of its
/// canonical JSON ([`canonical`]), in lower-case hex. A valid label value
/// and the prefix of every slice's name.
pub fn key(selection: &Selection) -> String {
    key_of(&canonical(selection))
}

/// The key of the selection whose canonical JSON is `canonical` (a
/// slice's [`AddressGroupSpec::selection`]): what [`key`] gives for it.
pub fn key_of(canonical: &str) -> String {
    let digest = Sha1::digest(canonical.as_bytes());
    digest[..KEY_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The selection's canonical JSON: its normal form serialized (maps are
/// ordered; Namespace names sorted by construction). Carried in each slice
/// so that a reader can check the key and a person can read what it is.
pub fn canonical(selection: &Selection) -> String {
    // A `Selection` holds only strings, maps and sequences: serializing it
    // cannot fail.
    serde_json::to_string(selection).unwrap_or_default()
}

/// The object name of slice `slice` of the selection keyed `key`.
pub fn slice_name(key: &str, slice: u32) -> String {
    format!("{key}-{slice}")
}

/// Slice `name` ([`slice_name`]) of the selection keyed `key` as the
/// API server holds it: an AddressGroup object labelled with the key,
/// `spec` its members. What the controller creates.
pub fn object(name: &str, key: &str, spec: &AddressGroupSpec) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "labels": {SELECTION_LABEL: key}},
        "spec": spec,
    })
}

/// The slices an agent holds, by object name ([`slice_name`]). Each is
/// shared: a copy of the map (the compiler keeps the one it last built
/// from while the watch writes the next) copies pointers, not members.
pub type Slices = BTreeMap<String, std::sync::Arc<AddressGroupSpec>>;

/// An AddressGroup's `spec`: one slice of one selection's members.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddressGroupSpec {
    /// The selection's canonical JSON ([`canonical`]).
    pub selection: String,
    /// This slice's number; slice 0 always exists.
    pub slice: u32,
    /// Slice 0 only: the numbers of the selection's other slices, in
    /// order. The selection is complete when each of them is held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<u32>,
    /// The members of this slice (at most [`SLICE_MEMBERS`]); a member
    /// stays in its slice for life.
    #[serde(default)]
    pub members: Vec<GroupMember>,
}

/// One member of a selection: a Pod, Node or ExternalEntity reduced to
/// what a peer needs. Never its name, labels or status. 48 bytes and no
/// allocation of its own for a member of one address and no named port
/// (80 as two vectors: an agent holds 150,000 of them in a wide group).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupMember {
    /// Its addresses.
    pub ips: SmallVec<[IpAddr; 1]>,
    /// Its named container ports (Pods only), for rules with named ports.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub named_ports: Box<[GroupNamedPort]>,
}

/// A named container port of a member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupNamedPort {
    pub name: String,
    pub protocol: PortProtocol,
    pub port: u16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LabelSelector;
    use crate::selection::NamespaceScope;

    fn app(value: &str) -> Selection {
        Selection::Pods {
            namespaces: NamespaceScope::names(["b", "a"]),
            pods: Some(LabelSelector {
                match_labels: [("app".to_string(), value.to_string())]
                    .into_iter()
                    .collect(),
                match_expressions: Vec::new(),
            }),
        }
    }

    #[test]
    fn equal_selections_share_a_key_and_different_ones_do_not() {
        assert_eq!(key(&app("web")), key(&app("web")));
        assert_ne!(key(&app("web")), key(&app("db")));
        let k = key(&app("web"));
        assert_eq!(key_of(&canonical(&app("web"))), k);
        assert_eq!(k.len(), 2 * KEY_BYTES);
        assert!(k
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(slice_name(&k, 3), format!("{k}-3"));
    }

    #[test]
    fn the_canonical_form_is_readable_and_stable() {
        assert_eq!(
            canonical(&app("web")),
            r#"{"Pods":{"namespaces":{"Names":["a","b"]},"pods":{"matchLabels":{"app":"web"}}}}"#
        );
    }

    #[test]
    fn a_slice_reads_back_what_was_written() {
        let spec = AddressGroupSpec {
            selection: canonical(&app("web")),
            slice: 0,
            slices: vec![1, 3],
            members: vec![GroupMember {
                ips: ["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()]
                    .as_slice()
                    .into(),
                named_ports: [GroupNamedPort {
                    name: "http".into(),
                    protocol: PortProtocol::Tcp,
                    port: 80,
                }]
                .into(),
            }],
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["members"][0]["namedPorts"][0]["protocol"], "TCP");
        assert_eq!(json["slices"], serde_json::json!([1, 3]));
        let back: AddressGroupSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
    }
}
