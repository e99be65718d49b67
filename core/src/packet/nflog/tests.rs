//! The NFLOG wire format on byte fixtures: a logged packet with and
//! without its optional attributes, several in one buffer, answers, cut
//! and bad lengths, the configuration request byte for byte, and any
//! bytes read without a panic.

use proptest::prelude::*;

use super::*;
use crate::netlink::fixtures::{attr, message};
use crate::netlink::{NLMSG_DONE, NLMSG_HDRLEN};

const PACKET: u16 = NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET;

/// A logged packet's body for `group`: the packet header (hook 3, OUTPUT),
/// a mark and a timestamp the parser skips, the in-interface when given,
/// and the payload.
fn logged(group: u16, indev: Option<u32>, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![2, 0];
    body.extend_from_slice(&group.to_be_bytes());
    body.extend(attr(NFULA_PACKET_HDR, &[0x08, 0x00, 3, 0]));
    body.extend(attr(2, &7u32.to_be_bytes()));
    body.extend(attr(3, &[0; 16]));
    if let Some(indev) = indev {
        body.extend(attr(NFULA_IFINDEX_INDEV, &indev.to_be_bytes()));
    }
    body.extend(attr(NFULA_PAYLOAD, payload));
    body
}

#[test]
fn a_logged_packet_reads_with_its_group_hook_interface_and_payload() {
    let buffer = message(PACKET, 0, &logged(7, Some(4), b"\x45query"));
    let read: Vec<_> = log_messages(&buffer).collect();
    assert_eq!(
        read,
        vec![Ok(LogMessage::Packet(LoggedPacket {
            group: 7,
            hook: 3,
            indev: 4,
            payload: b"\x45query",
        }))]
    );
}

#[test]
fn several_messages_read_in_order_and_answers_carry_their_errno() {
    let mut buffer = message(PACKET, 0, &logged(7, None, b"one"));
    let mut error = (-1i32).to_ne_bytes().to_vec();
    error.extend_from_slice(&[0; NLMSG_HDRLEN]);
    buffer.extend(message(NLMSG_ERROR, 9, &error));
    buffer.extend(message(NLMSG_DONE, 0, &[]));
    buffer.extend(message(PACKET, 0, &logged(7, None, b"two")));
    let read: Vec<_> = log_messages(&buffer).map(Result::unwrap).collect();
    let payloads: Vec<&[u8]> = read
        .iter()
        .filter_map(|m| match m {
            LogMessage::Packet(p) => Some(p.payload),
            _ => None,
        })
        .collect();
    assert_eq!(payloads, vec![&b"one"[..], b"two"]);
    assert!(read.contains(&LogMessage::Ack { seq: 9, errno: 1 }));
    assert!(read.contains(&LogMessage::Other));
}

#[test]
fn cut_headers_bad_lengths_and_overruns_end_the_walk_with_an_error() {
    let whole = message(PACKET, 0, &logged(7, None, b"payload"));
    for cut in 1..whole.len() {
        let read: Vec<_> = log_messages(&whole[..cut]).collect();
        assert!(
            read.iter().any(Result::is_err),
            "a copy cut at {cut} bytes read as whole: {read:?}"
        );
    }
    assert_eq!(
        log_messages(&message(NLMSG_OVERRUN, 0, &[])).collect::<Vec<_>>(),
        vec![Err(LogError::Overrun)]
    );
    let mut short_interface = vec![2, 0, 0, 7];
    short_interface.extend(attr(NFULA_IFINDEX_INDEV, &[1, 2]));
    assert_eq!(
        log_messages(&message(PACKET, 0, &short_interface)).next(),
        Some(Err(LogError::BadAttribute {
            kind: NFULA_IFINDEX_INDEV,
            length: 2
        }))
    );
    assert_eq!(
        log_messages(&message(PACKET, 0, &[2, 0])).next(),
        Some(Err(LogError::NoGroupHeader))
    );
}

#[test]
fn the_configuration_binds_the_group_and_sends_each_copy_at_once() {
    let mut out = Vec::new();
    log_config(&mut out, 5, 0x0102, 0xffff);
    let read: Vec<_> = netlink::messages(&out).map(Result::unwrap).collect();
    assert_eq!(read.len(), 1);
    let message = read[0];
    assert_eq!(message.kind, NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG);
    assert_eq!(message.flags, NLM_F_REQUEST | NLM_F_ACK);
    assert_eq!(message.seq, 5);
    assert_eq!(&message.body[..4], &[0, 0, 1, 2]);
    let attributes: Vec<_> = netlink::attributes(&message.body[4..])
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        attributes,
        vec![
            (NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND][..]),
            (
                NFULA_CFG_MODE,
                &[0, 0, 0xff, 0xff, NFULNL_COPY_PACKET, 0][..]
            ),
            (NFULA_CFG_QTHRESH, &[0, 0, 0, 1][..]),
            (NFULA_CFG_TIMEOUT, &[0, 0, 0, 0][..]),
        ]
    );
}

proptest! {
    /// Well-framed messages of arbitrary attributes (the parser's own
    /// kinds most of the time, values of any length, short ones
    /// included) and an arbitrary group header: read or refused, never a
    /// panic. Mutation: reading `NFULA_IFINDEX_INDEV` (or the packet
    /// header) by index without its length checked panics here.
    #[test]
    fn arbitrary_attributes_never_panic(
        header in proptest::collection::vec(any::<u8>(), 0..6),
        attributes in proptest::collection::vec(
            (
                prop_oneof![Just(NFULA_PACKET_HDR), Just(NFULA_IFINDEX_INDEV), Just(NFULA_PAYLOAD), any::<u16>()],
                proptest::collection::vec(any::<u8>(), 0..10),
            ),
            0..6,
        ),
    ) {
        let mut body = header;
        if body.len() >= NFGEN_HDRLEN {
            body.truncate(NFGEN_HDRLEN);
            for (kind, value) in &attributes {
                body.extend(attr(*kind, value));
            }
        }
        let buffer = message(PACKET, 0, &body);
        for message in log_messages(&buffer).take(16) {
            let _ = message;
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        for message in log_messages(&bytes).take(400) {
            let _ = message;
        }
    }

    /// A well-formed copy with its attributes' bytes mangled: read or
    /// refused, never a panic, and a payload only ever borrowed from
    /// inside the buffer.
    #[test]
    fn mangled_copies_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..120),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        let mut buffer = message(PACKET, 0, &logged(7, Some(2), &payload));
        for (at, byte) in flips {
            let at = at % buffer.len();
            buffer[at] = byte;
        }
        for message in log_messages(&buffer).take(16) {
            if let Ok(LogMessage::Packet(p)) = message {
                prop_assert!(p.payload.len() <= buffer.len());
            }
        }
    }
}
