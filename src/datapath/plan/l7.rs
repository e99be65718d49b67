//! The L7 part of the plan: the chain that sends client payload of L7
//! connections to the L7 queue ([`L7_CHAIN`]) and, with several L7 queues,
//! the chain that picks a connection's queue by its client port
//! ([`L7_QUEUE_CHAIN`], [`l7_queue_of`]). Pure.

use crate::config::{DatapathConfig, QueueNumbers, QueueRange};
use crate::marks::FailMode;

use super::Family;

/// The owned chain that sends client→server payload of L7 connections to
/// the L7 queue; packets without payload return from it.
pub const L7_CHAIN: &str = "TOLLGATE-L7";
/// The owned chain that chooses a packet's L7 queue by its connection's
/// client port, planned when there are several L7 queues: every rule that
/// queues to L7 jumps here ([`l7_queue_rules`]).
pub const L7_QUEUE_CHAIN: &str = "TOLLGATE-L7-QUEUE";
/// Client-port buckets shared out among the L7 queues ([`l7_queue_of`]).
const L7_BUCKETS: u16 = 64;
/// Values one `u32` test may list (iptables refuses an 11th).
pub(super) const U32_VALUES: usize = 10;
// Every L7 queue gets at least one bucket.
const _: () = assert!(crate::config::MAX_L7_QUEUES <= L7_BUCKETS);

/// The L7 chain: the client's FIN and RST go to the L7 queue (the worker
/// forgets closed connections), and so does URG (an urgent pointer on a
/// pure ACK can name a later byte, which the server would take out of the
/// stream: the worker resets or strips it); other TCP segments without
/// payload (pure ACKs) return, recognised exactly by `u32` tests that the IP length
/// equals the IP plus TCP header length, for every TCP data offset (5–15
/// words) of an IPv4 header without options or an IPv6 header followed
/// directly by TCP. Anything else, including every segment with payload,
/// goes to the L7 queue (its connection's, with several: [`l7_queue_target`]),
/// a packet too long to be without payload by the first rule.
pub(super) fn l7_rules(
    config: &DatapathConfig,
    queues: &QueueNumbers,
    family: Family,
) -> Vec<String> {
    // A packet longer than the longest one without payload the tests
    // below return (IPv4: a 20-byte header and at most 60 of TCP; IPv6:
    // 40 and 60) is queued whatever its flags: the rules after it could
    // only queue it too, and a request's segment skips them.
    let has_payload = match family {
        Family::V4 => 20 + 60 + 1,
        Family::V6 => 40 + 60 + 1,
    };
    let mut rules = vec![format!(
        "-m length --length {has_payload}:65535 -j {}",
        l7_queue_target(config, queues)
    )];
    rules.extend(["FIN", "RST", "URG"].iter().map(|flag| {
        format!(
            "-p tcp -m tcp --tcp-flags {flag} {flag} -j {}",
            l7_queue_target(config, queues)
        )
    }));
    rules.extend((5u32..=15).map(|words| {
        let tcp_header = words * 4;
        let test = match family {
            // Version 4 and IHL 5; total length; data offset at 20+12.
            Family::V4 => format!(
                "0x0>>0x18=0x45&&0x0&0xffff={:#x}&&0x20>>0x1c={words:#x}",
                20 + tcp_header
            ),
            // Next header TCP; payload length; data offset at 40+12.
            Family::V6 => {
                format!("0x4>>0x8&0xff=0x6&&0x4>>0x10={tcp_header:#x}&&0x34>>0x1c={words:#x}")
            }
        };
        format!("-m u32 --u32 \"{test}\" -j RETURN")
    }));
    rules.push(format!("-j {}", l7_queue_target(config, queues)));
    rules
}

/// Where a rule sends a packet to be inspected: the one L7 queue itself,
/// or with several the chain that chooses among them.
pub(super) fn l7_queue_target(config: &DatapathConfig, queues: &QueueNumbers) -> String {
    let l7 = queues.l7;
    if l7.first() != l7.last() {
        return L7_QUEUE_CHAIN.to_string();
    }
    format!("NFQUEUE --queue-num {}{}", l7.first(), bypass(config))
}

/// ` --queue-bypass` when the datapath fails open: the kernel accepts what
/// a queue without a reader would get.
pub(super) fn bypass(config: &DatapathConfig) -> &'static str {
    match config.fail_mode {
        FailMode::Open => " --queue-bypass",
        FailMode::Closed => "",
    }
}

