//! Whether traffic between the ports of one Linux bridge (container to
//! container on one Docker network) reaches iptables at all: bridged
//! frames pass the FORWARD hook only with the `br_netfilter` module loaded
//! and `net.bridge.bridge-nf-call-iptables` (IPv4) and
//! `net.bridge.bridge-nf-call-ip6tables` (IPv6) set to 1 in the network
//! namespace. [`read`] gathers the facts (the namespace's bridges from
//! `/sys/class/net`, the sysctls from `/proc/sys/net/bridge`);
//! [`unseen`] says what they mean. It reports only: it never loads a
//! module nor writes a sysctl (that changes every bridge of the host, and
//! loading a module needs a capability the agent drops).
#![allow(clippy::disallowed_methods)] // reads sysfs and procfs.

use std::path::Path;

/// What decides whether bridged traffic is seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Bridge devices of the namespace, by name.
    pub bridges: Vec<String>,
    /// `bridge-nf-call-iptables`, `None` when `br_netfilter` is not loaded.
    pub call_iptables: Option<bool>,
    /// `bridge-nf-call-ip6tables`, likewise.
    pub call_ip6tables: Option<bool>,
}

/// The fix an operator applies on the host.
pub const FIX: &str = "modprobe br_netfilter && sysctl -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1";

/// Why traffic between ports of a bridge bypasses tollgate, or `None`
/// when it is seen (or there is no bridge).
pub fn unseen(facts: &Facts) -> Option<String> {
    if facts.bridges.is_empty() {
        return None;
    }
    let bridges = facts.bridges.join(", ");
    let off: Vec<&str> = [
        ("net.bridge.bridge-nf-call-iptables", facts.call_iptables),
        ("net.bridge.bridge-nf-call-ip6tables", facts.call_ip6tables),
    ]
    .into_iter()
    .filter(|(_, on)| *on != Some(true))
    .map(|(name, _)| name)
    .collect();
    if facts.call_iptables.is_none() && facts.call_ip6tables.is_none() {
        return Some(format!(
            "br_netfilter is not loaded: traffic between containers on one bridge ({bridges}) bypasses tollgate; fix: {FIX}"
        ));
    }
    (!off.is_empty()).then(|| {
        format!(
            "{} = 0: traffic between containers on one bridge ({bridges}) bypasses tollgate; fix: {FIX}",
            off.join(", ")
        )
    })
}

/// The facts of the agent's network namespace.
pub fn read() -> Facts {
    let mut bridges: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("bridge").is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    bridges.sort();
    let sysctl = |name: &str| {
        std::fs::read_to_string(Path::new("/proc/sys/net/bridge").join(name))
            .ok()
            .map(|v| v.trim() != "0")
    };
    Facts {
        bridges,
        call_iptables: sysctl("bridge-nf-call-iptables"),
        call_ip6tables: sysctl("bridge-nf-call-ip6tables"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(bridges: &[&str], v4: Option<bool>, v6: Option<bool>) -> Facts {
        Facts {
            bridges: bridges.iter().map(|b| b.to_string()).collect(),
            call_iptables: v4,
            call_ip6tables: v6,
        }
    }

    #[test]
    fn bridged_traffic_unseen_names_the_cause_and_the_fix() {
        assert_eq!(unseen(&facts(&[], None, None)), None, "no bridge");
        assert_eq!(unseen(&facts(&["docker0"], Some(true), Some(true))), None);
        let missing = unseen(&facts(&["br-1", "docker0"], None, None)).unwrap();
        assert!(
            missing.starts_with("br_netfilter is not loaded: traffic between containers on one bridge (br-1, docker0)"),
            "{missing}"
        );
        assert!(missing.ends_with(FIX), "{missing}");
        let v6 = unseen(&facts(&["docker0"], Some(true), Some(false))).unwrap();
        assert!(
            v6.starts_with("net.bridge.bridge-nf-call-ip6tables = 0:"),
            "{v6}"
        );
        let both = unseen(&facts(&["docker0"], Some(false), Some(false))).unwrap();
        assert!(
            both.starts_with(
                "net.bridge.bridge-nf-call-iptables, net.bridge.bridge-nf-call-ip6tables = 0:"
            ),
            "{both}"
        );
    }
}
