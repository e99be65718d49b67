//! A round of verdicts sent against a simulated kernel queue whose sends
//! can fail: no packet ever gets a verdict other than its own, in
//! particular not that of a later batch after its own verdict was lost.

use std::collections::BTreeMap;

use super::*;
use crate::packet::PacketId;

/// The verdict codes of `linux/netfilter.h`.
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NF_REPEAT: u32 = 4;

/// An NFQUEUE queue as the kernel keeps it: the ids it holds, and what each
/// packet got (verdict code, mark).
#[derive(Default)]
struct Kernel {
    queued: Vec<PacketId>,
    given: BTreeMap<PacketId, (u32, Option<u32>)>,
    sends: usize,
}

impl Kernel {
    fn holding(ids: impl IntoIterator<Item = PacketId>) -> Kernel {
        Kernel {
            queued: ids.into_iter().collect(),
            ..Kernel::default()
        }
    }

    /// Takes one `send`: a single verdict applies to its packet, a batch
    /// verdict to every queued packet with its id or an older one
    /// (`nfqnl_recv_verdict_batch`).
    fn receive(&mut self, mut bytes: &[u8]) {
        self.sends += 1;
        while !bytes.is_empty() {
            let length = u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes([bytes[4], bytes[5]]) & 0xff;
            let (mut verdict, mut mark) = (None, None);
            // After the netlink header (16 bytes) and nfgenmsg (4).
            let mut attributes = &bytes[20..length];
            while !attributes.is_empty() {
                let size = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
                let value = &attributes[4..size];
                match u16::from_ne_bytes([attributes[2], attributes[3]]) {
                    // NFQA_VERDICT_HDR: verdict, id.
                    2 => {
                        let word =
                            |at: usize| u32::from_be_bytes(value[at..at + 4].try_into().unwrap());
                        verdict = Some((word(0), word(4)));
                    }
                    // NFQA_MARK
                    3 => mark = Some(u32::from_be_bytes(value.try_into().unwrap())),
                    _ => {}
                }
                attributes = &attributes[(size + 3) & !3..];
            }
            let (code, id) = verdict.expect("a verdict header");
            let covered: Vec<PacketId> = match kind {
                1 => self.queued.iter().copied().filter(|&q| q == id).collect(),
                3 => self.queued.iter().copied().filter(|&q| q <= id).collect(),
                other => panic!("message type {other}"),
            };
            for id in covered {
                self.queued.retain(|&q| q != id);
                self.given.insert(id, (code, mark));
            }
            bytes = &bytes[(length + 3) & !3..];
        }
    }
}

fn packet(id: PacketId) -> Packet {
    Packet {
        key: u64::from(id),
        id,
        mark: 0,
        hook: 1,
        indev: 0,
        payload: Vec::new(),
    }
}

fn ids(round: &[(Packet, Action)]) -> Vec<PacketId> {
    round.iter().map(|(packet, _)| packet.id).collect()
}

/// Sends `round` into `kernel`; the sends numbered in `failing` (1 for the
/// first) fail with ENOBUFS and reach nothing.
fn deliver_into(
    kernel: &mut Kernel,
    round: Vec<(Packet, Action)>,
    oldest_left: Option<u64>,
    failing: &[usize],
) -> Vec<(Packet, Action)> {
    let (mut seq, mut out, mut calls) = (0, Vec::new(), 0);
    deliver(round, oldest_left, 7, &mut seq, &mut out, |bytes| {
        calls += 1;
        if failing.contains(&calls) {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        kernel.receive(bytes);
        Ok(())
    })
}

#[test]
fn a_lost_drop_is_sent_again_and_never_covered_by_a_later_accept_batch() {
    let mut kernel = Kernel::holding([1, 2, 3]);
    // Packet 1 is dropped while 2 and 3 still wait; the send fails.
    let undelivered = deliver_into(&mut kernel, vec![(packet(1), Action::Drop)], Some(2), &[1]);
    assert_eq!(ids(&undelivered), [1]);
    assert!(kernel.given.is_empty());
    // The loop's next round carries it again with 2 and 3 accepted: the
    // two accepts are still batched, after the drop.
    let mut round = undelivered;
    round.extend([(packet(2), Action::Accept), (packet(3), Action::Accept)]);
    assert!(deliver_into(&mut kernel, round, None, &[]).is_empty());
    assert_eq!(
        kernel.given,
        BTreeMap::from([
            (1, (NF_DROP, None)),
            (2, (NF_ACCEPT, None)),
            (3, (NF_ACCEPT, None))
        ])
    );
    assert_eq!(kernel.sends, 1);
    assert!(kernel.queued.is_empty());
}

#[test]
fn a_failed_piece_of_a_long_round_stops_the_round_there() {
    // 4,000 marks, all different (one message each, three 64 KiB pieces),
    // then an accept batch that would cover every older packet still queued.
    let round = || -> Vec<(Packet, Action)> {
        (1..=4_000)
            .map(|id| (packet(id), Action::Repeat { mark: id }))
            .chain((4_001..=4_100).map(|id| (packet(id), Action::Accept)))
            .collect()
    };
    for failing in [1, 2, 3] {
        let mut kernel = Kernel::holding(1..=4_100);
        let undelivered = deliver_into(&mut kernel, round(), None, &[failing]);
        assert_eq!(kernel.sends, failing - 1, "nothing sent after the failure");
        let delivered: Vec<PacketId> = kernel.given.keys().copied().collect();
        let first_undelivered = undelivered.first().map(|(packet, _)| packet.id);
        assert_eq!(first_undelivered, Some(delivered.len() as PacketId + 1));
        assert_eq!(
            ids(&undelivered),
            (delivered.len() as PacketId + 1..=4_100).collect::<Vec<_>>()
        );
        for (id, (code, mark)) in &kernel.given {
            assert_eq!((*code, *mark), (NF_REPEAT, Some(*id)), "packet {id}");
        }
        // Sent again, every packet gets exactly its own verdict.
        assert!(deliver_into(&mut kernel, undelivered, None, &[]).is_empty());
        for id in 1..=4_100 {
            let own = if id <= 4_000 {
                (NF_REPEAT, Some(id))
            } else {
                (NF_ACCEPT, None)
            };
            assert_eq!(kernel.given[&id], own, "packet {id}");
        }
    }
}
