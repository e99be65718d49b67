//! [`AddressSet`]: the addresses of one selection's members as the rules
//! built from it read them — sorted arrays, IPv4 as `u32` and IPv6 as
//! `u128` (4 and 16 bytes an address; the hash set of `IpAddr` it
//! replaces took 18, about twice that with its empty buckets: 4.5 MiB for
//! 150,000 Pods against 0.6). Shared by every ruleset that uses the
//! selection and replaced whole, by one merge, when its members change
//! ([`super::membership::Membership::settle`]). Pure data; never reads
//! the inventory.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A set of addresses, sorted; see the module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressSet {
    v4: Vec<u32>,
    v6: Vec<u128>,
}

impl AddressSet {
    /// Whether `ip` is in the set.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => self.v4.binary_search(&u32::from(*v4)).is_ok(),
            IpAddr::V6(v6) => self.v6.binary_search(&u128::from(*v6)).is_ok(),
        }
    }

    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// The addresses, IPv4 first, each family in order.
    pub fn iter(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let v4 = self.v4.iter().map(|&a| IpAddr::V4(Ipv4Addr::from(a)));
        let v6 = self.v6.iter().map(|&a| IpAddr::V6(Ipv6Addr::from(a)));
        v4.chain(v6)
    }

    /// This set with `changes` made: each address with whether it is a
    /// member now (an address may come more than once; its last entry
    /// counts). One merge of the sorted arrays.
    pub fn changed(&self, changes: impl IntoIterator<Item = (IpAddr, bool)>) -> AddressSet {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (ip, member) in changes {
            match ip {
                IpAddr::V4(a) => v4.push((u32::from(a), member)),
                IpAddr::V6(a) => v6.push((u128::from(a), member)),
            }
        }
        AddressSet {
            v4: merged(&self.v4, v4),
            v6: merged(&self.v6, v6),
        }
    }
}

/// `held` (sorted, distinct) with `changes` made: the last change of each
/// address says whether it is in.
fn merged<T: Ord + Copy>(held: &[T], mut changes: Vec<(T, bool)>) -> Vec<T> {
    if changes.is_empty() {
        return held.to_vec();
    }
    // Stable: of equal addresses the last change stays last.
    changes.sort_by_key(|&(a, _)| a);
    let mut last: Vec<(T, bool)> = Vec::with_capacity(changes.len());
    for change in changes {
        match last.last_mut() {
            Some(previous) if previous.0 == change.0 => *previous = change,
            _ => last.push(change),
        }
    }
    let added = last.iter().filter(|(_, member)| *member).count();
    let mut out = Vec::with_capacity(held.len() + added);
    let mut changes = last.into_iter().peekable();
    for &a in held {
        // Changes of addresses before `a`: the members among them are new.
        while let Some(&(c, member)) = changes.peek() {
            if c >= a {
                break;
            }
            if member {
                out.push(c);
            }
            changes.next();
        }
        match changes.peek() {
            Some(&(c, member)) if c == a => {
                changes.next();
                if member {
                    out.push(a);
                }
            }
            _ => out.push(a),
        }
    }
    out.extend(changes.filter(|&(_, member)| member).map(|(c, _)| c));
    out
}

impl FromIterator<IpAddr> for AddressSet {
    fn from_iter<I: IntoIterator<Item = IpAddr>>(ips: I) -> AddressSet {
        AddressSet::default().changed(ips.into_iter().map(|ip| (ip, true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn ip(n: u8, v6: bool) -> IpAddr {
        match v6 {
            false => IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
            true => IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n))),
        }
    }

    proptest! {
        /// Any sequence of changes to any set leaves exactly the addresses
        /// a `BTreeSet` holds after the same changes, in order, and
        /// answers `contains` as it does for every address tried.
        ///
        /// Mutation: `merged` keeping a held address whose last change
        /// removes it (the `if member` before `out.push(a)` dropped): fails.
        #[test]
        fn changes_leave_what_a_set_would(
            held in proptest::collection::vec((0u8..40, any::<bool>()), 0..30),
            changes in proptest::collection::vec(((0u8..40, any::<bool>()), any::<bool>()), 0..40),
        ) {
            let start: AddressSet = held.iter().map(|&(n, v6)| ip(n, v6)).collect();
            let mut want: BTreeSet<IpAddr> = held.iter().map(|&(n, v6)| ip(n, v6)).collect();
            prop_assert_eq!(start.iter().collect::<BTreeSet<_>>(), want.clone());
            for &((n, v6), member) in &changes {
                match member {
                    true => want.insert(ip(n, v6)),
                    false => want.remove(&ip(n, v6)),
                };
            }
            let after = start.changed(changes.iter().map(|&((n, v6), m)| (ip(n, v6), m)));
            prop_assert_eq!(after.iter().collect::<Vec<_>>(), want.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(after.len(), want.len());
            for n in 0..40 {
                for v6 in [false, true] {
                    prop_assert_eq!(after.contains(&ip(n, v6)), want.contains(&ip(n, v6)));
                }
            }
        }
    }
}
