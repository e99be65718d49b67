//! The netlink wire format tollgate's own sockets speak (NFQUEUE, ipset,
//! route lookups): the message header, attributes plain and nested, their
//! 4-byte padding, and the kernel's error messages. One codec for all
//! three, so each protocol module only names its message types and
//! attributes. Pure: it reads and writes byte buffers, never a socket, and
//! never panics on any input.
//!
//! ```text
//!  message:    | len u32 | type u16 | flags u16 | seq u32 | pid u32 | body …      | pad to 4 |
//!  attribute:  | len u16 | type u16 (NESTED, NET_BYTEORDER flags on top) | value … | pad to 4 |
//!  NLMSG_ERROR body: | -errno i32 | the request's header (and more) |
//! ```
//!
//! Header fields are in the host's byte order, as the kernel writes them.

/// Length of the message header.
pub const NLMSG_HDRLEN: usize = 16;
/// Length of an attribute header.
pub const NLA_HDRLEN: usize = 4;
/// Attribute type bits without the two flags.
pub const NLA_TYPE_MASK: u16 = 0x3fff;
/// The attribute holds attributes.
pub const NLA_F_NESTED: u16 = 0x8000;
/// The attribute's value is in network byte order.
pub const NLA_F_NET_BYTEORDER: u16 = 0x4000;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_OVERRUN: u16 = 4;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;

/// `n` rounded up to the netlink alignment (4 bytes).
pub fn align(n: usize) -> usize {
    n.saturating_add(3) & !3
}

fn u16_ne(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

fn u32_ne(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

// ------------------------------------------------------------------ writing

/// Starts a message of `kind` with `flags` and `seq` at the end of `out`
/// (its length is filled in by [`end`]); returns where it starts. The
/// caller appends the protocol's fixed header and attributes.
pub fn begin(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> usize {
    let start = out.len();
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    start
}

/// Ends the message begun at `start`: writes its length.
pub fn end(out: &mut [u8], start: usize) {
    let length = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
    out[start..start + 4].copy_from_slice(&length.to_ne_bytes());
}

/// Appends one attribute and its padding. A value longer than an
/// attribute can say (64 KiB less its header) is cut.
pub fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let value = &value[..value.len().min(usize::from(u16::MAX) - NLA_HDRLEN)];
    let length = NLA_HDRLEN + value.len();
    out.extend_from_slice(&(length as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len() + align(length) - length, 0);
}

/// Starts a nested attribute of `kind` (its length is filled in by
/// [`nest_end`]); returns where it starts.
pub fn nest_start(out: &mut Vec<u8>, kind: u16) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    at
}

/// Ends the nested attribute begun at `at`.
pub fn nest_end(out: &mut [u8], at: usize) {
    let length = u16::try_from(out.len() - at).unwrap_or(u16::MAX);
    out[at..at + 2].copy_from_slice(&length.to_ne_bytes());
}

// ------------------------------------------------------------------ reading

/// Why a buffer's messages could not be read to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("netlink message header cut short ({0} bytes left)")]
    ShortHeader(usize),
    #[error("netlink message length {length} outside 16..={left}")]
    BadLength { length: usize, left: usize },
}

/// One message's header fields and body, borrowed from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// What follows the header, without padding.
    pub body: &'a [u8],
}

impl<'a> Message<'a> {
    /// An `NLMSG_ERROR` message's error: 0 acknowledges the request, a
    /// positive value is the errno the kernel met. `None` for other
    /// messages ([`messages`] refuses an error too short to hold it).
    pub fn errno(&self) -> Option<i32> {
        if self.kind != NLMSG_ERROR || self.body.len() < 4 {
            return None;
        }
        // The kernel sends minus the errno.
        Some((u32_ne(self.body, 0) as i32).saturating_neg())
    }

    /// The sequence number of the request an `NLMSG_ERROR` answers (from
    /// the request header it echoes), when the body holds it.
    pub fn request_seq(&self) -> Option<u32> {
        (self.kind == NLMSG_ERROR && self.body.len() >= 4 + NLMSG_HDRLEN)
            .then(|| u32_ne(self.body, 4 + 8))
    }
}

/// Walks the messages of one received buffer, in order. After the first
/// error the walk ends: a bad length leaves no way to the next message. An
/// `NLMSG_ERROR` too short to hold its code is a bad length too.
pub fn messages(buffer: &[u8]) -> Messages<'_> {
    Messages { rest: buffer }
}

/// The iterator of [`messages`].
#[derive(Clone, Debug)]
pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let buffer = self.rest;
        if buffer.is_empty() {
            return None;
        }
        let left = buffer.len();
        if left < NLMSG_HDRLEN {
            self.rest = &[];
            return Some(Err(MessageError::ShortHeader(left)));
        }
        let length = u32_ne(buffer, 0) as usize;
        let kind = u16_ne(buffer, 4);
        let shortest = match kind {
            NLMSG_ERROR => NLMSG_HDRLEN + 4,
            _ => NLMSG_HDRLEN,
        };
        if !(shortest..=left).contains(&length) {
            self.rest = &[];
            return Some(Err(MessageError::BadLength { length, left }));
        }
        self.rest = buffer.get(align(length)..).unwrap_or_default();
        Some(Ok(Message {
            kind,
            flags: u16_ne(buffer, 6),
            seq: u32_ne(buffer, 8),
            body: &buffer[NLMSG_HDRLEN..length],
        }))
    }
}

