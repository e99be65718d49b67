//! Reduces the first bytes of a queued IP packet to the [`Flow`] policy
//! sees. Panic-free on any input: truncated copies (the queue copies only
//! the headers) are expected, and anything that cannot be read is a
//! [`PacketError`], never a guess.

use std::net::Ipv4Addr;

use etherparse::{IpNumber, LaxIpSlice};

use crate::packet::flow::{Flow, Transport};

/// Why a queued packet could not be reduced to a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("IP header missing, truncated or malformed")]
    IpHeader,
    #[error("IPv6 extension headers truncated or malformed")]
    ExtensionHeaders,
    #[error("fragment without the transport header")]
    Fragment,
    #[error("{protocol} header truncated")]
    Transport { protocol: &'static str },
}

/// Parses an IPv4 or IPv6 packet (starting at the IP header).
pub fn parse_flow(packet: &[u8]) -> Result<Flow, PacketError> {
    let (ip, ext_error) = LaxIpSlice::from_slice(packet).map_err(|_| PacketError::IpHeader)?;
    if ext_error.is_some() {
        return Err(PacketError::ExtensionHeaders);
    }
    let payload = ip.payload();
    if payload.fragmented {
        return Err(PacketError::Fragment);
    }
    let bytes = payload.payload;
    let v6 = matches!(ip, LaxIpSlice::Ipv6(_));
    let transport = match payload.ip_number {
        IpNumber::TCP => ports(bytes, "TCP", |src_port, dst_port| Transport::Tcp {
            src_port,
            dst_port,
        })?,
        IpNumber::UDP => ports(bytes, "UDP", |src_port, dst_port| Transport::Udp {
            src_port,
            dst_port,
        })?,
        IpNumber::SCTP => ports(bytes, "SCTP", |src_port, dst_port| Transport::Sctp {
            src_port,
            dst_port,
        })?,
        IpNumber::ICMP if !v6 => icmp(bytes, "ICMP")?,
        IpNumber::IPV6_ICMP if v6 => icmp(bytes, "ICMPv6")?,
        IpNumber::IGMP if !v6 => igmp(bytes)?,
        other => Transport::Other { number: other.0 },
    };
    Ok(Flow {
        src: ip.source_addr(),
        dst: ip.destination_addr(),
        transport,
        local: None,
    })
}

/// The length of the whole packet as its IP header states it (the queue
/// copies only the first bytes): IPv4 total length, IPv6 payload length
/// plus the fixed header. Falls back to the bytes at hand when the header
/// cannot say (a jumbogram, or a truncated header).
pub fn packet_length(packet: &[u8]) -> u32 {
    let field = |at: usize| {
        packet
            .get(at..at + 2)
            .map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])))
    };
    let stated = match packet.first().map(|b| b >> 4) {
        Some(4) => field(2),
        Some(6) => field(4).filter(|&len| len > 0).map(|len| len + 40),
        _ => None,
    };
    stated.unwrap_or(packet.len() as u32)
}

fn ports(
    bytes: &[u8],
    protocol: &'static str,
    make: impl Fn(u16, u16) -> Transport,
) -> Result<Transport, PacketError> {
    match bytes {
        [s0, s1, d0, d1, ..] => Ok(make(
            u16::from_be_bytes([*s0, *s1]),
            u16::from_be_bytes([*d0, *d1]),
        )),
        _ => Err(PacketError::Transport { protocol }),
    }
}

fn icmp(bytes: &[u8], protocol: &'static str) -> Result<Transport, PacketError> {
    match bytes {
        [icmp_type, icmp_code, ..] => Ok(Transport::Icmp {
            icmp_type: *icmp_type,
            icmp_code: *icmp_code,
        }),
        _ => Err(PacketError::Transport { protocol }),
    }
}

/// IGMPv3 membership reports.
const IGMP_V3_REPORT: u8 = 0x22;

/// IGMP type and group. A v1/v2 message names its group at offset 4; an
/// IGMPv3 report carries group records instead, and the group of the
/// first record is used (0.0.0.0 when it has none).
fn igmp(bytes: &[u8]) -> Result<Transport, PacketError> {
    let truncated = PacketError::Transport { protocol: "IGMP" };
    let igmp_type = *bytes.first().ok_or(truncated)?;
    let group_at = |offset: usize| -> Option<Ipv4Addr> {
        let octets: [u8; 4] = bytes.get(offset..offset + 4)?.try_into().ok()?;
        Some(Ipv4Addr::from(octets))
    };
    let group = if igmp_type == IGMP_V3_REPORT {
        let records = bytes
            .get(6..8)
            .map(|n| u16::from_be_bytes([n[0], n[1]]))
            .ok_or(truncated)?;
        if records == 0 {
            Ipv4Addr::UNSPECIFIED
        } else {
            group_at(12).ok_or(truncated)?
        }
    } else {
        group_at(4).ok_or(truncated)?
    };
    Ok(Transport::Igmp { igmp_type, group })
}

#[cfg(test)]
mod tests;
