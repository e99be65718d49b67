//! From a queued DNS reply packet (IPv4/IPv6, UDP or TCP from port 53) to
//! the DNS messages it completes. UDP: the payload is one message. TCP: the
//! server→client stream of each connection is framed by a
//! [`TcpStreamReassembler`] created at the SYN-ACK (so the first length
//! prefix is found at the server's ISN + 1) and forgotten at FIN/RST; the
//! number of connections followed is bounded, the least recently used is
//! forgotten first. Pure: no sockets, no clock, no ipset writes.

use std::collections::HashMap;
use std::net::IpAddr;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use crate::dns::{Framed, TcpStreamReassembler};

/// Consecutive out-of-order segments after which a connection is no longer
/// followed (its missing bytes passed unseen, e.g. while the queue was
/// full): it is then released unlearned instead of stalled.
pub const MAX_CONSECUTIVE_GAPS: u8 = 3;
/// Default number of DNS-over-TCP connections followed at once.
pub const DEFAULT_MAX_TCP_FLOWS: usize = 1024;
/// Largest DNS-over-TCP message buffered per connection. A UDP answer that
/// was truncated (TC) is retried over TCP and may be large; 16 KiB covers
/// hundreds of addresses while bounding memory to 16 MiB at the flow bound.
pub const DEFAULT_MAX_TCP_MESSAGE: usize = 16 * 1024;

/// What to tell the kernel about the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Let the reply through (after its messages were learned).
    Accept,
    /// Drop a TCP segment that starts after bytes never seen: the server
    /// retransmits, and the client can never assemble a message the
    /// learner has not seen in full. After `MAX_CONSECUTIVE_GAPS` (3) such
    /// drops on one connection it is forgotten and released unlearned.
    Drop,
}

/// Why (part of) a packet was not learned from. Counted, never logged per
/// packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SnoopEvent {
    #[error("not an IPv4/IPv6 UDP or TCP packet")]
    Malformed,
    #[error("reply from a server outside dnsTrustedServers")]
    Untrusted,
    #[error("TCP data on a connection whose start was not seen")]
    TcpUntracked,
    #[error("TCP segment after a gap")]
    TcpGap,
    #[error("DNS-over-TCP message longer than the buffer bound")]
    Oversized,
}

/// The outcome of one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snooped {
    pub release: Release,
    /// Complete DNS messages (without TCP length prefixes), in order.
    pub messages: Vec<Vec<u8>>,
    pub events: Vec<SnoopEvent>,
}

impl Snooped {
    fn accept(messages: Vec<Vec<u8>>) -> Snooped {
        Snooped {
            release: Release::Accept,
            messages,
            events: Vec::new(),
        }
    }

    fn event(event: SnoopEvent) -> Snooped {
        Snooped {
            release: Release::Accept,
            messages: Vec::new(),
            events: vec![event],
        }
    }
}

/// `(server, server port, client, client port)` of a TCP connection.
type FlowKey = (IpAddr, u16, IpAddr, u16);

struct TcpFlow {
    /// The server's initial sequence number (from its SYN-ACK).
    isn: u32,
    stream: TcpStreamReassembler,
    last_used: u64,
    gaps: u8,
}

/// Turns queued reply packets into DNS messages; keeps the per-connection
/// TCP framing state.
pub struct DnsSnooper {
    trusted: Vec<IpAddr>,
    max_flows: usize,
    max_message: usize,
    flows: HashMap<FlowKey, TcpFlow>,
    tick: u64,
}

impl DnsSnooper {
    /// A snooper that learns from every server (`trusted` empty) or only
    /// from the listed ones.
    pub fn new(trusted: Vec<IpAddr>, max_flows: usize, max_message: usize) -> DnsSnooper {
        DnsSnooper {
            trusted,
            max_flows: max_flows.max(1),
            max_message,
            flows: HashMap::new(),
            tick: 0,
        }
    }

    /// DNS-over-TCP connections currently followed.
    pub fn tcp_flows(&self) -> usize {
        self.flows.len()
    }

