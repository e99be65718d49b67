//! The kernel side of the FQDN table: each selector's ipsets (named by
//! [`fqdn_set`]), read back into [`RestoredEntry`]s at start and written
//! from a DNS step's [`SetWrite`]s over one netlink socket. Decides nothing.

use std::net::IpAddr;

use crate::datapath::ipset_netlink::{EntryOp, IpsetSocket, NetlinkError};
use crate::datapath::plan::fqdn_set;
use crate::datapath::Family;
use crate::fqdn::{FqdnPattern, RestoredEntry, SetWrite};

/// The entries of the kernel's FQDN sets (by set name, as the datapath
/// reads them) that belong to `selectors`, by selector index: what
/// [`crate::fqdn::FqdnTable::restore`] takes. Entries of unknown sets are left out.
pub fn restored_entries(
    selectors: &[FqdnPattern],
    kernel_sets: &[(String, Vec<(IpAddr, u32)>)],
) -> Vec<RestoredEntry> {
    let mut entries = Vec::new();
    for (selector, pattern) in selectors.iter().enumerate() {
        let names = [fqdn_set(pattern, Family::V4), fqdn_set(pattern, Family::V6)];
        for (_, set) in kernel_sets.iter().filter(|(name, _)| names.contains(name)) {
            entries.extend(set.iter().map(|&(address, remaining_secs)| RestoredEntry {
                selector,
                address,
                remaining_secs,
            }));
        }
    }
    entries
}

/// The set of `pattern` that holds `address`'s family.
fn set_of(pattern: &FqdnPattern, address: IpAddr) -> String {
    match address {
        IpAddr::V4(_) => fqdn_set(pattern, Family::V4),
        IpAddr::V6(_) => fqdn_set(pattern, Family::V6),
    }
}

/// The netlink socket the FQDN sets are written over.
pub struct FqdnSets(IpsetSocket);

impl FqdnSets {
    pub fn open() -> Result<FqdnSets, NetlinkError> {
        IpsetSocket::open().map(FqdnSets)
    }

    /// Applies `writes` in one batch (nothing to do for none).
    pub fn write(&mut self, writes: &[SetWrite]) -> Result<(), NetlinkError> {
        let named: Vec<(String, &SetWrite)> = writes
            .iter()
            .map(|write| match write {
                SetWrite::Add {
                    pattern, address, ..
                }
                | SetWrite::Remove { pattern, address } => (set_of(pattern, *address), write),
            })
            .collect();
        let ops: Vec<EntryOp<'_>> = named
            .iter()
            .map(|(set, write)| match **write {
                SetWrite::Add {
                    address,
                    timeout_secs,
                    ..
                } => EntryOp::Add {
                    set,
                    address,
                    timeout_secs,
                },
                SetWrite::Remove { address, .. } => EntryOp::Del { set, address },
            })
            .collect();
        self.0.apply(&ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restored_entries_take_the_kernel_sets_of_known_selectors() {
        let kept = FqdnPattern::new("*.kept.test");
        let quiet = FqdnPattern::new("quiet.test");
        let v4: IpAddr = "10.0.0.2".parse().unwrap();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        let sets = [
            (fqdn_set(&kept, Family::V6), vec![(v6, 30)]),
            ("tollgate-fqdn-stale-v4".to_string(), vec![(v4, 9)]),
            (fqdn_set(&kept, Family::V4), vec![(v4, 5)]),
        ];
        let entry = |address, remaining_secs| RestoredEntry {
            selector: 1,
            address,
            remaining_secs,
        };
        assert_eq!(
            restored_entries(&[quiet, kept], &sets),
            [entry(v6, 30), entry(v4, 5)]
        );
    }
}
