//! A queued packet as the rest of tollgate sees it: its flow ([`flow`]),
//! the packet and the [`Action`] the kernel can be given ([`queued`]), the
//! first packet reduced to a flow ([`parse`]) and a TCP segment's payload
//! ([`segment`]). Pure and panic-free on any bytes; never touches a socket.

pub mod flow;
pub mod nflog;
pub mod nfqueue;
pub mod parse;
pub mod queued;
pub mod segment;

pub use flow::{Flow, LocalSide, Transport, Verdict};
pub use parse::{packet_length, parse_flow, PacketError};
pub use queued::{Action, PacketId, Queued};
pub use segment::{
    parse_segment, tcp_payload_len, Discard, FlowKey, Rewrite, Segment, SegmentError, Timestamp,
};
