//! A queued client→server TCP segment of an L7 connection, read without
//! copying: the connection it belongs to, its sequence numbers and its
//! payload. Panic-free on any input; the L7 queue copies whole packets.

use std::net::SocketAddr;

use etherparse::{IpNumber, IpSlice, LaxIpSlice, TcpSlice};

use crate::packet::flow::{Flow, Transport};

/// Why a queued packet is not a readable TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("IP header missing, truncated or malformed")]
    Ip,
    #[error("fragment")]
    Fragment,
    #[error("not TCP")]
    NotTcp,
    #[error("TCP header truncated or malformed")]
    Tcp,
}

/// One TCP connection, named from the client's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub client: SocketAddr,
    pub server: SocketAddr,
}

impl FlowKey {
    /// The same connection named from the other side.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            client: self.server,
            server: self.client,
        }
    }

    /// The connection as the classifier sees its first packet.
    pub fn flow(&self) -> Flow {
        Flow {
            src: self.client.ip(),
            dst: self.server.ip(),
            transport: Transport::Tcp {
                src_port: self.client.port(),
                dst_port: self.server.port(),
            },
            local: None,
        }
    }
}

/// A TCP segment of an L7 connection: client→server payload, or the
/// server's SYN-ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    pub key: FlowKey,
    pub seq: u32,
    /// The client's acknowledgment: the next byte it expects from the server.
    pub ack: u32,
    /// SYN and ACK set: the server's answer to the client's SYN (the key
    /// is then named from the sender's side: `client` is the server).
    pub syn_ack: bool,
    /// FIN set: the client has sent everything.
    pub fin: bool,
    /// RST set: the client abandons the connection.
    pub rst: bool,
    pub payload: &'a [u8],
}

/// Reads a whole IPv4 or IPv6 packet carrying TCP.
pub fn parse_segment(packet: &[u8]) -> Result<Segment<'_>, SegmentError> {
    let ip = IpSlice::from_slice(packet).map_err(|_| SegmentError::Ip)?;
    let payload = ip.payload();
    if payload.fragmented {
        return Err(SegmentError::Fragment);
    }
    if payload.ip_number != IpNumber::TCP {
        return Err(SegmentError::NotTcp);
    }
    let tcp = TcpSlice::from_slice(payload.payload).map_err(|_| SegmentError::Tcp)?;
    Ok(Segment {
        key: FlowKey {
            client: SocketAddr::new(ip.source_addr(), tcp.source_port()),
            server: SocketAddr::new(ip.destination_addr(), tcp.destination_port()),
        },
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        syn_ack: tcp.syn() && tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload(),
    })
}

/// Payload length of a TCP packet as its headers declare it, from a copy
/// that may be truncated after the TCP header (the new-connection queue
/// copies only headers). `None` when the headers cannot be read.
pub fn tcp_payload_len(packet: &[u8]) -> Option<usize> {
    let (ip, ext_error) = LaxIpSlice::from_slice(packet).ok()?;
    if ext_error.is_some() {
        return None;
    }
    let (segment_len, tcp) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let header = v4.header();
            let total = usize::from(header.total_len());
            (total.checked_sub(header.slice().len())?, v4.payload())
        }
        LaxIpSlice::Ipv6(v6) => {
            let declared = usize::from(v6.header().payload_length());
            (
                declared.checked_sub(v6.extensions().slice().len())?,
                v6.payload(),
            )
        }
    };
    if tcp.ip_number != IpNumber::TCP || tcp.fragmented {
        return None;
    }
    let data_offset = usize::from(*tcp.payload.get(12)? >> 4) * 4;
    segment_len.checked_sub(data_offset)
}
