//! The wire format on byte fixtures: packets with and without optional
//! attributes, several messages in one buffer, acknowledgements, and
//! every kind of cut or bad length; the builders byte for byte; the
//! batch planning.

use proptest::prelude::*;

use super::*;
use crate::netlink::fixtures::{attr, message};
use crate::netlink::{align, NLMSG_DONE};

/// `ENOENT` (Linux): the error a verdict for a packet the kernel no
/// longer holds is answered with.
const ENOENT: i32 = 2;

const PACKET: u16 = NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET;

/// A packet message of queue 7: id, hook 1 (INPUT), mark, in-interface,
/// the payload, and an attribute the parser does not know.
fn packet_message(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![2, 0, 0, 7];
    let mut header = id.to_be_bytes().to_vec();
    header.extend_from_slice(&0x0800u16.to_be_bytes());
    header.push(1);
    body.extend(attr(NFQA_PACKET_HDR, &header));
    body.extend(attr(NFQA_MARK, &0x42u32.to_be_bytes()));
    body.extend(attr(NFQA_IFINDEX_INDEV, &3u32.to_be_bytes()));
    body.extend(attr(22, &[9, 9, 9, 9])); // NFQA_CGROUP_CLASSID: unknown here
    body.extend(attr(NFQA_PAYLOAD | 0x4000, payload)); // byte-order flag is masked
    message(PACKET, 0, &body)
}

fn parse_all(buffer: &[u8]) -> Vec<Result<Message<'_>, WireError>> {
    messages(buffer).collect()
}

#[test]
fn a_packet_message_is_read_with_its_attributes() {
    let bytes = packet_message(5, b"\x45abcde");
    let parsed = parse_all(&bytes);
    assert_eq!(
        parsed,
        [Ok(Message::Packet(PacketMessage {
            queue: 7,
            id: 5,
            hw_protocol: 0x0800,
            hook: 1,
            mark: 0x42,
            indev: 3,
            payload: b"\x45abcde",
            cap_len: None,
            skb_info: 0,
        }))]
    );
}

#[test]
fn several_messages_in_one_buffer_are_read_in_order() {
    let mut buffer = packet_message(1, b"one");
    buffer.extend(message(NLMSG_ERROR, 9, &(-ENOENT).to_ne_bytes()));
    buffer.extend(message(NLMSG_ERROR, 10, &0i32.to_ne_bytes()));
    buffer.extend(message(NLMSG_DONE, 0, &[]));
    buffer.extend(packet_message(2, b"two"));
    let parsed: Vec<_> = parse_all(&buffer).into_iter().map(Result::unwrap).collect();
    let ids: Vec<_> = parsed
        .iter()
        .map(|m| match m {
            Message::Packet(p) => format!("packet {}", p.id),
            Message::Ack { seq, errno } => format!("ack {seq} {errno}"),
            Message::Other => "other".into(),
        })
        .collect();
    assert_eq!(
        ids,
        [
            "packet 1",
            &format!("ack 9 {}", ENOENT),
            "ack 10 0",
            "other",
            "packet 2"
        ]
    );
}

#[test]
fn every_truncation_of_a_packet_message_is_an_error_or_a_shorter_payload_never_a_panic() {
    let bytes = packet_message(5, b"payload bytes");
    for cut in 0..bytes.len() {
        let parsed = parse_all(&bytes[..cut]);
        if cut == 0 {
            assert!(parsed.is_empty());
            continue;
        }
        assert_eq!(parsed.len(), 1, "cut at {cut}");
        assert!(parsed[0].is_err(), "cut at {cut}: {parsed:?}");
    }
}

#[test]
fn bad_lengths_end_the_walk_with_an_error() {
    let good = packet_message(1, b"x");
    for length in [0u32, 15, good.len() as u32 + 1, u32::MAX] {
        let mut bytes = good.clone();
        bytes[..4].copy_from_slice(&length.to_ne_bytes());
        bytes.extend(packet_message(2, b"y"));
        let parsed = parse_all(&bytes);
        assert!(parsed[0].is_err(), "length {length}");
        assert!(parsed.len() <= 2, "length {length}");
    }
    // An attribute longer than its message, and one shorter than its header.
    let mut body = vec![2, 0, 0, 7];
    body.extend_from_slice(&200u16.to_ne_bytes());
    body.extend_from_slice(&NFQA_PAYLOAD.to_ne_bytes());
    assert_eq!(
        parse_all(&message(PACKET, 0, &body)),
        [Err(WireError::BadAttribute {
            kind: NFQA_PAYLOAD,
            length: 200
        })]
    );
    let mut body = vec![2, 0, 0, 7];
    body.extend_from_slice(&2u16.to_ne_bytes());
    body.extend_from_slice(&NFQA_MARK.to_ne_bytes());
    assert!(parse_all(&message(PACKET, 0, &body))[0].is_err());
}