    /// Reads one packet, starting at its IP header.
    pub fn snoop(&mut self, packet: &[u8]) -> Snooped {
        let Ok(sliced) = SlicedPacket::from_ip(packet) else {
            return Snooped::event(SnoopEvent::Malformed);
        };
        let (src, dst) = match &sliced.net {
            Some(NetSlice::Ipv4(ip)) => (
                IpAddr::V4(ip.header().source_addr()),
                IpAddr::V4(ip.header().destination_addr()),
            ),
            Some(NetSlice::Ipv6(ip)) => (
                IpAddr::V6(ip.header().source_addr()),
                IpAddr::V6(ip.header().destination_addr()),
            ),
            _ => return Snooped::event(SnoopEvent::Malformed),
        };
        if !self.trusted.is_empty() && !self.trusted.contains(&src) {
            return Snooped::event(SnoopEvent::Untrusted);
        }
        match &sliced.transport {
            Some(TransportSlice::Udp(udp)) if !udp.payload().is_empty() => {
                Snooped::accept(vec![udp.payload().to_vec()])
            }
            Some(TransportSlice::Udp(_)) => Snooped::event(SnoopEvent::Malformed),
            Some(TransportSlice::Tcp(tcp)) => {
                let key = (src, tcp.source_port(), dst, tcp.destination_port());
                self.tcp(
                    key,
                    TcpSegment {
                        seq: tcp.sequence_number(),
                        syn: tcp.syn(),
                        end: tcp.fin() || tcp.rst(),
                        payload: tcp.payload(),
                    },
                )
            }
            _ => Snooped::event(SnoopEvent::Malformed),
        }
    }

    fn tcp(&mut self, key: FlowKey, segment: TcpSegment<'_>) -> Snooped {
        self.tick += 1;
        if segment.syn {
            // A retransmitted SYN-ACK of a connection already followed
            // changes nothing; a new ISN is a new connection.
            if self.flows.get(&key).is_some_and(|f| f.isn == segment.seq) {
                return Snooped::accept(Vec::new());
            }
            // SYN-ACK: the stream starts at ISN + 1.
            self.make_room();
            let mut stream = TcpStreamReassembler::new(self.max_message);
            // An empty push only fixes the next expected sequence number.
            let _ = stream.push(segment.seq.wrapping_add(1), &[]);
            self.flows.insert(
                key,
                TcpFlow {
                    isn: segment.seq,
                    stream,
                    last_used: self.tick,
                    gaps: 0,
                },
            );
            return Snooped::accept(Vec::new());
        }
        let Some(flow) = self.flows.get_mut(&key) else {
            return if segment.payload.is_empty() {
                Snooped::accept(Vec::new())
            } else {
                Snooped::event(SnoopEvent::TcpUntracked)
            };
        };
        flow.last_used = self.tick;
        let mut out = Snooped::accept(Vec::new());
        match flow.stream.push(segment.seq, segment.payload) {
            Ok(framed) => {
                flow.gaps = 0;
                for item in framed {
                    match item {
                        Framed::Message(message) => out.messages.push(message),
                        Framed::Oversized { .. } => out.events.push(SnoopEvent::Oversized),
                    }
                }
            }
            Err(_) => {
                out.events.push(SnoopEvent::TcpGap);
                flow.gaps += 1;
                if flow.gaps < MAX_CONSECUTIVE_GAPS {
                    out.release = Release::Drop;
                } else {
                    self.flows.remove(&key);
                }
            }
        }
        if segment.end && out.release == Release::Accept {
            self.flows.remove(&key);
        }
        out
    }

    /// Forgets the least recently used connection when at the bound.
    fn make_room(&mut self) {
        if self.flows.len() < self.max_flows {
            return;
        }
        if let Some(oldest) = self
            .flows
            .iter()
            .min_by_key(|(_, f)| f.last_used)
            .map(|(k, _)| *k)
        {
            self.flows.remove(&oldest);
        }
    }
}

struct TcpSegment<'a> {
    seq: u32,
    syn: bool,
    end: bool,
    payload: &'a [u8],
}

#[cfg(test)]
mod tests;
