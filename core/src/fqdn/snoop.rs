//! From a queued DNS packet (IPv4/IPv6, UDP or TCP; a query to port 53 or
//! a reply from it) to the DNS messages it completes and the [`DnsFlow`]
//! they belong to. A reply is read only if it came in on the path to its
//! server ([`ReplyPath`], looked up by the caller). UDP: the payload is one
//! message. TCP: each direction of each connection is framed by a
//! [`TcpStreamReassembler`] created at its SYN (so the first length prefix
//! is found at the sender's ISN + 1) and forgotten at FIN/RST; the number
//! of streams followed is bounded, the least recently used is forgotten
//! first. Pure: no sockets, no clock, no ipset writes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};

use super::queries::{Direction, DnsFlow, Transport};
use crate::dns::{Framed, TcpStreamReassembler};

/// The DNS port: messages to it are queries, messages from it replies.
pub const DNS_PORT: u16 = 53;

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
    #[error("reply that came in on another interface than the route to its server")]
    WrongInterface,
    #[error("TCP data on a connection whose start was not seen")]
    TcpUntracked,
    #[error("TCP segment after a gap")]
    TcpGap,
    #[error("DNS-over-TCP message longer than the buffer bound")]
    Oversized,
}

/// Where a reply entered the node, as the caller found it: a reply is
/// read only if it came in on the interface the node's route to its server
/// leaves by (a strict reverse-path check, the `rp_filter=1` rule, made
/// here because the kernel's `rp_filter` may be loose or off and does not
/// exist for IPv6, and `-m rpfilter` works in PREROUTING only). A reply
/// made on the node comes from `lo`, where the route to one of the node's
/// own addresses leaves: only a local server may send it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyPath {
    /// Index of the interface the reply came in on (`lo`'s when it was
    /// made on the node).
    pub arrived: u32,
    /// Index of the interface the route to the server leaves by (`None`:
    /// no route).
    pub route: Option<u32>,
}

impl ReplyPath {
    /// Whether the reply came the way the server's replies come.
    pub fn is_server_path(self) -> bool {
        self.route == Some(self.arrived)
    }
}

/// The outcome of one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snooped {
    pub release: Release,
    /// The conversation the packet belongs to (`None` if unreadable).
    pub flow: Option<DnsFlow>,
    /// Complete DNS messages (without TCP length prefixes), in order.
    pub messages: Vec<Vec<u8>>,
    pub events: Vec<SnoopEvent>,
}

impl Snooped {
    fn accept(flow: DnsFlow, messages: Vec<Vec<u8>>) -> Snooped {
        Snooped {
            release: Release::Accept,
            flow: Some(flow),
            messages,
            events: Vec::new(),
        }
    }

    fn event(flow: Option<DnsFlow>, event: SnoopEvent) -> Snooped {
        Snooped {
            release: Release::Accept,
            flow,
            messages: Vec::new(),
            events: vec![event],
        }
    }
}

/// `(sender, sender port, receiver, receiver port)` of one direction of a
/// TCP connection.
type FlowKey = (IpAddr, u16, IpAddr, u16);

struct TcpFlow {
    /// The sender's initial sequence number (from its SYN or SYN-ACK).
    isn: u32,
    stream: TcpStreamReassembler,
    last_used: u64,
    gaps: u8,
}

