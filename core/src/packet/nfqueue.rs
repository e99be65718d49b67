//! The NFQUEUE netlink messages, as bytes: the parser of what the kernel
//! sends a queue's socket (packets, and the errors and acknowledgements of
//! our requests), the builders of what we send it (the queue's
//! configuration, per-packet and batch verdicts), and [`plan_verdicts`],
//! which chooses batch verdicts where the kernel's semantics allow them.
//! Pure: no socket, no clock; panic-free on any bytes (malformed or
//! truncated netlink ends the walk of a buffer with an error, never an
//! out-of-bounds read). The socket is in `workers::nfqueue`.
//!
//! Layout (`linux/netlink.h`, `linux/netfilter/nfnetlink.h`,
//! `linux/netfilter/nfnetlink_queue.h`): each message is a 16-byte
//! `nlmsghdr` (length, type, flags, sequence, port; host byte order), for
//! NFQUEUE a 4-byte `nfgenmsg` (family, version, queue number in network
//! byte order), then attributes (`nlattr`: 2-byte length including its
//! 4-byte header, 2-byte type; padded to 4 bytes; NFQUEUE payloads in
//! network byte order).

use super::queued::{Action, PacketId};
use crate::netlink::{self, attribute, NLMSG_ERROR, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_REQUEST};

const NFGEN_HDRLEN: usize = 4;

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFNETLINK_V0: u8 = 0;

const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = 3;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;

const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;

/// The kernel accepts the queue's packets itself when it is full.
pub const NFQA_CFG_F_FAIL_OPEN: u32 = 0x1;
/// The kernel may queue GSO packets whole (not segmented first) and with
/// their checksum left to the device.
pub const NFQA_CFG_F_GSO: u32 = 0x4;
/// `NFQA_SKB_INFO`: the packet's checksum is not computed yet (GSO queue).
pub const NFQA_SKB_CSUMNOTREADY: u32 = 0x1;

/// `NF_DROP`, `NF_ACCEPT`, `NF_REPEAT`.
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NF_REPEAT: u32 = 4;

/// Bytes the kernel adds around a packet's copy in its message: headers
/// and the attributes besides the payload (hook, mark, interfaces,
/// hardware address, timestamp, lengths), with room to spare.
pub const MESSAGE_OVERHEAD: usize = 512;

/// Why a buffer could not be read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("netlink message header cut short ({0} bytes left)")]
    ShortHeader(usize),
    #[error("netlink message length {length} outside 16..={left}")]
    BadLength { length: usize, left: usize },
    #[error("NFQUEUE packet message without a packet header")]
    NoPacketHeader,
    #[error("attribute {kind}: length {length} does not fit")]
    BadAttribute { kind: u16, length: usize },
    #[error("the kernel dropped messages (overrun)")]
    Overrun,
}

impl From<netlink::MessageError> for WireError {
    fn from(error: netlink::MessageError) -> WireError {
        match error {
            netlink::MessageError::ShortHeader(left) => WireError::ShortHeader(left),
            netlink::MessageError::BadLength { length, left } => {
                WireError::BadLength { length, left }
            }
        }
    }
}

impl From<netlink::AttributeError> for WireError {
    fn from(error: netlink::AttributeError) -> WireError {
        WireError::BadAttribute {
            kind: error.kind,
            length: error.length,
        }
    }
}

/// One queued packet as its message carries it, borrowed from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMessage<'a> {
    pub queue: u16,
    pub id: PacketId,
    /// `NFQA_PACKET_HDR`'s hardware protocol (ethertype).
    pub hw_protocol: u16,
    /// The netfilter hook number (`NF_INET_*`).
    pub hook: u8,
    pub mark: u32,
    /// In-interface index; 0 when absent (locally made packets).
    pub indev: u32,
    /// The packet from its network header, cut to the copy range.
    pub payload: &'a [u8],
    /// The packet's length before the cut (`NFQA_CAP_LEN`), when it was cut.
    pub cap_len: Option<u32>,
    /// `NFQA_SKB_INFO` flags (GSO, checksum not ready), 0 when absent.
    pub skb_info: u32,
}

/// One message from a queue's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Packet(PacketMessage<'a>),
    /// `NLMSG_ERROR` for request `seq`: `errno` 0 acknowledges it, a
    /// positive value is the error the kernel met (`EPERM`, `ENOENT`, …).
    Ack {
        seq: u32,
        errno: i32,
    },
    /// Anything else (`NLMSG_NOOP`, `NLMSG_DONE`, other subsystems'
    /// types): nothing to do.
    Other,
}

/// Walks the NFQUEUE messages of one received buffer, in order. After the
/// first error the walk ends (a bad length leaves no way to the next
/// message).
pub fn messages(buffer: &[u8]) -> Messages<'_> {
    Messages {
        inner: netlink::messages(buffer),
    }
}

