//! What a compiled ruleset can tell apart, read by the change review
//! ([`crate::review`]): the rule lists of the endpoint that owns an
//! address, the rules themselves, and the inventory's names and named
//! ports. Read-only views; nothing here decides a flow (that is
//! [`Ruleset::classify`]'s, which the review asks for every verdict).

use std::net::IpAddr;

use super::index::DirectionTable;
use super::{CompiledRule, PolicyRef, Ruleset};
use crate::model::{Direction, PortProtocol};

/// The rules of one direction of an enforced endpoint, in evaluation
/// order, as [`Ruleset::classify`] walks them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EnforcedLists<'a> {
    /// The endpoint is the local Node.
    pub local_node: bool,
    pub antrea: &'a [u32],
    /// `Some` when Kubernetes NetworkPolicies isolate the endpoint.
    pub k8s: Option<&'a [u32]>,
    /// An enforced (not dry-run) Kubernetes NetworkPolicy isolates it.
    pub isolated: bool,
    pub baseline: &'a [u32],
    pub isolated_by: &'a [PolicyRef],
}

impl EnforcedLists<'_> {
    /// Every rule id of the lists, in evaluation order.
    pub fn rules(&self) -> impl Iterator<Item = u32> + '_ {
        self.antrea
            .iter()
            .chain(self.k8s.into_iter().flatten())
            .chain(self.baseline)
            .copied()
    }
}

impl Ruleset {
    /// Every compiled rule instance, by id.
    pub(crate) fn compiled_rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// The rule lists `direction` of the endpoint owning `ip`, if this
    /// ruleset enforces for it.
    pub(crate) fn lists_of(&self, ip: IpAddr, direction: Direction) -> Option<EnforcedLists<'_>> {
        let &endpoint = self.endpoint_by_ip.get(&ip)?;
        let table = &self.tables[self.endpoint_tables[endpoint as usize] as usize];
        let (table, side): (&DirectionTable, usize) = match direction {
            Direction::Ingress => (&table.ingress, 0),
            Direction::Egress => (&table.egress, 1),
        };
        Some(EnforcedLists {
            local_node: endpoint == self.local_node_endpoint,
            antrea: table.antrea.rules(),
            k8s: table.k8s.as_ref().map(|k| k.rules()),
            isolated: table.isolated,
            baseline: table.baseline.rules(),
            isolated_by: &self.isolated_by[endpoint as usize][side],
        })
    }

    /// The named container ports of the Pod at `ip` (none for any other
    /// address).
    pub(crate) fn named_ports_of(&self, ip: IpAddr) -> &[(String, PortProtocol, u16)] {
        self.named_ports.of(ip)
    }

    /// The addresses of the endpoints this ruleset enforces for.
    pub(crate) fn endpoint_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.endpoint_by_ip.keys().copied()
    }

    /// Every endpoint of the inventory by name (`namespace/name` of a Pod
    /// or ExternalEntity, `node:name` of a Node) with its addresses.
    pub fn inventory_names(&self) -> impl Iterator<Item = (&str, &[IpAddr])> {
        self.names.iter()
    }
}