/// The L7 queue of a connection whose client (the sender of its SYN) uses
/// port `client_port`: its bucket, bits 1–6 of the port, modulo the number
/// of queues. Bit 0 is left out because Linux's `connect()` picks even
/// ports. The buckets are dealt out in turn rather than in ranges because
/// consecutive connections of one client get ports a few apart: ranges
/// would put a connection pool opened at once on one queue.
pub fn l7_queue_of(queues: QueueRange, client_port: u16) -> u16 {
    let bucket = (client_port >> 1) % L7_BUCKETS;
    queues.first() + bucket % l7_count(queues)
}

fn l7_count(queues: QueueRange) -> u16 {
    queues.last() - queues.first() + 1
}

/// The chain that sends each packet to the L7 queue of its connection
/// ([`l7_queue_of`]), with several L7 queues: the client port is the TCP
/// source port of packets in conntrack's ORIGINAL direction and the
/// destination port in the REPLY direction (the filter table sees the
/// original ports either way: NAT rewrites them after it and undoes that
/// for replies before it), read by `u32` where [`tcp_ports`] finds it.
/// With a power of two of queues the low bits of the bucket are the queue,
/// one value per rule; otherwise each rule lists at most [`U32_VALUES`]
/// buckets of one queue. The first queue's buckets need no rule: it gets
/// what no rule takes, including the IPv6 segments whose ports are out of
/// reach.
pub(super) fn l7_queue_rules(
    config: &DatapathConfig,
    queues: QueueRange,
    family: Family,
) -> Vec<String> {
    let count = l7_count(queues);
    let mask = if count.is_power_of_two() {
        count - 1
    } else {
        L7_BUCKETS - 1
    };
    let mut rules = Vec::new();
    for (direction, shift) in [("ORIGINAL", 17u32), ("REPLY", 1)] {
        for (layout, ports) in tcp_ports(family) {
            for queue in queues.iter().skip(1) {
                let buckets: Vec<String> = (0..=mask)
                    .filter(|bucket| l7_queue_of(queues, bucket << 1) == queue)
                    .map(|bucket| format!("{bucket:#x}"))
                    .collect();
                for values in buckets.chunks(U32_VALUES) {
                    rules.push(format!(
                        "-m conntrack --ctdir {direction} -m u32 --u32 \
                         \"{layout}{ports}>>{shift:#x}&{mask:#x}={}\" \
                         -j NFQUEUE --queue-num {queue}{}",
                        values.join(","),
                        bypass(config)
                    ));
                }
            }
        }
    }
    rules.push(format!(
        "-j NFQUEUE --queue-num {}{}",
        queues.first(),
        bypass(config)
    ));
    rules
}

/// IPv6 extension headers whose length is `(second byte + 1) * 8`:
/// hop-by-hop options, routing, destination options. (Fragment headers
/// are gone: conntrack reassembles before the filter table.)
const IPV6_EXTENSIONS: &str = "0x0,0x2b,0x3c";

/// Where `u32` finds a TCP segment's ports, for each header layout it can
/// follow: `u32` tests that the layout is the packet's (each ending in
/// `&&`), and the location of the 32-bit word of source and destination
/// port. IPv4: after the header's own length (options included). IPv6:
/// right after the fixed header, or after one or two extension headers
/// of [`IPV6_EXTENSIONS`] (`u32` takes at most 10 operators per test: a
/// third would not fit).
fn tcp_ports(family: Family) -> Vec<(String, &'static str)> {
    match family {
        Family::V4 => vec![(String::new(), "0x0>>0x16&0x3c@0x0")],
        Family::V6 => vec![
            ("0x4>>0x8&0xff=0x6&&".to_string(), "0x28"),
            (
                format!("0x4>>0x8&0xff={IPV6_EXTENSIONS}&&0x28>>0x18=0x6&&"),
                "0x28>>0xd&0x7f8@0x30",
            ),
            (
                format!(
                    "0x4>>0x8&0xff={IPV6_EXTENSIONS}&&0x28>>0x18={IPV6_EXTENSIONS}&&\
                     0x28>>0xd&0x7f8@0x30>>0x18=0x6&&"
                ),
                "0x28>>0xd&0x7f8@0x30>>0xd&0x7f8@0x38",
            ),
        ],
    }
}
