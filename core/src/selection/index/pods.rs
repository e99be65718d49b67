//! Reading the Pods [`Selections`] holds: one by name, those of a
//! Namespace, the members of a Pod selection found through the indexes
//! (the controller's publisher reads them; the compiler reads address
//! sets). Never changes the index.

use super::super::{MemberKind, PodEntry, Selection};
use super::Selections;

impl Selections {
    /// Pod `namespace/name`, if known.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodEntry> {
        let id = self
            .pod_ids
            .get(&(namespace.to_string(), name.to_string()))?;
        self.pods[*id as usize].as_ref()
    }

    /// The Pods of Namespace `namespace`.
    pub fn pods_in(&self, namespace: &str) -> impl Iterator<Item = &PodEntry> {
        self.pods_by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|&id| self.pods[id as usize].as_ref())
    }

    /// The Pods a Pod selection selects now (none for another kind),
    /// found through the label and Namespace indexes.
    pub fn pod_members(&self, selection: &Selection) -> Vec<&PodEntry> {
        if selection.member_kind() != MemberKind::Pod {
            return Vec::new();
        }
        self.pod_candidates(selection)
            .into_iter()
            .filter_map(|id| self.pods[id as usize].as_ref())
            .filter(|pod| selection.matches_pod(pod, self.namespace_labels(&pod.namespace)))
            .collect()
    }
}
