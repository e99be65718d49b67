//! The directory's upkeep in [`Selections`]: the names and named ports
//! that follow a Pod's addresses, and the named ports a published group's
//! members carry (controller mode). Never decides membership.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::super::{NamedPort, Names, PodEntry};
use super::{PodKey, Selections};

/// One holder's named ports at its addresses, as [`Selections::ports_moved`] takes them.
pub(super) type PortsAt = Option<(Vec<IpAddr>, Vec<NamedPort>)>;

impl Selections {
    /// Names and named ports follow a Pod's addresses.
    pub(super) fn directory_pod(
        &mut self,
        key: &PodKey,
        old: Option<&PodEntry>,
        new: Option<&PodEntry>,
    ) {
        let name = format!("{}/{}", key.0, key.1);
        let old_ips = old.map(|p| p.ips.as_slice());
        let new_ips = new.map(|p| p.ips.as_slice());
        if old_ips != new_ips {
            Names::set(&mut self.names.main, name, new_ips);
            self.directory_changes += 1;
        }
        let ports = |p: Option<&PodEntry>| {
            p.filter(|p| !p.named_ports.is_empty())
                .map(|p| (p.ips.clone(), p.named_ports.clone()))
        };
        self.ports_moved(key, ports(old), ports(new));
    }

    /// The named ports held by `key` move from `before` to `after`: at
    /// each address, the ports of its last holder by key count.
    pub(super) fn ports_moved(&mut self, key: &PodKey, before: PortsAt, after: PortsAt) {
        if before == after {
            return;
        }
        let mut touched = BTreeSet::new();
        if let Some((ips, _)) = &before {
            for ip in ips {
                if let Some(by_holder) = self.named.get_mut(ip) {
                    by_holder.remove(key);
                    if by_holder.is_empty() {
                        self.named.remove(ip);
                    }
                }
                touched.insert(*ip);
            }
        }
        if let Some((ips, named)) = &after {
            let named: Arc<[NamedPort]> = named.clone().into();
            for ip in ips {
                self.named
                    .entry(*ip)
                    .or_default()
                    .insert(key.clone(), Arc::clone(&named));
                touched.insert(*ip);
            }
        }
        for ip in touched {
            let ports = self
                .named
                .get(&ip)
                .and_then(|by_holder| by_holder.values().next_back().cloned());
            self.named_ports.set(ip, ports);
        }
        self.directory_changes += 1;
    }
}