/// The iterator of [`messages`].
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    inner: netlink::Messages<'a>,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match self.inner.next()? {
            Ok(message) => message_of(message),
            Err(error) => Err(error.into()),
        };
        if item.is_err() {
            self.inner = netlink::messages(&[]);
        }
        Some(item)
    }
}

/// What one netlink message is to a queue.
fn message_of(message: netlink::Message<'_>) -> Result<Message<'_>, WireError> {
    Ok(match message.kind {
        NLMSG_ERROR => Message::Ack {
            seq: message.seq,
            errno: message.errno().unwrap_or_default(),
        },
        NLMSG_OVERRUN => return Err(WireError::Overrun),
        kind if kind == (NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET) => {
            Message::Packet(packet(message.body)?)
        }
        // NLMSG_NOOP, NLMSG_DONE, other subsystems' types.
        _ => Message::Other,
    })
}

/// Reads an NFQUEUE packet message's body (after the netlink header).
fn packet(body: &[u8]) -> Result<PacketMessage<'_>, WireError> {
    let Some(attributes) = body.get(NFGEN_HDRLEN..) else {
        return Err(WireError::NoPacketHeader);
    };
    let queue = u16::from_be_bytes([body[2], body[3]]);
    let mut header = None;
    let mut message = PacketMessage {
        queue,
        id: 0,
        hw_protocol: 0,
        hook: 0,
        mark: 0,
        indev: 0,
        payload: &[],
        cap_len: None,
        skb_info: 0,
    };
    for attribute in netlink::attributes(attributes) {
        let (kind, value) = attribute?;
        match kind {
            NFQA_PACKET_HDR if value.len() >= 7 => {
                header = Some((
                    u32_be(value, 0),
                    u16::from_be_bytes([value[4], value[5]]),
                    value[6],
                ));
            }
            NFQA_MARK if value.len() >= 4 => message.mark = u32_be(value, 0),
            NFQA_IFINDEX_INDEV if value.len() >= 4 => message.indev = u32_be(value, 0),
            NFQA_PAYLOAD => message.payload = value,
            NFQA_CAP_LEN if value.len() >= 4 => message.cap_len = Some(u32_be(value, 0)),
            NFQA_SKB_INFO if value.len() >= 4 => message.skb_info = u32_be(value, 0),
            NFQA_PACKET_HDR | NFQA_MARK | NFQA_IFINDEX_INDEV | NFQA_CAP_LEN | NFQA_SKB_INFO => {
                return Err(WireError::BadAttribute {
                    kind,
                    length: value.len(),
                })
            }
            _ => {}
        }
    }
    let (id, hw_protocol, hook) = header.ok_or(WireError::NoPacketHeader)?;
    message.id = id;
    message.hw_protocol = hw_protocol;
    message.hook = hook;
    Ok(message)
}

/// What a queue is bound with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub queue: u16,
    /// Bytes of each packet copied to userspace.
    pub copy_range: u32,
    /// Packets the kernel holds before the queue counts as full.
    pub max_len: u32,
    /// `NFQA_CFG_F_*` flags to set; every flag in [`QueueConfig::MASK`]
    /// not given here is cleared.
    pub flags: u32,
}

impl QueueConfig {
    /// The flags whose value a configuration message sets.
    pub const MASK: u32 = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
}

/// Appends the one `NFQNL_MSG_CONFIG` request (asking for an
/// acknowledgement) that binds the queue to this socket and configures it:
/// the kernel reads the bind command first, then the copy mode and range,
/// the length and the flags, so no packet is queued half-configured by a
/// second request.
pub fn config(out: &mut Vec<u8>, seq: u32, config: &QueueConfig) {
    let start = begin(
        out,
        NFQNL_MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        config.queue,
    );
    // nfqnl_msg_config_cmd: command, padding, protocol family (0: any).
    attribute(out, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
    // nfqnl_msg_config_params (packed): copy range, copy mode.
    let mut params = [0u8; 5];
    params[..4].copy_from_slice(&config.copy_range.to_be_bytes());
    params[4] = NFQNL_COPY_PACKET;
    attribute(out, NFQA_CFG_PARAMS, &params);
    attribute(out, NFQA_CFG_QUEUE_MAXLEN, &config.max_len.to_be_bytes());
    attribute(out, NFQA_CFG_MASK, &QueueConfig::MASK.to_be_bytes());
    attribute(
        out,
        NFQA_CFG_FLAGS,
        &(config.flags & QueueConfig::MASK).to_be_bytes(),
    );
    netlink::end(out, start);
}

/// A verdict without a new payload, as a batch can carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plain {
    Accept,
    Drop,
    Repeat { mark: u32 },
}

impl Plain {
    /// The plain verdict an action is, unless it carries a payload.
    pub fn of(action: &Action) -> Option<Plain> {
        match *action {
            Action::Accept => Some(Plain::Accept),
            Action::Drop => Some(Plain::Drop),
            Action::Repeat { mark } => Some(Plain::Repeat { mark }),
            Action::AcceptRewritten(_) => None,
        }
    }

