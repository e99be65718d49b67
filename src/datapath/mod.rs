//! Kernel datapath: owns the `TOLLGATE-*` chains of the filter table (IPv4
//! and IPv6), one jump into each from INPUT, FORWARD and OUTPUT, and the
//! `tollgate-*` ipsets. It must never modify a rule, chain or set it does
//! not own. The desired state is planned by pure functions ([`plan`]),
//! compared with what is installed ([`state`], [`diff`]), and only the
//! difference is written, in one batch per table ([`apply`]).
//!
//! # Marks
//!
//! tollgate owns the packet/connection mark bits under the mask (default
//! `0xf00000`, bits 20–23; kube-proxy uses 0x4000 and 0x8000). Within it the
//! lowest set bit means *allow* (`0x100000`) and the next one *reject*
//! (`0x200000`); the other bits are reserved and cleared on every verdict.
//! A worker answers a queued first packet with that mark and `NF_REPEAT`;
//! the chain, re-entered from the top, acts on it. The connmark carries
//! only *allow* (saved with `CONNMARK --save-mark`), which is what lets
//! later packets of the connection bypass the queue.
//!
//! # Kernel state
//!
//! With the default configuration (two queues, fail-closed, all
//! interfaces), a rule applying to the Node's ingress and one enforced
//! endpoint `10.0.0.5`, `iptables-save -t filter` shows:
//!
//! ```text
//! *filter
//! :INPUT ACCEPT [0:0]
//! :FORWARD ACCEPT [0:0]
//! :OUTPUT ACCEPT [0:0]
//! :TOLLGATE-FORWARD - [0:0]
//! :TOLLGATE-INPUT - [0:0]
//! :TOLLGATE-OUTPUT - [0:0]
//! -A INPUT -j TOLLGATE-INPUT
//! -A FORWARD -j TOLLGATE-FORWARD
//! -A OUTPUT -j TOLLGATE-OUTPUT
//! -A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-FORWARD -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-FORWARD -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-FORWARD -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-INPUT -i lo -j ACCEPT
//! -A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-INPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-INPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-OUTPUT -o lo -j ACCEPT
//! -A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j CONNMARK --save-mark --nfmask 0xf00000 --ctmask 0xf00000
//! -A TOLLGATE-OUTPUT -m mark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -p tcp -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with tcp-reset
//! -A TOLLGATE-OUTPUT -m mark --mark 0x200000/0xf00000 -j REJECT --reject-with icmp-admin-prohibited
//! -A TOLLGATE-OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -m connmark --mark 0x100000/0xf00000 -j ACCEPT
//! -A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 src -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! -A TOLLGATE-OUTPUT -m set --match-set tollgate-endpoints-v4 dst -m conntrack --ctstate NEW -j NFQUEUE --queue-balance 100:101
//! COMMIT
//! ```
//!
//! and `ipset save` shows `create tollgate-endpoints-v4 hash:ip family inet
//! …`, `add tollgate-endpoints-v4 10.0.0.5` and an empty
//! `tollgate-endpoints-v6` (`family inet6`). `ip6tables-save` is the same
//! with `tollgate-endpoints-v6`, `icmp6-adm-prohibited`, and ICMPv6
//! neighbour discovery (types 133–137) accepted on INPUT and OUTPUT after
//! the connmark rule. Fail-open adds `--queue-bypass` to every NFQUEUE
//! rule; a single queue is `--queue-num N`; configured interfaces put
//! `-i IF` (INPUT), `-o IF` (OUTPUT) or both (FORWARD) on the NFQUEUE
//! rules; privileged entries become `-s CIDR [-p P [-m P --dport N]] -j
//! ACCEPT` on INPUT, `-d …` on OUTPUT and both on FORWARD, before the
//! NFQUEUE rules. Everything not matched falls off the end of the owned
//! chain and continues in the built-in chain untouched.

pub mod apply;
pub mod diff;
pub mod plan;
pub mod state;

pub use apply::{Backend, Kernel};
pub use diff::Changes;
pub use plan::{desired, Hook};
pub use state::{Family, State};

/// Why the kernel state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error("{command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command}: exited with {status}: {stderr}{}", input_note(.failing_input))]
    Failed {
        command: String,
        status: String,
        stderr: String,
        /// The input line the command complained about, when it named one.
        failing_input: Option<String>,
    },
    #[error("cannot tell the iptables backend from `iptables -V`: {version:?}")]
    UnknownBackend { version: String },
}

fn input_note(line: &Option<String>) -> String {
    line.as_ref()
        .map(|l| format!(" (input: {l:?})"))
        .unwrap_or_default()
}
