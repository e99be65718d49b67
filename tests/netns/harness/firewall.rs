//! A comparable picture of a namespace's netfilter state: `iptables-save`,
//! `ip6tables-save` and `ipset save`, with everything that changes without
//! anyone changing the rules (packet/byte counters, the dump's timestamp
//! comments, the order of set members) stripped.

use std::fmt;

use super::netns::Netns;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirewallState {
    pub iptables: String,
    pub ip6tables: String,
    pub ipsets: String,
}

impl FirewallState {
    pub fn capture(ns: &Netns) -> Self {
        FirewallState {
            iptables: normalize_save(&ns.dump("iptables-save")),
            ip6tables: normalize_save(&ns.dump("ip6tables-save")),
            ipsets: normalize_ipset(&ns.run(&["ipset", "save"]).stdout),
        }
    }

    /// The `-A` rule lines of both families.
    pub fn rules(&self) -> impl Iterator<Item = &str> {
        self.iptables
            .lines()
            .chain(self.ip6tables.lines())
            .filter(|l| l.starts_with("-A "))
    }

    /// Rules in built-in chain `chain` of the filter table that jump to
    /// `target`: `[IPv4, IPv6]` (tollgate's forward decisions have a jump
    /// of their own in the mangle table, not counted here).
    pub fn jumps(&self, chain: &str, target: &str) -> [usize; 2] {
        let prefix = format!("-A {chain} ");
        let suffix = format!("-j {target}");
        [&self.iptables, &self.ip6tables].map(|dump| {
            let mut table = "";
            dump.lines()
                .filter(|l| {
                    if let Some(t) = l.strip_prefix('*') {
                        table = t;
                    }
                    table == "filter" && l.starts_with(&prefix) && l.ends_with(&suffix)
                })
                .count()
        })
    }

    /// Names of the ipsets that exist.
    pub fn set_names(&self) -> Vec<&str> {
        self.ipsets
            .lines()
            .filter_map(|l| l.strip_prefix("create "))
            .filter_map(|l| l.split_whitespace().next())
            .collect()
    }

    /// Rule lines (per family, with their table) that occur more than once.
    pub fn duplicate_rules(&self) -> Vec<String> {
        let mut dups = Vec::new();
        for (family, dump) in [("ipv4", &self.iptables), ("ipv6", &self.ip6tables)] {
            let mut table = "";
            let mut seen = std::collections::BTreeSet::new();
            for line in dump.lines() {
                if let Some(t) = line.strip_prefix('*') {
                    table = t;
                    seen.clear();
                } else if line.starts_with("-A ") && !seen.insert(line) {
                    dups.push(format!("{family} {table}: {line}"));
                }
            }
        }
        dups
    }
}

impl fmt::Display for FirewallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- iptables\n{}--- ip6tables\n{}--- ipset\n{}",
            self.iptables, self.ip6tables, self.ipsets
        )
    }
}

/// Drops comment lines and turns `:CHAIN POLICY [p:b]` into `:CHAIN POLICY`.
///
/// A table that holds nothing but its built-in chains, empty and
/// accepting, is left out: it filters nothing, and the nf_tables backend
/// keeps a table a tool once created (the raw table tollgate's
/// anti-spoofing chain lived in) after its last chain is gone.
fn normalize_save(dump: &str) -> String {
    let mut out = String::new();
    let mut table: Vec<String> = Vec::new();
    for line in dump.lines().filter(|l| !l.starts_with('#')) {
        let line = if line.starts_with(':') {
            line.rsplit_once(" [").map_or(line, |(head, _)| head)
        } else {
            line
        };
        table.push(line.to_string());
        if line == "COMMIT" {
            let empty = table[1..table.len() - 1]
                .iter()
                .all(|l| l.starts_with(':') && l.ends_with(" ACCEPT"));
            if !empty {
                out.extend(table.iter().map(|l| format!("{l}\n")));
            }
            table.clear();
        }
    }
    out.extend(table.iter().map(|l| format!("{l}\n")));
    out
}

/// Sorts `ipset save` output so hash iteration order does not matter.
fn normalize_ipset(dump: &str) -> String {
    // The verdict cache's entries are the workers' (they come and time
    // out with traffic); its sets and the rules naming them are state.
    let mut lines: Vec<&str> = dump
        .lines()
        .filter(|l| !l.starts_with("add tollgate-vc-"))
        .collect();
    lines.sort_unstable();
    lines.iter().map(|l| format!("{l}\n")).collect()
}