/// An attribute whose length does not fit the bytes left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("attribute {kind}: length {length} does not fit")]
pub struct AttributeError {
    pub kind: u16,
    pub length: usize,
}

/// The attributes of `bytes` (a message body after its fixed header, or a
/// nested attribute's value): `(type without flags, value)`. After the
/// first error the walk ends.
pub fn attributes(bytes: &[u8]) -> Attributes<'_> {
    Attributes(bytes)
}

/// The iterator of [`attributes`].
#[derive(Clone, Debug)]
pub struct Attributes<'a>(&'a [u8]);

impl<'a> Iterator for Attributes<'a> {
    type Item = Result<(u16, &'a [u8]), AttributeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0;
        if rest.is_empty() {
            return None;
        }
        if rest.len() < NLA_HDRLEN {
            self.0 = &[];
            return Some(Err(AttributeError {
                kind: 0,
                length: rest.len(),
            }));
        }
        let length = usize::from(u16_ne(rest, 0));
        let kind = u16_ne(rest, 2) & NLA_TYPE_MASK;
        if !(NLA_HDRLEN..=rest.len()).contains(&length) {
            self.0 = &[];
            return Some(Err(AttributeError { kind, length }));
        }
        self.0 = rest.get(align(length)..).unwrap_or_default();
        Some(Ok((kind, &rest[NLA_HDRLEN..length])))
    }
}

/// Byte fixtures for the parsers' tests (NFQUEUE, NFLOG): a message and
/// an attribute as the kernel lays them out.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{align, attribute, NLMSG_HDRLEN};

    /// A netlink message of `kind` with `body` (host byte order header).
    pub(crate) fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let length = (NLMSG_HDRLEN + body.len()) as u32;
        out.extend_from_slice(&length.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(body);
        out.resize(align(out.len()), 0);
        out
    }

    /// One attribute of `kind` holding `value`.
    pub(crate) fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        attribute(&mut out, kind, value);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_message_reads_back_with_its_attributes_and_padding() {
        let mut out = Vec::new();
        let start = begin(&mut out, 0x0300, NLM_F_REQUEST | NLM_F_ACK, 7);
        out.extend_from_slice(&[0, 0, 0, 1]); // a protocol's fixed header
        attribute(&mut out, 1, b"abc");
        let nest = nest_start(&mut out, 2);
        attribute(&mut out, 3 | NLA_F_NET_BYTEORDER, &9u32.to_be_bytes());
        nest_end(&mut out, nest);
        end(&mut out, start);
        assert_eq!(out.len() % 4, 0);
        let second = begin(&mut out, NLMSG_DONE, 0, 8);
        end(&mut out, second);

        let read: Vec<Message> = messages(&out).map(Result::unwrap).collect();
        assert_eq!(read.len(), 2);
        assert_eq!((read[0].kind, read[0].flags, read[0].seq), (0x0300, 5, 7));
        let attrs: Vec<(u16, &[u8])> = attributes(&read[0].body[4..]).map(Result::unwrap).collect();
        assert_eq!(attrs[0], (1, &b"abc"[..]));
        assert_eq!(attrs[1].0, 2, "the nested flag is masked off");
        let inner: Vec<(u16, &[u8])> = attributes(attrs[1].1).map(Result::unwrap).collect();
        assert_eq!(inner, [(3, &9u32.to_be_bytes()[..])]);
        assert_eq!((read[1].kind, read[1].seq), (NLMSG_DONE, 8));
    }

    #[test]
    fn errors_give_the_errno_and_the_request_they_answer() {
        let mut out = Vec::new();
        let start = begin(&mut out, NLMSG_ERROR, 0, 0);
        out.extend_from_slice(&(-2i32).to_ne_bytes());
        let echoed = begin(&mut out, 0x0609, NLM_F_REQUEST, 41);
        end(&mut out, echoed);
        end(&mut out, start);
        let message = messages(&out).next().unwrap().unwrap();
        assert_eq!(message.errno(), Some(2));
        assert_eq!(message.request_seq(), Some(41));
    }

    #[test]
    fn bad_lengths_end_the_walk_without_panicking() {
        assert_eq!(
            messages(&[1, 2, 3]).collect::<Vec<_>>(),
            [Err(MessageError::ShortHeader(3))]
        );
        let mut long = vec![0u8; 16];
        long[..4].copy_from_slice(&64u32.to_ne_bytes());
        assert_eq!(
            messages(&long).collect::<Vec<_>>(),
            [Err(MessageError::BadLength {
                length: 64,
                left: 16
            })]
        );
        let mut error = vec![0u8; 18];
        error[..4].copy_from_slice(&18u32.to_ne_bytes());
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error.resize(20, 0);
        assert_eq!(
            messages(&error).collect::<Vec<_>>(),
            [Err(MessageError::BadLength {
                length: 18,
                left: 20
            })]
        );
        let attrs: Vec<_> = attributes(&[8, 0, 1, 0, 0]).collect();
        assert_eq!(attrs, [Err(AttributeError { kind: 1, length: 8 })]);
        assert_eq!(
            attributes(&[1, 0]).collect::<Vec<_>>(),
            [Err(AttributeError { kind: 0, length: 2 })]
        );
    }
}
