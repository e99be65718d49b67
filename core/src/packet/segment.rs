//! A queued TCP segment of an L7 connection, read without copying: the
//! connection it belongs to, its sequence numbers, flags and timestamp,
//! whether it carries urgent data, its payload, and whether the segment
//! alone makes a receiver throw it away ([`Discard`]: a wrong checksum, a
//! TCP option or an IP extension the receiver refuses, impossible flags);
//! and the one rewrite the L7 queue makes to a packet
//! ([`Rewrite::ClearUrgent`], checksum kept right). It reads options the
//! way Linux does (an option it does not know is skipped by its length),
//! never guesses what a malformed one means, and is panic-free on any
//! input; the L7 queue copies whole packets.

use std::net::SocketAddr;

use etherparse::{IpNumber, IpSlice, Ipv6ExtensionSlice, LaxIpSlice, TcpSlice};

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
    /// The sender's acknowledgment: the next byte it expects from its peer.
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
    /// The TCP timestamp option, when the segment carries one.
    pub timestamp: Option<Timestamp>,
    /// Why the receiver throws this segment away whatever its connection's
    /// state, if it does: such a segment must be dropped, never read.
    pub discard: Option<Discard>,
    pub payload: &'a [u8],
}

/// A TCP timestamp option (RFC 7323).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp {
    /// `TSval`: the sender's clock.
    pub value: u32,
    /// `TSecr`: the newest `TSval` the sender received from its peer.
    pub echo: u32,
}

/// Why a receiving TCP would throw a segment away. The first four are read
/// from the segment alone ([`parse_segment`]); the last two need what the
/// connection showed before (the L7 inspector decides them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Discard {
    /// The TCP checksum is wrong.
    Checksum,
    /// A TCP option the receiver refuses: MD5 signature (kind 19) or
    /// TCP-AO (kind 29), which a server without the key drops; an option
    /// whose length runs past the header or is below 2; a timestamp
    /// option of the wrong length, or two of them.
    TcpOption,
    /// An IP extension the receiver may drop: an IPv6 Hop-by-Hop or
    /// Destination option whose type says "discard" (high bits 01, 10 or
    /// 11) or that Linux checks (Router Alert, CALIPSO, IOAM), padding Linux
    /// refuses (more than 7 bytes in a row, PadN not all zero), more than 8
    /// options in a header, an option running past its header; a Routing
    /// header; an Authentication header (IPv4 or IPv6).
    IpExtension,
    /// Flags no receiver accepts data with on an open connection: payload
    /// or FIN without ACK, or SYN with payload.
    Flags,
    /// The timestamp is older than the newest one the connection's client
    /// sent (PAWS, RFC 7323).
    Paws,
    /// The acknowledgment is older than one the client sent before: below
    /// what the server has had acknowledged, which a server drops once it
    /// is a window below.
    StaleAck,
}

/// Reads a whole IPv4 or IPv6 packet carrying TCP.
pub fn parse_segment(packet: &[u8]) -> Result<Segment<'_>, SegmentError> {
    let (ip, tcp) = tcp_slices(packet)?;
    let payload = tcp.payload();
    let (syn, ack) = (tcp.syn(), tcp.ack());
    let options = read_options(tcp.options());
    let flags_refused = (!syn && !ack && !tcp.rst() && (!payload.is_empty() || tcp.fin()))
        || (syn && !ack && !payload.is_empty());
    let discard = if !checksum_right(&ip, &tcp) {
        Some(Discard::Checksum)
    } else if let Err(discard) = options {
        Some(discard)
    } else if !ip_extensions_accepted(&ip) {
        Some(Discard::IpExtension)
    } else if flags_refused {
        Some(Discard::Flags)
    } else {
        None
    };
    Ok(Segment {
        key: FlowKey {
            client: SocketAddr::new(ip.source_addr(), tcp.source_port()),
            server: SocketAddr::new(ip.destination_addr(), tcp.destination_port()),
        },
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        syn_ack: syn && ack,
        fin: tcp.fin(),
        rst: tcp.rst(),
        urgent: tcp.urg() || tcp.urgent_pointer() != 0,
        timestamp: options.unwrap_or(None),
        discard,
        payload,
    })
}