#[test]
fn a_packet_without_its_header_or_with_short_fixed_attributes_is_refused() {
    let mut body = vec![2, 0, 0, 7];
    body.extend(attr(NFQA_PAYLOAD, b"x"));
    assert_eq!(
        parse_all(&message(PACKET, 0, &body)),
        [Err(WireError::NoPacketHeader)]
    );
    assert_eq!(
        parse_all(&message(PACKET, 0, &[2, 0])),
        [Err(WireError::NoPacketHeader)]
    );
    let mut body = vec![2, 0, 0, 7];
    body.extend(attr(NFQA_PACKET_HDR, &[0, 0, 0, 1, 8, 0, 1]));
    body.extend(attr(NFQA_MARK, &[1, 2]));
    assert_eq!(
        parse_all(&message(PACKET, 0, &body)),
        [Err(WireError::BadAttribute {
            kind: NFQA_MARK,
            length: 2
        })]
    );
    assert_eq!(
        parse_all(&message(NLMSG_ERROR, 1, &[0, 0])),
        [Err(WireError::BadLength {
            length: 18,
            left: 20
        })]
    );
    assert_eq!(
        parse_all(&message(NLMSG_OVERRUN, 1, &[])),
        [Err(WireError::Overrun)]
    );
}

#[test]
fn cut_packets_say_their_length_and_gso_state() {
    let mut body = vec![10, 0, 0, 7];
    body.extend(attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x86, 0xdd, 3]));
    body.extend(attr(NFQA_PAYLOAD, b"\x60"));
    body.extend(attr(NFQA_CAP_LEN, &1500u32.to_be_bytes()));
    body.extend(attr(NFQA_SKB_INFO, &NFQA_SKB_CSUMNOTREADY.to_be_bytes()));
    let bytes = message(PACKET, 0, &body);
    let parsed = parse_all(&bytes);
    let Ok(Message::Packet(packet)) = parsed[0] else {
        panic!("{parsed:?}")
    };
    assert_eq!((packet.id, packet.hook, packet.cap_len), (9, 3, Some(1500)));
    assert_eq!(packet.skb_info, NFQA_SKB_CSUMNOTREADY);
    assert_eq!(packet.indev, 0);
}

