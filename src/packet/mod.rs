//! What a queued packet is, as the rest of tollgate sees it: [`flow`]
//! holds the connection tuple ([`Flow`], [`Transport`]) and the [`Verdict`]
//! vocabulary, [`parse`] reduces the first packet of a connection to a
//! flow, and [`segment`] reads a TCP segment's payload for the L7 and DNS
//! paths. Pure and panic-free on any bytes; never touches a socket.

pub mod flow;
pub mod parse;
pub mod segment;

pub use flow::{Flow, Transport, Verdict};
pub use parse::{packet_length, parse_flow, PacketError};
pub use segment::{parse_segment, tcp_payload_len, FlowKey, Segment, SegmentError};
