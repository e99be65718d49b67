//! [`Membership`]: one selection in use, its members' addresses counted
//! and the shared set they make, patched copy-on-write. Owned by
//! [`super::Selections`]; never reads the inventory itself.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::Selection;

/// A selection in use and its members' addresses, counted (two Pods may
/// share one: host-network Pods).
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) selection: Selection,
    pub(super) counts: HashMap<IpAddr, u32>,
    pub(super) set: Arc<HashSet<IpAddr>>,
    /// Addresses whose count went to or from zero since the set was made.
    pub(super) touched: Vec<IpAddr>,
    pub(super) used: bool,
}

impl Membership {
    pub(super) fn add(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            let count = self.counts.entry(*ip).or_insert(0);
            *count += 1;
            if *count == 1 {
                self.touched.push(*ip);
            }
        }
    }

    pub(super) fn remove(&mut self, ips: &[IpAddr]) {
        for ip in ips {
            if let Some(count) = self.counts.get_mut(ip) {
                *count -= 1;
                if *count == 0 {
                    self.counts.remove(ip);
                    self.touched.push(*ip);
                }
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

    /// Brings the shared set up to date; whether it changed.
    pub(super) fn settle(&mut self) -> bool {
        if self.touched.is_empty() {
            return false;
        }
        let mut changed = false;
        let touched = std::mem::take(&mut self.touched);
        for ip in touched {
            let want = self.counts.contains_key(&ip);
            if want != self.set.contains(&ip) {
                let set = Arc::make_mut(&mut self.set);
                if want {
                    set.insert(ip);
                } else {
                    set.remove(&ip);
                }
                changed = true;
            }
        }
        changed
    }
}
