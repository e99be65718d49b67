//! What a delta or a snapshot would change in [`Selections`], found by
//! comparison alone: the delta that puts a member as it is held is
//! dropped, and the members a snapshot no longer holds become removals.

use std::collections::HashSet;

use super::super::Delta;
use super::Selections;

impl Selections {
    /// `delta` back if it changes anything; `None` when the member it puts
    /// is held as it is, or the one it removes is not held. A comparison,
    /// no copy.
    pub fn changing(&self, delta: Delta) -> Option<Delta> {
        match delta {
            Delta::Pod {
                namespace,
                name,
                pod,
            } => {
                let key = (namespace, name);
                let held = self
                    .pod_ids
                    .get(&key)
                    .and_then(|&id| self.pods[id as usize].as_ref());
                if held == pod.as_ref() {
                    return None;
                }
                let (namespace, name) = key;
                Some(Delta::Pod {
                    namespace,
                    name,
                    pod,
                })
            }
            Delta::Node { name, node } if self.nodes.get(&name) == node.as_ref() => None,
            Delta::Entity {
                namespace,
                name,
                entity,
            } => {
                let key = (namespace, name);
                if self.entities.get(&key) == entity.as_ref() {
                    return None;
                }
                let (namespace, name) = key;
                Some(Delta::Entity {
                    namespace,
                    name,
                    entity,
                })
            }
            delta => Some(delta),
        }
    }

    /// The deltas that remove the members `members` (as
    /// [`super::members`] makes them) no longer holds.
    pub fn gone(&self, members: &[Delta]) -> Vec<Delta> {
        let mut pods: HashSet<(&str, &str)> = HashSet::new();
        let mut nodes: HashSet<&str> = HashSet::new();
        let mut entities: HashSet<(&str, &str)> = HashSet::new();
        for delta in members {
            match delta {
                Delta::Pod {
                    namespace, name, ..
                } => {
                    pods.insert((namespace, name));
                }
                Delta::Node { name, .. } => {
                    nodes.insert(name);
                }
                Delta::Entity {
                    namespace, name, ..
                } => {
                    entities.insert((namespace, name));
                }
                Delta::Namespace { .. } => {}
            }
        }
        let pods_gone = self
            .pod_ids
            .keys()
            .filter(|(ns, n)| !pods.contains(&(ns.as_str(), n.as_str())))
            .map(|(namespace, name)| Delta::Pod {
                namespace: namespace.clone(),
                name: name.clone(),
                pod: None,
            });
        let nodes_gone = self
            .nodes
            .keys()
            .filter(|n| !nodes.contains(n.as_str()))
            .map(|name| Delta::Node {
                name: name.clone(),
                node: None,
            });
        let entities_gone = self
            .entities
            .keys()
            .filter(|(ns, n)| !entities.contains(&(ns.as_str(), n.as_str())))
            .map(|(namespace, name)| Delta::Entity {
                namespace: namespace.clone(),
                name: name.clone(),
                entity: None,
            });
        pods_gone.chain(nodes_gone).chain(entities_gone).collect()
    }
}
