//! What a queued packet is, as the rest of tollgate sees it: [`flow`]
//! holds the connection tuple ([`Flow`], [`Transport`], [`LocalSide`]) and
//! the [`Verdict`] vocabulary, [`queued`] the packet as the kernel queued
//! it and the [`Action`] it can be given, [`parse`] reduces the first
//! packet of a connection to a flow, and [`segment`] reads a TCP segment's
//! payload for the L7 and DNS paths. Pure and panic-free on any bytes;
//! never touches a socket.

pub mod flow;
pub mod parse;
pub mod queued;
pub mod segment;

pub use flow::{Flow, LocalSide, Transport, Verdict};
pub use parse::{packet_length, parse_flow, PacketError};
pub use queued::{Action, PacketId, Queued};
pub use segment::{parse_segment, tcp_payload_len, FlowKey, Segment, SegmentError};
