//! Least privilege for `tollgate run`: before the agent touches the kernel
//! it reduces its capabilities to the two its work needs and makes sure no
//! later `exec` can widen them again.
//!
//! - `CAP_NET_ADMIN`: iptables/ip6tables rules, ipsets (netlink and the
//!   `ipset` binary), NFQUEUE binding and verdicts, conntrack marks.
//! - `CAP_NET_RAW`: the raw sockets that inject the L7 403 answer and the
//!   resets, and the raw socket legacy iptables opens.
//!
//! Every other capability is removed from the effective, permitted,
//! inheritable and bounding sets, and `no_new_privs` is set. The two kept
//! capabilities are also raised in the ambient set, so the helper programs
//! the agent runs (`iptables-restore`, `ipset`) receive them when the agent
//! runs as a non-root user with file capabilities; as root they receive
//! exactly the bounding set, i.e. the same two.
//!
//! What this takes away from a root agent: reading files it does not own
//! when their mode denies it (`CAP_DAC_OVERRIDE`), binding ports below 1024
//! (`CAP_NET_BIND_SERVICE`, so `--metrics-address` needs a high port),
//! loading kernel modules by hand, mounting, ptrace, changing owners.
//! Netfilter modules the rules need are still loaded on demand by the
//! kernel (that autoload is gated by `CAP_NET_ADMIN`).
//!
//! This module never adds a capability the process did not start with.

use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities `tollgate run` keeps.
pub const KEPT: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW];

/// Why the capability sets could not be reduced.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("cannot {action}: {source}")]
    Caps {
        action: &'static str,
        #[source]
        source: caps::errors::CapsError,
    },
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
}

/// What [`drop_to_network_capabilities`] left the process with, for the
/// start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The capabilities left in the effective set, in [`KEPT`]'s order.
    pub effective: Vec<Capability>,
    /// Whether other capabilities could also be removed from the bounding
    /// set (needs `CAP_SETPCAP`; a non-root agent with file capabilities
    /// has a bounding set its parent chose).
    pub bounding_reduced: bool,
}

/// Reduces this process (all threads created afterwards inherit it: call
/// it before spawning any) to [`KEPT`] ∩ what it has now. A process
/// without `CAP_NET_ADMIN` is not refused here: the caller warns, and the
/// first kernel operation fails with the kernel's own error (so `tollgate
/// run` still reports invalid configuration or policies without root).
pub fn drop_to_network_capabilities() -> Result<Kept, PrivilegeError> {
    let caps_err = |action| move |source| PrivilegeError::Caps { action, source };
    let permitted = caps::read(None, CapSet::Permitted).map_err(caps_err("read capabilities"))?;
    let keep: CapsHashSet = KEPT
        .iter()
        .copied()
        .filter(|cap| permitted.contains(cap))
        .collect();

    // The bounding set first: removing from it needs CAP_SETPCAP, which
    // goes with the effective set below.
    let effective = caps::read(None, CapSet::Effective).map_err(caps_err("read capabilities"))?;
    let bounding_reduced = effective.contains(&Capability::CAP_SETPCAP);
    if bounding_reduced {
        for cap in caps::all().difference(&keep) {
            caps::drop(None, CapSet::Bounding, *cap)
                .map_err(caps_err("reduce the bounding set"))?;
        }
    }
    caps::set(None, CapSet::Inheritable, &keep)
        .map_err(caps_err("set inheritable capabilities"))?;
    caps::set(None, CapSet::Effective, &keep).map_err(caps_err("set effective capabilities"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(caps_err("set permitted capabilities"))?;
    caps::clear(None, CapSet::Ambient).map_err(caps_err("clear ambient capabilities"))?;
    for cap in &keep {
        caps::raise(None, CapSet::Ambient, *cap).map_err(caps_err("raise ambient capabilities"))?;
    }
    crate::sys::set_no_new_privs().map_err(PrivilegeError::NoNewPrivs)?;
    let mut effective: Vec<Capability> = keep.into_iter().collect();
    effective.sort_by_key(|cap| cap.index());
    Ok(Kept {
        effective,
        bounding_reduced,
    })
}