/// Whether the TCP checksum verifies (the L7 queue gets whole packets with
/// their checksums filled in: the kernel completes offloaded ones before
/// queueing). +0 and -0 are one value to a receiver.
fn checksum_right(ip: &IpSlice<'_>, tcp: &TcpSlice<'_>) -> bool {
    let want = match ip {
        IpSlice::Ipv4(v4) => {
            tcp.calc_checksum_ipv4(v4.header().source(), v4.header().destination())
        }
        IpSlice::Ipv6(v6) => {
            tcp.calc_checksum_ipv6(v6.header().source(), v6.header().destination())
        }
    };
    let got = tcp.checksum();
    want.is_ok_and(|want| want == got || (want ^ got == 0xffff && (want == 0 || got == 0)))
}

/// TCP option kinds.
const OPTION_END: u8 = 0;
const OPTION_NOP: u8 = 1;
const OPTION_TIMESTAMP: u8 = 8;
const OPTION_MD5: u8 = 19;
const OPTION_AO: u8 = 29;

/// Walks the TCP options as Linux does (`tcp_parse_options`: end of list
/// stops, NOP is one byte, anything else is kind, length, data; an unknown
/// kind is skipped by its length) and returns the timestamp, or why a
/// receiver refuses the segment. Where Linux would stop reading silently
/// (a length below 2 or past the header), the segment is refused: the
/// options after it would be read by one receiver and not another.
fn read_options(options: &[u8]) -> Result<Option<Timestamp>, Discard> {
    let mut timestamp = None;
    let mut rest = options;
    while let Some((&kind, after)) = rest.split_first() {
        match kind {
            OPTION_END => break,
            OPTION_NOP => {
                rest = after;
                continue;
            }
            _ => {}
        }
        let len = usize::from(*after.first().ok_or(Discard::TcpOption)?);
        if len < 2 || len > rest.len() {
            return Err(Discard::TcpOption);
        }
        let (option, next) = rest.split_at(len);
        match kind {
            OPTION_MD5 | OPTION_AO => return Err(Discard::TcpOption),
            OPTION_TIMESTAMP => {
                let [_, _, v0, v1, v2, v3, e0, e1, e2, e3] = *option else {
                    return Err(Discard::TcpOption);
                };
                if timestamp.is_some() {
                    return Err(Discard::TcpOption);
                }
                timestamp = Some(Timestamp {
                    value: u32::from_be_bytes([v0, v1, v2, v3]),
                    echo: u32::from_be_bytes([e0, e1, e2, e3]),
                });
            }
            _ => {}
        }
        rest = next;
    }
    Ok(timestamp)
}

/// Whether a receiver surely reads past the packet's IP extensions: no
/// Authentication header, no Routing header, and only options Linux skips
/// in Hop-by-Hop and Destination Options headers (`ip6_parse_tlv`).
fn ip_extensions_accepted(ip: &IpSlice<'_>) -> bool {
    match ip {
        IpSlice::Ipv4(v4) => v4.extensions().is_empty(),
        IpSlice::Ipv6(v6) => v6
            .extensions()
            .clone()
            .into_iter()
            .all(|extension| match extension {
                Ipv6ExtensionSlice::HopByHop(header) => {
                    ipv6_options_skipped(header.payload(), true)
                }
                Ipv6ExtensionSlice::DestinationOptions(header) => {
                    ipv6_options_skipped(header.payload(), false)
                }
                // Fragments are refused before this is asked.
                Ipv6ExtensionSlice::Fragment(_)
                | Ipv6ExtensionSlice::Routing(_)
                | Ipv6ExtensionSlice::Authentication(_) => false,
            }),
    }
}

/// IPv6 option types (RFC 8200 §4.2; Linux `ip6_parse_tlv`).
const IPV6_PAD1: u8 = 0;
const IPV6_PADN: u8 = 1;
/// Hop-by-Hop options Linux processes (and may drop a packet for):
/// Router Alert, CALIPSO, IOAM. The others it processes (Jumbo, Home
/// Address) have high bits 11 and are refused by their type already.
const IPV6_CHECKED: [u8; 3] = [0x05, 0x07, 0x31];
/// Non-padding options Linux accepts in one header
/// (`net.ipv6.max_{hbh,dst}_opts_number`, default 8).
const IPV6_MAX_OPTIONS: usize = 8;
/// Padding bytes in a row Linux accepts.
const IPV6_MAX_PADDING: usize = 7;

