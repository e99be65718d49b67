//! The inventory's directory: every endpoint's name and addresses
//! ([`Names`]) and the named container ports by address ([`NamedPorts`]),
//! as a ruleset reads them. Persistent maps, so that a ruleset shares them
//! with the next one and a change copies only the path to it. Kept by
//! [`super::Selections`]; never decides a flow.

use std::net::IpAddr;
use std::sync::Arc;

use crate::model::PortProtocol;

use super::NamedPort;

/// Named container ports by address, for rules with named ports: the
/// ports of the Pod at that address (of several, the last by
/// `namespace/name`). Cheap to clone (a persistent map).
#[derive(Clone, Debug, Default)]
pub struct NamedPorts(imbl::HashMap<IpAddr, Arc<[NamedPort]>>);

impl NamedPorts {
    /// The port the Pod at `ip` names `name` for `protocol`.
    pub fn get(&self, ip: IpAddr, name: &str, protocol: PortProtocol) -> Option<u16> {
        self.0
            .get(&ip)?
            .iter()
            .find(|(n, p, _)| n == name && *p == protocol)
            .map(|(_, _, port)| *port)
    }

    /// Sets the ports at `ip` (`None` forgets them).
    pub fn set(&mut self, ip: IpAddr, ports: Option<Arc<[NamedPort]>>) {
        match ports {
            Some(ports) => {
                self.0.insert(ip, ports);
            }
            None => {
                self.0.remove(&ip);
            }
        }
    }
}

/// Every inventory endpoint by name (`namespace/name` of a Pod or
/// ExternalEntity, `node:name` of a Node) with its addresses; a Pod hides
/// an ExternalEntity of the same name. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub(super) main: imbl::OrdMap<String, Arc<[IpAddr]>>,
    pub(super) entities: imbl::OrdMap<String, Arc<[IpAddr]>>,
}

impl Names {
    pub fn addresses_of(&self, name: &str) -> Option<&[IpAddr]> {
        self.main
            .get(name)
            .or_else(|| self.entities.get(name))
            .map(|ips| &ips[..])
    }

    /// The first name, in name order, whose addresses hold `ip`.
    pub fn name_of(&self, ip: IpAddr) -> Option<&str> {
        let main = self
            .main
            .iter()
            .find(|(_, ips)| ips.contains(&ip))
            .map(|(n, _)| n.as_str());
        let entity = self
            .entities
            .iter()
            .find(|(n, ips)| ips.contains(&ip) && !self.main.contains_key(*n))
            .map(|(n, _)| n.as_str());
        match (main, entity) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(super) fn set(
        map: &mut imbl::OrdMap<String, Arc<[IpAddr]>>,
        name: String,
        ips: Option<&[IpAddr]>,
    ) {
        match ips {
            Some(ips) => {
                map.insert(name, ips.into());
            }
            None => {
                map.remove(&name);
            }
        }
    }
}

impl NamedPorts {
    /// The named ports of the Pod at `ip` (none for any other address).
    pub fn of(&self, ip: IpAddr) -> &[NamedPort] {
        self.0.get(&ip).map_or(&[], |ports| &ports[..])
    }
}

impl Names {
    /// Every name with its addresses, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[IpAddr])> {
        let entities = self
            .entities
            .iter()
            .filter(|(n, _)| !self.main.contains_key(*n));
        let mut all: Vec<(&str, &[IpAddr])> = self
            .main
            .iter()
            .chain(entities)
            .map(|(n, ips)| (n.as_str(), &ips[..]))
            .collect();
        all.sort_unstable_by_key(|(n, _)| *n);
        all.into_iter()
    }

    /// Every name, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(n, _)| n)
    }
}

#[cfg(test)]
impl NamedPorts {
    pub(crate) fn fingerprint(&self) -> String {
        let sorted: std::collections::BTreeMap<_, _> = self.0.iter().collect();
        format!("{sorted:?}")
    }
}

#[cfg(test)]
impl Names {
    pub(crate) fn fingerprint(&self) -> String {
        format!("{:?} {:?}", self.main, self.entities)
    }
}