#[test]
fn the_config_message_binds_and_sets_everything_in_one_request() {
    let mut out = Vec::new();
    config(
        &mut out,
        3,
        &QueueConfig {
            queue: 0x0102,
            copy_range: 128,
            max_len: 1024,
            flags: NFQA_CFG_F_FAIL_OPEN,
        },
    );
    let mut expected = Vec::new();
    expected.extend(64u32.to_ne_bytes());
    expected.extend((NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_CONFIG).to_ne_bytes());
    expected.extend((NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    expected.extend(3u32.to_ne_bytes());
    expected.extend(0u32.to_ne_bytes());
    expected.extend([0, 0, 1, 2]);
    expected.extend(attr(NFQA_CFG_CMD, &[1, 0, 0, 0]));
    expected.extend(attr(NFQA_CFG_PARAMS, &[0, 0, 0, 128, 2]));
    expected.extend(attr(NFQA_CFG_QUEUE_MAXLEN, &1024u32.to_be_bytes()));
    expected.extend(attr(NFQA_CFG_MASK, &5u32.to_be_bytes()));
    expected.extend(attr(NFQA_CFG_FLAGS, &1u32.to_be_bytes()));
    assert_eq!(out, expected);
    assert_eq!(out.len(), 64);
}

#[test]
fn verdicts_carry_their_mark_and_payload() {
    let mut out = Vec::new();
    verdict(&mut out, 1, 7, 0x0a0b, Plain::Repeat { mark: 0x30 }, None);
    verdict(&mut out, 2, 7, 12, Plain::Accept, Some(b"new"));
    verdict_batch(&mut out, 3, 7, 20, Plain::Drop);
    let mut expected = message(NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_VERDICT, 1, &{
        let mut body = vec![0, 0, 0, 7];
        body.extend(attr(NFQA_VERDICT_HDR, &[0, 0, 0, 4, 0, 0, 0x0a, 0x0b]));
        body.extend(attr(NFQA_MARK, &[0, 0, 0, 0x30]));
        body
    });
    expected.extend(message(NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_VERDICT, 2, &{
        let mut body = vec![0, 0, 0, 7];
        body.extend(attr(NFQA_VERDICT_HDR, &[0, 0, 0, 1, 0, 0, 0, 12]));
        body.extend(attr(NFQA_PAYLOAD, b"new"));
        body
    }));
    expected.extend(message(
        NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_VERDICT_BATCH,
        3,
        &{
            let mut body = vec![0, 0, 0, 7];
            body.extend(attr(NFQA_VERDICT_HDR, &[0, 0, 0, 0, 0, 0, 0, 20]));
            body
        },
    ));
    // The builder sets NLM_F_REQUEST; the fixture helper leaves flags 0.
    let mut at = 0;
    while at < expected.len() {
        expected[at + 6..at + 8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        at += align(u32::from_ne_bytes(expected[at..at + 4].try_into().unwrap()) as usize);
    }
    assert_eq!(out, expected);
}

const A: Option<Plain> = Some(Plain::Accept);
const D: Option<Plain> = Some(Plain::Drop);
const R: Option<Plain> = None;

#[test]
fn runs_of_one_plain_verdict_below_every_held_packet_are_batched() {
    let round = [(1, A), (2, A), (3, A), (4, D), (5, D), (6, R), (7, A)];
    assert_eq!(
        plan_verdicts(&round, None),
        [
            Outgoing::Batch { first: 0, last: 2 },
            Outgoing::Batch { first: 3, last: 4 },
            Outgoing::One { index: 5 },
            Outgoing::One { index: 6 },
        ]
    );
}

#[test]
fn nothing_at_or_above_a_held_packet_is_batched() {
    let round = [(1, A), (2, A), (4, A), (5, A)];
    assert_eq!(
        plan_verdicts(&round, Some(3)),
        [
            Outgoing::Batch { first: 0, last: 1 },
            Outgoing::One { index: 2 },
            Outgoing::One { index: 3 },
        ]
    );
    let repeat = |mark| Some(Plain::Repeat { mark });
    let round = [(1, repeat(1)), (2, repeat(1)), (3, repeat(2))];
    assert_eq!(
        plan_verdicts(&round, Some(0)),
        [
            Outgoing::One { index: 0 },
            Outgoing::One { index: 1 },
            Outgoing::One { index: 2 }
        ]
    );
    assert_eq!(
        plan_verdicts(&round, None),
        [
            Outgoing::Batch { first: 0, last: 1 },
            Outgoing::One { index: 2 }
        ]
    );
}

#[test]
fn the_sequence_orders_ids_across_the_wrap() {
    let mut sequence = Sequence::default();
    let keys: Vec<u64> = [u32::MAX - 1, u32::MAX, 0, 1]
        .into_iter()
        .map(|id| sequence.received(id))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    assert_eq!(sequence.key(u32::MAX), keys[1]);
    assert_eq!(sequence.key(1), keys[3]);
}

/// What the kernel does with the planned messages: every packet the
/// round names, and none it does not, gets the round's verdict for it.
fn kernel_outcome(
    queued: &[u64],
    round: &[(u64, Option<Plain>)],
    sends: &[Outgoing],
) -> Vec<(u64, Option<Plain>)> {
    let mut queued: Vec<u64> = queued.to_vec();
    let mut given = Vec::new();
    for send in sends {
        match *send {
            Outgoing::One { index } => {
                let (key, plain) = round[index];
                queued.retain(|k| *k != key);
                given.push((key, plain));
            }
            Outgoing::Batch { last, .. } => {
                let (up_to, plain) = round[last];
                for key in queued.iter().filter(|k| **k <= up_to) {
                    given.push((*key, plain));
                }
                queued.retain(|k| *k > up_to);
            }
        }
    }
    given.sort_by_key(|(key, _)| *key);
    given
}

proptest! {
    #[test]
    fn planned_batches_give_exactly_the_round_s_verdicts(
        picks in proptest::collection::vec((0u8..4, any::<bool>()), 1..40),
    ) {
        // Packets 1..=n queued in order; each one gets a verdict this round
        // (0: accept, 1: drop, 2: rewrite, 3: repeat with mark 1) or stays held.
        let mut round = Vec::new();
        let mut held = Vec::new();
        for (index, (pick, given)) in picks.iter().enumerate() {
            let key = index as u64 + 1;
            if !given {
                held.push(key);
                continue;
            }
            let plain = match pick {
                0 => A,
                1 => D,
                2 => R,
                _ => Some(Plain::Repeat { mark: 1 }),
            };
            round.push((key, plain));
        }
        let queued: Vec<u64> = (1..=picks.len() as u64).collect();
        let sends = plan_verdicts(&round, held.first().copied());
        prop_assert_eq!(kernel_outcome(&queued, &round, &sends), round.clone());
    }

    #[test]
    fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for message in messages(&bytes) {
            let _ = message;
        }
    }
}
