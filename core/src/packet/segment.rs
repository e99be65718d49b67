//! A queued client→server TCP segment of an L7 connection, read without
//! copying: the connection it belongs to, its sequence numbers, whether it
//! carries urgent data, and its payload; and the one rewrite the L7 queue
//! makes to a packet ([`Rewrite::ClearUrgent`], checksum kept right).
//! Panic-free on any input; the L7 queue copies whole packets.

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
    /// URG set or a non-zero urgent pointer: a receiver without
    /// `SO_OOBINLINE` would take a byte out of the stream.
    pub urgent: bool,
    pub payload: &'a [u8],
}

/// Reads a whole IPv4 or IPv6 packet carrying TCP.
pub fn parse_segment(packet: &[u8]) -> Result<Segment<'_>, SegmentError> {
    let (ip, tcp) = tcp_slices(packet)?;
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
        urgent: tcp.urg() || tcp.urgent_pointer() != 0,
        payload: tcp.payload(),
    })
}

/// The IP header and the TCP segment of a whole, unfragmented packet:
/// the one reading [`parse_segment`] and [`Rewrite::apply`] share.
fn tcp_slices(packet: &[u8]) -> Result<(IpSlice<'_>, TcpSlice<'_>), SegmentError> {
    let ip = IpSlice::from_slice(packet).map_err(|_| SegmentError::Ip)?;
    let payload = ip.payload();
    if payload.fragmented {
        return Err(SegmentError::Fragment);
    }
    if payload.ip_number != IpNumber::TCP {
        return Err(SegmentError::NotTcp);
    }
    let tcp = TcpSlice::from_slice(payload.payload).map_err(|_| SegmentError::Tcp)?;
    Ok((ip, tcp))
}

/// A change made to a queued packet before it is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// Clears URG and the urgent pointer of a TCP segment (IPv4 or IPv6),
    /// updating its checksum: the receiver then reads the urgent byte
    /// in-band, as the L7 queue inspected it.
    ClearUrgent,
}

/// Offsets in the TCP header.
const TCP_FLAGS_WORD: usize = 12;
const TCP_CHECKSUM: usize = 16;
const TCP_URGENT_POINTER: usize = 18;
const URG: u8 = 0x20;

impl Rewrite {
    /// Rewrites `packet` (a whole IP packet) in place; an unreadable one
    /// is left unchanged and refused.
    pub fn apply(self, packet: &mut [u8]) -> Result<(), SegmentError> {
        match self {
            Rewrite::ClearUrgent => clear_urgent(packet),
        }
    }
}

/// Clears URG and the urgent pointer. The checksum is updated for the two
/// 16-bit words that change (RFC 1624, eqn. 3), so a segment whose checksum
/// was right stays right and one whose checksum was wrong stays wrong: the
/// rewrite never makes a corrupt segment acceptable.
fn clear_urgent(packet: &mut [u8]) -> Result<(), SegmentError> {
    let offset = {
        let (_, tcp) = tcp_slices(packet)?;
        // The TCP header's position in `packet`: the slice borrows it.
        (tcp.slice().as_ptr() as usize).wrapping_sub(packet.as_ptr() as usize)
    };
    let tcp = packet.get_mut(offset..).ok_or(SegmentError::Tcp)?;
    let word = |tcp: &[u8], at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    let old_flags = word(tcp, TCP_FLAGS_WORD);
    let old_pointer = word(tcp, TCP_URGENT_POINTER);
    let new_flags = old_flags & !u16::from(URG);
    if old_flags == new_flags && old_pointer == 0 {
        return Ok(());
    }
    let mut sum = !word(tcp, TCP_CHECKSUM);
    for (old, new) in [(old_flags, new_flags), (old_pointer, 0)] {
        sum = ones_complement_add(ones_complement_add(sum, !old), new);
    }
    tcp[TCP_FLAGS_WORD..TCP_FLAGS_WORD + 2].copy_from_slice(&new_flags.to_be_bytes());
    tcp[TCP_URGENT_POINTER..TCP_URGENT_POINTER + 2].copy_from_slice(&[0, 0]);
    tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].copy_from_slice(&(!sum).to_be_bytes());
    Ok(())
}