    fn code(self) -> u32 {
        match self {
            Plain::Accept => NF_ACCEPT,
            Plain::Drop => NF_DROP,
            Plain::Repeat { .. } => NF_REPEAT,
        }
    }

    fn mark(self) -> Option<u32> {
        match self {
            Plain::Repeat { mark } => Some(mark),
            Plain::Accept | Plain::Drop => None,
        }
    }
}

/// Appends an `NFQNL_MSG_VERDICT` for packet `id`: `payload` replaces the
/// packet's bytes when given (an accepted rewrite).
pub fn verdict(
    out: &mut Vec<u8>,
    seq: u32,
    queue: u16,
    id: PacketId,
    plain: Plain,
    payload: Option<&[u8]>,
) {
    let start = begin(out, NFQNL_MSG_VERDICT, NLM_F_REQUEST, seq, queue);
    verdict_attributes(out, id, plain);
    if let Some(payload) = payload {
        attribute(out, NFQA_PAYLOAD, payload);
    }
    netlink::end(out, start);
}

/// Appends an `NFQNL_MSG_VERDICT_BATCH`: the kernel gives `plain` to every
/// packet of the queue whose id is `id` or older.
pub fn verdict_batch(out: &mut Vec<u8>, seq: u32, queue: u16, id: PacketId, plain: Plain) {
    let start = begin(out, NFQNL_MSG_VERDICT_BATCH, NLM_F_REQUEST, seq, queue);
    verdict_attributes(out, id, plain);
    netlink::end(out, start);
}

fn verdict_attributes(out: &mut Vec<u8>, id: PacketId, plain: Plain) {
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&plain.code().to_be_bytes());
    header[4..].copy_from_slice(&id.to_be_bytes());
    attribute(out, NFQA_VERDICT_HDR, &header);
    if let Some(mark) = plain.mark() {
        attribute(out, NFQA_MARK, &mark.to_be_bytes());
    }
}

/// Starts a message: netlink header (length filled by [`netlink::end`])
/// and `nfgenmsg`; returns where it starts.
fn begin(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32, queue: u16) -> usize {
    let start = netlink::begin(out, NFNL_SUBSYS_QUEUE << 8 | kind, flags, seq);
    out.extend_from_slice(&[0, NFNETLINK_V0]);
    out.extend_from_slice(&queue.to_be_bytes());
    start
}

fn u32_be(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// One verdict message of a round, by index into the round's verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// A batch verdict at the id of verdict `last`, covering verdicts
    /// `first..=last` (all the same plain verdict).
    Batch { first: usize, last: usize },
    /// A verdict for the packet of verdict `index` alone.
    One { index: usize },
}

/// Chooses the messages for one round of verdicts. `round` holds the
/// round's verdicts in the kernel's queue order (oldest packet first, as
/// [`Sequence`] orders them); `oldest_left` is the oldest packet the
/// kernel still holds for us that gets no verdict this round.
///
/// A batch verdict at id N applies to every packet of the queue with id N
/// or older, so a run is batched only when no packet that stays held is
/// older than its newest, every verdict of the run is the same plain one,
/// and the run has two packets or more; the rest get one message each.
/// The messages keep the round's order.
pub fn plan_verdicts(round: &[(u64, Option<Plain>)], oldest_left: Option<u64>) -> Vec<Outgoing> {
    let mut sends = Vec::with_capacity(round.len());
    let mut index = 0;
    while index < round.len() {
        let (key, plain) = round[index];
        let batchable = |k: u64| oldest_left.is_none_or(|left| k < left);
        let mut last = index;
        if let Some(plain) = plain.filter(|_| batchable(key)) {
            while let Some((next, next_plain)) = round.get(last + 1) {
                if *next_plain != Some(plain) || !batchable(*next) {
                    break;
                }
                last += 1;
            }
        }
        if last > index {
            sends.push(Outgoing::Batch { first: index, last });
        } else {
            sends.push(Outgoing::One { index });
        }
        index = last + 1;
    }
    sends
}

/// Orders packet ids as the kernel queued them across the wrap of the
/// 32-bit id: each received id gets a 64-bit key that grows with every
/// packet (ids are given in order; a jump back by more than half the
/// range is a wrap).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequence {
    last: Option<PacketId>,
    epoch: u64,
}

impl Sequence {
    /// The key of a newly received id.
    pub fn received(&mut self, id: PacketId) -> u64 {
        if let Some(last) = self.last {
            if id < last && last - id > 1 << 31 {
                self.epoch += 1;
            }
        }
        self.last = Some(id);
        self.key(id)
    }

    /// The key of an id received before (in this epoch or the one before).
    pub fn key(&self, id: PacketId) -> u64 {
        let epoch = match self.last {
            Some(last) if id > last && id - last > 1 << 31 => self.epoch.saturating_sub(1),
            _ => self.epoch,
        };
        epoch << 32 | u64::from(id)
    }
}

#[cfg(test)]
mod tests;