/// Turns queued query and reply packets into DNS messages; keeps the
/// per-stream TCP framing state.
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

    /// Reads one packet as if a reply came the server's way (tests and
    /// fuzz targets; the worker always says where a reply came from).
    #[cfg(any(test, fuzzing))]
    pub fn snoop(&mut self, packet: &[u8]) -> Snooped {
        self.snoop_via(packet, |_| ReplyPath {
            arrived: 2,
            route: Some(2),
        })
    }

    /// Reads one packet, starting at its IP header; `path` tells where a
    /// reply from the given server came from (asked for replies only, and
    /// only from trusted servers).
    pub fn snoop_via(&mut self, packet: &[u8], path: impl FnOnce(IpAddr) -> ReplyPath) -> Snooped {
        let Ok(sliced) = SlicedPacket::from_ip(packet) else {
            return Snooped::event(None, SnoopEvent::Malformed);
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
            _ => return Snooped::event(None, SnoopEvent::Malformed),
        };
        let (transport, sport, dport) = match &sliced.transport {
            Some(TransportSlice::Udp(udp)) => {
                (Transport::Udp, udp.source_port(), udp.destination_port())
            }
            Some(TransportSlice::Tcp(tcp)) => {
                (Transport::Tcp, tcp.source_port(), tcp.destination_port())
            }
            _ => return Snooped::event(None, SnoopEvent::Malformed),
        };
        let (from, to) = (SocketAddr::new(src, sport), SocketAddr::new(dst, dport));
        let flow = if dport == DNS_PORT && sport != DNS_PORT {
            DnsFlow {
                transport,
                client: from,
                server: to,
                direction: Direction::Query,
            }
        } else {
            DnsFlow {
                transport,
                client: to,
                server: from,
                direction: Direction::Reply,
            }
        };
        if !self.trusted.is_empty() && !self.trusted.contains(&flow.server.ip()) {
            return match flow.direction {
                // Nothing a server outside the list says is learned: its
                // queries need not be remembered.
                Direction::Query => Snooped::accept(flow, Vec::new()),
                Direction::Reply => Snooped::event(Some(flow), SnoopEvent::Untrusted),
            };
        }
        if flow.direction == Direction::Reply && !path(flow.server.ip()).is_server_path() {
            return Snooped::event(Some(flow), SnoopEvent::WrongInterface);
        }
        match &sliced.transport {
            Some(TransportSlice::Udp(udp)) if !udp.payload().is_empty() => {
                Snooped::accept(flow, vec![udp.payload().to_vec()])
            }
            Some(TransportSlice::Udp(_)) => Snooped::event(Some(flow), SnoopEvent::Malformed),
            Some(TransportSlice::Tcp(tcp)) => {
                let key = (src, tcp.source_port(), dst, tcp.destination_port());
                self.tcp(
                    flow,
                    key,
                    TcpSegment {
                        seq: tcp.sequence_number(),
                        syn: tcp.syn(),
                        end: tcp.fin() || tcp.rst(),
                        payload: tcp.payload(),
                    },
                )
            }
            _ => Snooped::event(Some(flow), SnoopEvent::Malformed),
        }
    }

    fn tcp(&mut self, flow: DnsFlow, key: FlowKey, segment: TcpSegment<'_>) -> Snooped {
        self.tick += 1;
        if segment.syn {
            // A retransmitted SYN-ACK of a connection already followed
            // changes nothing; a new ISN is a new connection.
            if self.flows.get(&key).is_some_and(|f| f.isn == segment.seq) {
                return Snooped::accept(flow, Vec::new());
            }
            // SYN or SYN-ACK: the stream starts at ISN + 1.
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
            return Snooped::accept(flow, Vec::new());
        }
        let Some(stream) = self.flows.get_mut(&key) else {
            return if segment.payload.is_empty() {
                Snooped::accept(flow, Vec::new())
            } else {
                Snooped::event(Some(flow), SnoopEvent::TcpUntracked)
            };
        };
        stream.last_used = self.tick;
        let mut out = Snooped::accept(flow, Vec::new());
        match stream.stream.push(segment.seq, segment.payload) {
            Ok(framed) => {
                stream.gaps = 0;
                for item in framed {
                    match item {
                        Framed::Message(message) => out.messages.push(message),
                        Framed::Oversized { .. } => out.events.push(SnoopEvent::Oversized),
                    }
                }
            }
            Err(_) => {
                out.events.push(SnoopEvent::TcpGap);
                stream.gaps += 1;
                if stream.gaps < MAX_CONSECUTIVE_GAPS {
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