/// Whether every option of a Hop-by-Hop (`hop_by_hop`) or Destination
/// Options header is one a receiver skips: padding within Linux's rules,
/// or at most [`IPV6_MAX_OPTIONS`] options whose type says "skip" (high
/// bits 00) and that Linux does not check itself.
fn ipv6_options_skipped(options: &[u8], hop_by_hop: bool) -> bool {
    let (mut padding, mut counted) = (0usize, 0usize);
    let mut rest = options;
    while let Some((&kind, after)) = rest.split_first() {
        if kind == IPV6_PAD1 {
            padding += 1;
            if padding > IPV6_MAX_PADDING {
                return false;
            }
            rest = after;
            continue;
        }
        let Some(&len) = after.first() else {
            return false;
        };
        let Some((option, next)) = rest.split_at_checked(2 + usize::from(len)) else {
            return false;
        };
        if kind == IPV6_PADN {
            padding += option.len();
            if padding > IPV6_MAX_PADDING || option[2..].iter().any(|&b| b != 0) {
                return false;
            }
        } else {
            counted += 1;
            let checked = hop_by_hop && IPV6_CHECKED.contains(&kind);
            if kind >> 6 != 0 || checked || counted > IPV6_MAX_OPTIONS {
                return false;
            }
            padding = 0;
        }
        rest = next;
    }
    true
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
        let (ip, tcp) = tcp_slices(packet).unwrap();
        super::checksum_right(&ip, &tcp)
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

    /// A client segment with raw TCP `options` (a multiple of 4 bytes),
    /// flags `flags` (a mix of `"A"`, `"F"`, `"R"`, `"S"`), IPv4 or IPv6.
    fn client_segment(v6: bool, options: &[u8], flags: &str, payload: &[u8]) -> Vec<u8> {
        let builder = if v6 {
            PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64)
        } else {
            PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        };
        let mut tcp = builder.tcp(40_000, 80, 1, 64_240);
        if flags.contains('A') {
            tcp = tcp.ack(7);
        }
        if flags.contains('F') {
            tcp = tcp.fin();
        }
        if flags.contains('R') {
            tcp = tcp.rst();
        }
        if flags.contains('S') {
            tcp = tcp.syn();
        }
        let tcp = tcp.options_raw(options).unwrap();
        let mut packet = Vec::new();
        tcp.write(&mut packet, payload).unwrap();
        packet
    }

    /// `packet` (IPv6, no extension headers) with an extension header of
    /// type `kind` holding `body` (everything after its next-header and
    /// length bytes) in front of TCP. The TCP checksum does not cover it.
    fn with_extension(packet: &[u8], kind: u8, body: &[u8]) -> Vec<u8> {
        let len = 2 + body.len();
        assert_eq!(len % 8, 0, "extension headers are multiples of 8 bytes");
        let mut out = packet[..40].to_vec();
        let next = std::mem::replace(&mut out[6], kind);
        let payload_len = u16::from_be_bytes([out[4], out[5]]) + len as u16;
        out[4..6].copy_from_slice(&payload_len.to_be_bytes());
        out.extend([next, (len / 8 - 1) as u8]);
        out.extend(body);
        out.extend(&packet[40..]);
        out
    }

    /// A timestamp option padded to 12 bytes.
    const TIMESTAMP: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 4];

    #[test]
    fn options_are_read_as_linux_reads_them() {
        let discard = |options: &[u8]| {
            let packet = client_segment(false, options, "A", b"GET / HTTP/1.1\r\n");
            parse_segment(&packet).unwrap().discard
        };
        let timestamp = |options: &[u8]| {
            let packet = client_segment(false, options, "A", b"x");
            parse_segment(&packet).unwrap().timestamp
        };
        let want = Some(Timestamp { value: 9, echo: 4 });
        assert_eq!(timestamp(&TIMESTAMP), want);
        assert_eq!(discard(&TIMESTAMP), None);
        assert_eq!(timestamp(&[]), None);
        // An unknown kind is skipped by its length, as Linux does.
        let mut unknown = vec![253, 4, 0xab, 0xcd];
        unknown.extend(TIMESTAMP);
        assert_eq!((discard(&unknown), timestamp(&unknown)), (None, want));
        // SACK, window scale, MSS: read past.
        let mut known = vec![5, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1];
        known.extend(TIMESTAMP);
        assert_eq!((discard(&known), timestamp(&known)), (None, want));
        // After the end of the list nothing is read.
        assert_eq!(discard(&[0, 19, 18, 0]), None);
        for refused in [
            // MD5 signature, TCP-AO: a server without the key drops them.
            &[
                19, 18, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 1,
            ][..],
            &[1, 1, 29, 6, 1, 2, 3, 4][..],
            // Behind an unknown option (etherparse's own iterator stops there).
            &[
                253, 2, 19, 18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ][..],
            // A length below 2, or past the header; a kind without a length.
            &[253, 1, 0, 0][..],
            &[253, 9, 0, 0][..],
            &[1, 1, 1, 253][..],
            // Two timestamps, or one of the wrong length.
            &[TIMESTAMP, TIMESTAMP].concat()[..],
            &[1, 1, 8, 6, 0, 0, 0, 9][..],
        ] {
            assert_eq!(discard(refused), Some(Discard::TcpOption), "{refused:?}");
        }
    }

    #[test]
    fn a_wrong_checksum_or_impossible_flags_are_discards() {
        for v6 in [false, true] {
            let mut packet = client_segment(v6, &TIMESTAMP, "A", b"GET /");
            assert_eq!(parse_segment(&packet).unwrap().discard, None);
            let last = packet.len() - 1;
            packet[last] ^= 1;
            assert_eq!(
                parse_segment(&packet).unwrap().discard,
                Some(Discard::Checksum)
            );
            let flags = |flags: &str, payload: &[u8]| {
                let packet = client_segment(v6, &[], flags, payload);
                parse_segment(&packet).unwrap().discard
            };
            assert_eq!(flags("", b"GET /"), Some(Discard::Flags));
            assert_eq!(flags("F", b""), Some(Discard::Flags));
            assert_eq!(flags("S", b"GET /"), Some(Discard::Flags));
            // A RST needs no ACK; a bare SYN carries nothing; a pure ACK.
            assert_eq!(flags("R", b""), None);
            assert_eq!(flags("S", b""), None);
            assert_eq!(flags("A", b""), None);
            assert_eq!(flags("AF", b"x"), None);
        }
    }

    #[test]
    fn ipv6_options_a_receiver_may_drop_are_discards() {
        const HOP_BY_HOP: u8 = 0;
        const ROUTING: u8 = 43;
        const DESTINATION: u8 = 60;
        let packet = client_segment(true, &[], "A", b"GET /api HTTP/1.1\r\n");
        let discard = |kind: u8, body: &[u8]| {
            let extended = with_extension(&packet, kind, body);
            let segment = parse_segment(&extended).unwrap();
            assert_eq!(segment.payload, b"GET /api HTTP/1.1\r\n");
            segment.discard
        };
        for kind in [HOP_BY_HOP, DESTINATION] {
            // Padding within Linux's rules, and options a receiver skips.
            assert_eq!(discard(kind, &[1, 4, 0, 0, 0, 0]), None);
            assert_eq!(discard(kind, &[0, 0, 0, 0, 0, 0]), None);
            assert_eq!(discard(kind, &[0x3e, 2, 9, 9, 1, 0]), None);
            assert_eq!(
                discard(
                    kind,
                    &[0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0]
                ),
                None,
                "seven options"
            );
            for refused in [
                // "Discard" types: 01, 10 (with an ICMP error), 11.
                &[0x40, 2, 0, 0, 1, 0][..],
                &[0x80, 2, 0, 0, 1, 0][..],
                &[0xc0, 2, 0, 0, 1, 0][..],
                // Eight bytes of padding in a row; PadN that is not zero.
                &[1, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
                &[1, 4, 0, 7, 0, 0][..],
                // An option running past its header.
                &[0x3e, 9, 0, 0, 0, 0][..],
                // Nine options.
                &[
                    0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e, 0, 0x3e,
                    0, 1, 2, 0, 0,
                ][..],
            ] {
                assert_eq!(
                    discard(kind, refused),
                    Some(Discard::IpExtension),
                    "header {kind} {refused:?}"
                );
            }
        }
        // Router Alert: Linux checks it in Hop-by-Hop only.
        assert_eq!(
            discard(HOP_BY_HOP, &[5, 2, 0, 0, 1, 0]),
            Some(Discard::IpExtension)
        );
        assert_eq!(discard(DESTINATION, &[5, 2, 0, 0, 1, 0]), None);
        // A Routing header, even with no segment left.
        assert_eq!(
            discard(ROUTING, &[0, 0, 0, 0, 0, 0]),
            Some(Discard::IpExtension)
        );
    }
}
