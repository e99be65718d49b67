//! Facts about the host the agent runs on, read in this one place: the
//! host name and core count (the configuration's machine defaults) and
//! the addresses on the namespace's interfaces (an `RTM_GETADDR` dump
//! through `super::links`, at start and on every reload); the interfaces
//! behind the endpoints, for anti-spoofing, are `super::links`'. It reads;
//! it never changes the host.

use std::net::IpAddr;

use crate::compile::LocalNode;
use crate::config::{MachineDefaults, NodeConfig};

/// Why the interface addresses could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading interface addresses (RTM_GETADDR): {0}")]
pub struct HostError(std::io::Error);

/// The host name (empty when unreadable) and the number of cores.
pub fn machine_defaults() -> MachineDefaults {
    MachineDefaults {
        node_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        queues: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1)),
    }
}

/// The local Node: configured name, labels and addresses, plus every
/// address on the namespace's interfaces.
pub fn local_node(node: &NodeConfig) -> Result<LocalNode, HostError> {
    let mut addresses = node.addresses.clone();
    for address in interface_addresses()? {
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    Ok(LocalNode {
        name: node.name.clone(),
        labels: node.labels.clone().into_iter().collect(),
        addresses,
    })
}

fn interface_addresses() -> Result<Vec<IpAddr>, HostError> {
    super::links::namespace_addresses().map_err(HostError)
}
