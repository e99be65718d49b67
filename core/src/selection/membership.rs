//! [`Membership`]: one selection in use, its members' addresses counted
//! and the shared set they make, made again when settled after changes.
//! Owned by [`super::Selections`]; never reads the inventory itself.
//!
//! The set is the count of most addresses: an address in it counts one
//! member, and only addresses that more than one member holds (host-network
//! Pods share their Node's) have a count of their own. A map of every
//! address's count beside the set was 6.5 MiB for a selection of
//! 150,000 Pods.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::{AddressSet, Selection};

/// A selection in use and its members' addresses, counted.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) selection: Selection,
    /// The members' addresses as last settled: shared with the rulesets
    /// built from it.
    pub(super) set: Arc<AddressSet>,
    /// Addresses of `set` that more than one member holds: how many
    /// beyond the first.
    shared: HashMap<IpAddr, u32>,
    /// Since the last settle: how each touched address's count changed.
    pending: HashMap<IpAddr, i64>,
    pub(super) used: bool,
}

impl Membership {
    pub(super) fn new(selection: Selection) -> Membership {
        Membership {
            selection,
            set: Arc::default(),
            shared: HashMap::new(),
            pending: HashMap::new(),
            used: true,
        }
    }

    /// How many members held `ip` at the last settle.
    fn settled(&self, ip: &IpAddr) -> i64 {
        match self.set.contains(ip) {
            true => 1 + i64::from(self.shared.get(ip).copied().unwrap_or(0)),
            false => 0,
        }
    }

    pub(super) fn add(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            *self.pending.entry(*ip).or_insert(0) += 1;
        }
    }

    /// Removes one member's `ips`; an address no member holds stays out
    /// (its count never goes below zero).
    pub(super) fn remove(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            let settled = self.settled(ip);
            let change = self.pending.entry(*ip).or_insert(0);
            if settled + *change > 0 {
                *change -= 1;
            }
        }
    }

    /// Moves a member from `old` addresses (when it matched before) to
    /// `new` ones (when it matches now).
    pub(super) fn moved(&mut self, old: Option<&[IpAddr]>, new: Option<&[IpAddr]>) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            self.remove(old);
        }
        if let Some(new) = new {
            self.add(new);
        }
    }

    /// Whether addresses were added or removed since the last settle.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Brings the shared set up to date; whether it changed.
    pub(super) fn settle(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        // Taken whole: a first fill leaves no large map behind.
        let pending = std::mem::take(&mut self.pending);
        let mut changes = Vec::new();
        for (ip, change) in pending {
            let was = self.settled(&ip);
            let count = was + change;
            match count > 1 {
                true => self.shared.insert(ip, (count - 1) as u32),
                false => self.shared.remove(&ip),
            };
            if (was > 0) != (count > 0) {
                changes.push((ip, count > 0));
            }
        }
        if changes.is_empty() {
            return false;
        }
        // A new set, not the shared one changed: rulesets in force hold it.
        self.set = Arc::new(self.set.changed(changes));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selection::NamespaceScope;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn members(m: &Membership) -> Vec<IpAddr> {
        m.set.iter().collect()
    }

    /// An address two members hold (host-network Pods on one Node) stays
    /// until the last of them goes; a removal of an address no member
    /// holds changes nothing, and neither does a member added and removed
    /// between two settles.
    ///
    /// Mutation: `settle` not keeping `shared` counts (every count read
    /// as one): the node's address leaves with its first Pod (tried:
    /// fails).
    #[test]
    fn an_address_two_members_hold_stays_until_both_go() {
        let mut m = Membership::new(Selection::Pods {
            namespaces: NamespaceScope::All,
            pods: None,
        });
        let (node, pod) = (ip("10.0.0.1"), ip("10.1.0.7"));
        m.add(&[node]);
        m.add(&[node, pod]);
        assert!(m.settle());
        assert_eq!(members(&m), [node, pod]);
        m.remove(&[node]);
        assert!(!m.settle(), "one holder of {node} is left");
        assert_eq!(members(&m), [node, pod]);
        m.remove(&[ip("10.9.9.9")]);
        m.add(&[ip("10.2.0.1")]);
        m.remove(&[ip("10.2.0.1")]);
        assert!(!m.settle(), "nothing changed");
        m.remove(&[node]);
        m.remove(&[node]);
        assert!(m.settle());
        assert_eq!(members(&m), [pod]);
        m.add(&[node]);
        assert!(m.settle(), "a removal below zero was not kept");
        assert_eq!(members(&m), [node, pod]);
    }
}
