//! A packet as NFQUEUE hands it to a worker ([`Queued`]: its id, bytes,
//! mark, the Node's side of it and its in-interface) and what the kernel can be told about
//! it ([`Action`]). Plain values: no socket, no `nfq` type.

use super::flow::LocalSide;
use super::segment::Rewrite;

/// The kernel's id of a queued packet, unique within its queue while the
/// packet waits for a verdict.
pub type PacketId = u32;

/// One queued packet, borrowed from the message that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued<'a> {
    pub id: PacketId,
    /// The packet from its IP header (possibly cut to the copy range).
    pub payload: &'a [u8],
    pub mark: u32,
    /// The Node's side of the packet, from the hook that queued it.
    pub local: Option<LocalSide>,
    /// Index of the interface the packet came in on; 0 when it was made on
    /// the Node (OUTPUT).
    pub indev: u32,
}

/// The verdict handed to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `NF_ACCEPT`: continue without a decision recorded in conntrack.
    Accept,
    /// `NF_ACCEPT` of the packet changed as [`Rewrite`] says (dropped
    /// instead if it cannot be).
    AcceptRewritten(Rewrite),
    /// `NF_DROP`.
    Drop,
    /// Set the packet mark and `NF_REPEAT`: the owned chain, re-entered from
    /// the top, saves the mark to conntrack and accepts, or rejects.
    Repeat { mark: u32 },
}