fn ones_complement_add(a: u16, b: u16) -> u16 {
    let sum = u32::from(a) + u32::from(b);
    ((sum & 0xffff) + (sum >> 16)) as u16
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

#[cfg(test)]
mod tests {
    use etherparse::PacketBuilder;

    use super::*;

    /// A client segment with URG and `pointer`, IPv4 or IPv6.
    fn urgent_segment(v6: bool, pointer: u16, payload: &[u8]) -> Vec<u8> {
        let builder = if v6 {
            PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64)
        } else {
            PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        };
        let builder = builder.tcp(40_000, 80, 1, 64_240).ack(7).psh().urg(pointer);
        let mut packet = Vec::new();
        builder.write(&mut packet, payload).unwrap();
        packet
    }

    /// Whether the TCP checksum is what the packet's bytes give.
    fn checksum_right(packet: &[u8]) -> bool {
        let ip = IpSlice::from_slice(packet).unwrap();
        let tcp = TcpSlice::from_slice(ip.payload().payload).unwrap();
        let want = match &ip {
            IpSlice::Ipv4(v4) => {
                tcp.calc_checksum_ipv4(v4.header().source(), v4.header().destination())
            }
            IpSlice::Ipv6(v6) => {
                tcp.calc_checksum_ipv6(v6.header().source(), v6.header().destination())
            }
        };
        let (want, got) = (want.unwrap(), tcp.checksum());
        // +0 and -0 in one's complement: a receiver accepts both.
        want == got || (want ^ got == 0xffff && (want == 0 || got == 0))
    }

    #[test]
    fn clearing_urgent_keeps_the_checksum_right_ipv4_and_ipv6() {
        for v6 in [false, true] {
            for (pointer, payload) in [(1, &b"5"[..]), (3, b"GET / HTTP/1.1\r\n"), (0xffff, b"")] {
                let mut packet = urgent_segment(v6, pointer, payload);
                let original = packet.clone();
                let before = parse_segment(&original).unwrap();
                assert!(before.urgent);
                Rewrite::ClearUrgent.apply(&mut packet).unwrap();
                let after = parse_segment(&packet).unwrap();
                assert!(!after.urgent, "v6 {v6} pointer {pointer}");
                assert_eq!(after.payload, payload);
                assert_eq!((after.seq, after.ack), (before.seq, before.ack));
                assert!(checksum_right(&packet), "v6 {v6} pointer {pointer}");
                // Only the flag, the pointer and the checksum changed.
                let changed: Vec<usize> = (0..packet.len())
                    .filter(|&i| packet[i] != original[i])
                    .collect();
                assert!(changed.len() <= 5, "{changed:?}");
            }
        }
    }

    #[test]
    fn an_urgent_pointer_without_urg_is_cleared_too() {
        let mut packet = urgent_segment(false, 9, b"x");
        // Clear URG by hand, keeping the pointer (and a right checksum).
        Rewrite::ClearUrgent.apply(&mut packet).unwrap();
        let tcp_at = 20;
        packet[tcp_at + 18..tcp_at + 20].copy_from_slice(&[0, 9]);
        let checksum = u16::from_be_bytes([packet[tcp_at + 16], packet[tcp_at + 17]]);
        let adjusted = ones_complement_add(!checksum, 9);
        packet[tcp_at + 16..tcp_at + 18].copy_from_slice(&(!adjusted).to_be_bytes());
        assert!(checksum_right(&packet));
        assert!(parse_segment(&packet).unwrap().urgent);
        Rewrite::ClearUrgent.apply(&mut packet).unwrap();
        assert!(!parse_segment(&packet).unwrap().urgent);
        assert!(checksum_right(&packet));
    }

    #[test]
    fn a_wrong_checksum_stays_wrong_and_unreadable_packets_are_refused() {
        let mut packet = urgent_segment(false, 1, b"5");
        packet[20 + 16] ^= 0x55;
        Rewrite::ClearUrgent.apply(&mut packet).unwrap();
        assert!(!parse_segment(&packet).unwrap().urgent);
        assert!(!checksum_right(&packet));

        let mut plain = urgent_segment(true, 0, b"GET");
        Rewrite::ClearUrgent.apply(&mut plain).unwrap();
        let unchanged = urgent_segment(true, 0, b"GET");
        let mut expected = unchanged.clone();
        Rewrite::ClearUrgent.apply(&mut expected).unwrap();
        assert_eq!(plain, expected);

        for bad in [
            &[][..],
            &[0x45, 0, 0],
            &urgent_segment(false, 1, b"5")[..30],
        ] {
            let mut bad = bad.to_vec();
            let copy = bad.clone();
            assert!(Rewrite::ClearUrgent.apply(&mut bad).is_err());
            assert_eq!(bad, copy, "left unchanged");
        }
        let mut udp = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1, 2)
            .write(&mut udp, b"x")
            .unwrap();
        assert_eq!(
            Rewrite::ClearUrgent.apply(&mut udp),
            Err(SegmentError::NotTcp)
        );
    }
}
