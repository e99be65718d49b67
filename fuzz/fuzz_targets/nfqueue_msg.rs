//! Netlink bytes → NFQUEUE messages: `tollgate_core::packet::nfqueue::messages`
//! on hostile and truncated buffers, as a queue's socket could receive
//! them. Walking must not panic, must end, must be deterministic, every
//! packet's payload must lie inside the buffer, and a buffer cut short
//! must read the same messages up to the cut (never another packet id).
//! The input is also read as a verdict round whose planned batches must
//! give every packet exactly its own verdict.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_core::packet::nfqueue::{messages, plan_verdicts, Message, Outgoing, Plain};

fuzz_target!(|data: &[u8]| {
    walk(data);
    plan(data);
});

fn walk(data: &[u8]) {
    let all: Vec<_> = messages(data).collect();
    assert!(all.len() <= data.len() / 16 + 1, "more messages than headers fit");
    let again: Vec<_> = messages(data).collect();
    assert_eq!(all, again, "the walk is not deterministic");
    let range = data.as_ptr_range();
    for message in all.iter().flatten() {
        if let Message::Packet(packet) = message {
            let payload = packet.payload.as_ptr_range();
            assert!(
                packet.payload.is_empty()
                    || (range.start <= payload.start && payload.end <= range.end),
                "payload outside the buffer"
            );
        }
    }
    let cut = data.len() / 2;
    let short: Vec<_> = messages(&data[..cut]).collect();
    for (a, b) in short.iter().zip(&all) {
        if let (Ok(a), Ok(b)) = (a, b) {
            assert_eq!(a, b, "a cut buffer read a message differently");
        }
    }
}

/// Bytes as a round: each byte a packet, its low two bits the verdict
/// (accept, drop, rewrite, repeat with mark 1), bit 2 held (no verdict).
fn plan(data: &[u8]) {
    let mut round = Vec::new();
    let mut held = None;
    for (key, byte) in data.iter().enumerate() {
        let key = key as u64;
        if byte & 4 != 0 {
            held.get_or_insert(key);
            continue;
        }
        let plain = match byte & 3 {
            0 => Some(Plain::Accept),
            1 => Some(Plain::Drop),
            2 => None,
            _ => Some(Plain::Repeat { mark: 1 }),
        };
        round.push((key, plain));
    }
    let mut given = vec![None; data.len()];
    let mut done = vec![false; data.len()];
    for send in plan_verdicts(&round, held) {
        match send {
            Outgoing::One { index } => {
                let (key, plain) = round[index];
                given[key as usize] = Some(plain);
                done[key as usize] = true;
            }
            Outgoing::Batch { last, .. } => {
                let (up_to, plain) = round[last];
                assert!(plain.is_some(), "a batch of a rewrite");
                for key in 0..=up_to as usize {
                    if !done[key] {
                        assert!(data[key] & 4 == 0, "a batch covers held packet {key}");
                        given[key] = Some(plain);
                        done[key] = true;
                    }
                }
            }
        }
    }
    for (key, plain) in round {
        assert_eq!(given[key as usize], Some(plain), "packet {key}");
    }
}
