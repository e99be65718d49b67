//! The NFLOG (`nfnetlink_log`) netlink messages, as bytes: the parser of
//! what the kernel sends a log group's socket (copies of logged packets,
//! and the answers to our requests) and the builder of the one request
//! that binds a group and configures it. The DNS worker reads the copies
//! of DNS queries this way, without holding the queries. Pure: no socket,
//! no clock; panic-free on any bytes (malformed or truncated netlink ends
//! the walk of a buffer with an error, never an out-of-bounds read). The
//! socket is in `workers::nflog`.
//!
//! Layout (`linux/netfilter/nfnetlink_log.h`): a 16-byte `nlmsghdr`, a
//! 4-byte `nfgenmsg` (family, version, group in network byte order), then
//! attributes; values in network byte order.

use crate::netlink::{self, attribute, NLMSG_ERROR, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_REQUEST};

const NFGEN_HDRLEN: usize = 4;

const NFNL_SUBSYS_ULOG: u16 = 4;
const NFNETLINK_V0: u8 = 0;

const NFULNL_MSG_PACKET: u16 = 0;
const NFULNL_MSG_CONFIG: u16 = 1;

const NFULA_PACKET_HDR: u16 = 1;
const NFULA_IFINDEX_INDEV: u16 = 4;
const NFULA_PAYLOAD: u16 = 9;

const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_TIMEOUT: u16 = 4;
const NFULA_CFG_QTHRESH: u16 = 5;

const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;

/// Bytes the kernel adds around a packet's copy in its message (headers,
/// hook, mark, interfaces, timestamp, …), with room to spare.
pub const LOG_OVERHEAD: usize = 512;

/// Why a buffer could not be read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error("netlink message header cut short ({0} bytes left)")]
    ShortHeader(usize),
    #[error("netlink message length {length} outside 16..={left}")]
    BadLength { length: usize, left: usize },
    #[error("NFLOG packet message without its group header")]
    NoGroupHeader,
    #[error("attribute {kind}: length {length} does not fit")]
    BadAttribute { kind: u16, length: usize },
    #[error("the kernel dropped messages (overrun)")]
    Overrun,
}

/// One logged packet as its message carries it, borrowed from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedPacket<'a> {
    pub group: u16,
    /// The netfilter hook number (`NF_INET_*`); 0 when absent.
    pub hook: u8,
    /// In-interface index; 0 when absent (locally made packets).
    pub indev: u32,
    /// The packet from its network header, cut to the copy range.
    pub payload: &'a [u8],
}

/// One message from a log group's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogMessage<'a> {
    Packet(LoggedPacket<'a>),
    /// `NLMSG_ERROR` for request `seq`: `errno` 0 acknowledges it.
    Ack {
        seq: u32,
        errno: i32,
    },
    /// Anything else: nothing to do.
    Other,
}

/// Walks the NFLOG messages of one received buffer, in order. After the
/// first error the walk ends.
pub fn log_messages(buffer: &[u8]) -> LogMessages<'_> {
    LogMessages {
        inner: netlink::messages(buffer),
    }
}

/// The iterator of [`log_messages`].
#[derive(Clone, Debug)]
pub struct LogMessages<'a> {
    inner: netlink::Messages<'a>,
}

impl<'a> Iterator for LogMessages<'a> {
    type Item = Result<LogMessage<'a>, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match self.inner.next()? {
            Ok(message) => message_of(message),
            Err(netlink::MessageError::ShortHeader(left)) => Err(LogError::ShortHeader(left)),
            Err(netlink::MessageError::BadLength { length, left }) => {
                Err(LogError::BadLength { length, left })
            }
        };
        if item.is_err() {
            self.inner = netlink::messages(&[]);
        }
        Some(item)
    }
}

fn message_of(message: netlink::Message<'_>) -> Result<LogMessage<'_>, LogError> {
    Ok(match message.kind {
        NLMSG_ERROR => LogMessage::Ack {
            seq: message.seq,
            errno: message.errno().unwrap_or_default(),
        },
        NLMSG_OVERRUN => return Err(LogError::Overrun),
        kind if kind == (NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET) => {
            LogMessage::Packet(packet(message.body)?)
        }
        _ => LogMessage::Other,
    })
}

/// Reads an NFLOG packet message's body (after the netlink header).
fn packet(body: &[u8]) -> Result<LoggedPacket<'_>, LogError> {
    let (Some(header), Some(attributes)) = (body.get(..NFGEN_HDRLEN), body.get(NFGEN_HDRLEN..))
    else {
        return Err(LogError::NoGroupHeader);
    };
    let mut logged = LoggedPacket {
        group: u16::from_be_bytes([header[2], header[3]]),
        hook: 0,
        indev: 0,
        payload: &[],
    };
    for attribute in netlink::attributes(attributes) {
        let (kind, value) = attribute.map_err(|e| LogError::BadAttribute {
            kind: e.kind,
            length: e.length,
        })?;
        match (kind, value) {
            // nfulnl_msg_packet_hdr: hardware protocol (2), hook, padding.
            (NFULA_PACKET_HDR, [_, _, hook, ..]) => logged.hook = *hook,
            (NFULA_IFINDEX_INDEV, [a, b, c, d, ..]) => {
                logged.indev = u32::from_be_bytes([*a, *b, *c, *d])
            }
            (NFULA_PAYLOAD, payload) => logged.payload = payload,
            (NFULA_PACKET_HDR | NFULA_IFINDEX_INDEV, _) => {
                return Err(LogError::BadAttribute {
                    kind,
                    length: value.len(),
                })
            }
            _ => {}
        }
    }
    Ok(logged)
}

/// Appends the one `NFULNL_MSG_CONFIG` request (asking for an
/// acknowledgement) that binds `group` to this socket and configures it:
/// whole packets up to `copy_range` bytes, each sent at once (a queue
/// threshold of one packet, no flush timer), so that a packet's copy is
/// in the socket before the packet goes on.
pub fn log_config(out: &mut Vec<u8>, seq: u32, group: u16, copy_range: u32) {
    let start = netlink::begin(
        out,
        NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
    );
    out.extend_from_slice(&[0, NFNETLINK_V0]);
    out.extend_from_slice(&group.to_be_bytes());
    attribute(out, NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND]);
    // nfulnl_msg_config_mode (packed): copy range, copy mode, padding.
    let mut mode = [0u8; 6];
    mode[..4].copy_from_slice(&copy_range.to_be_bytes());
    mode[4] = NFULNL_COPY_PACKET;
    attribute(out, NFULA_CFG_MODE, &mode);
    attribute(out, NFULA_CFG_QTHRESH, &1u32.to_be_bytes());
    attribute(out, NFULA_CFG_TIMEOUT, &0u32.to_be_bytes());
    netlink::end(out, start);
}

#[cfg(test)]
mod tests;
