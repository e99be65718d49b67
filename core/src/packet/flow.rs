//! The vocabulary shared by the pure core and the datapath: a [`Flow`] (the
//! first packet of a connection, reduced to what policy can see, including
//! the [`LocalSide`] the kernel names) and the [`Verdict`] the classifier
//! returns for it. Nothing here does I/O.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

/// The transport of a flow, with the fields policy rules can match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase", tag = "transport")]
pub enum Transport {
    Tcp {
        src_port: u16,
        dst_port: u16,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Sctp {
        src_port: u16,
        dst_port: u16,
    },
    /// ICMP (IPv4) or ICMPv6: policy `icmp` protocols match both.
    Icmp {
        icmp_type: u8,
        icmp_code: u8,
    },
    /// IGMP message type and the group it names (0.0.0.0 for general queries).
    Igmp {
        igmp_type: u8,
        group: std::net::Ipv4Addr,
    },
    /// Any other IP protocol, by number.
    Other {
        number: u8,
    },
}

impl Transport {
    /// Upper-case protocol name, as the audit log and `trace` print it.
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Tcp { .. } => "TCP",
            Transport::Udp { .. } => "UDP",
            Transport::Sctp { .. } => "SCTP",
            Transport::Icmp { .. } => "ICMP",
            Transport::Igmp { .. } => "IGMP",
            Transport::Other { .. } => "IP",
        }
    }

    /// Destination port for port-carrying transports.
    pub fn dst_port(&self) -> Option<u16> {
        match *self {
            Transport::Tcp { dst_port, .. }
            | Transport::Udp { dst_port, .. }
            | Transport::Sctp { dst_port, .. } => Some(dst_port),
            _ => None,
        }
    }

    /// Source port for port-carrying transports.
    pub fn src_port(&self) -> Option<u16> {
        match *self {
            Transport::Tcp { src_port, .. }
            | Transport::Udp { src_port, .. }
            | Transport::Sctp { src_port, .. } => Some(src_port),
            _ => None,
        }
    }
}

/// The first packet of a connection as policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    #[serde(flatten)]
    pub transport: Transport,
    /// The side the kernel says is the Node itself, from the hook that
    /// queued the packet; `None` when it does not say (FORWARD, `trace`).
    #[serde(skip)]
    pub local: Option<LocalSide>,
}

/// Which side of a flow the kernel says is the Node itself: the
/// destination of a packet in the INPUT hook, the source of one in OUTPUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocalSide {
    Source,
    Destination,
}

/// Netfilter's hook numbers (`enum nf_inet_hooks` in
/// `linux/netfilter.h`), as NFQUEUE reports them.
pub const NF_INET_LOCAL_IN: u8 = 1;
pub const NF_INET_FORWARD: u8 = 2;
pub const NF_INET_LOCAL_OUT: u8 = 3;

impl LocalSide {
    /// The same side, for the flow named the other way round.
    pub fn opposite(self) -> LocalSide {
        match self {
            LocalSide::Source => LocalSide::Destination,
            LocalSide::Destination => LocalSide::Source,
        }
    }

    /// The Node's side of a packet queued from netfilter hook `hook`: the
    /// destination in INPUT, the source in OUTPUT, neither in FORWARD.
    pub fn of_hook(hook: u8) -> Option<LocalSide> {
        match hook {
            NF_INET_LOCAL_IN => Some(LocalSide::Destination),
            NF_INET_LOCAL_OUT => Some(LocalSide::Source),
            _ => None,
        }
    }
}

/// What happens to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    Allow,
    Drop,
    Reject,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Allow => "Allow",
            Verdict::Drop => "Drop",
            Verdict::Reject => "Reject",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_name_the_local_side() {
        assert_eq!(
            LocalSide::of_hook(NF_INET_LOCAL_IN),
            Some(LocalSide::Destination)
        );
        assert_eq!(
            LocalSide::of_hook(NF_INET_LOCAL_OUT),
            Some(LocalSide::Source)
        );
        assert_eq!(LocalSide::of_hook(NF_INET_FORWARD), None);
        assert_eq!(LocalSide::Source.opposite(), LocalSide::Destination);
    }
}
