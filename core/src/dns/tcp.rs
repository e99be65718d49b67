//! DNS over TCP framing (RFC 1035 §4.2.2, RFC 7766): every message is
//! preceded by a two-byte big-endian length. Segments arrive with their TCP
//! sequence number; the reassembler keeps at most one partial message.

/// Default bound on one buffered message: the largest a length prefix can
/// announce, so a well-formed stream never overflows it.
pub const DEFAULT_MAX_MESSAGE: usize = 65_535;

/// What a segment completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Framed {
    /// One complete message, without its length prefix.
    Message(Vec<u8>),
    /// A message announced longer than the buffer bound: its bytes are
    /// skipped (framing stays in sync) and it is never delivered.
    Oversized { announced: usize, max: usize },
}

/// A segment the reassembler could not use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The segment starts after bytes that were never seen. Nothing was
    /// consumed and the state is unchanged: the caller should drop the
    /// segment (TCP retransmits it after the missing bytes, in order), or
    /// call [`TcpStreamReassembler::reset`] if it lets the segment through.
    #[error("segment at sequence {got} leaves a gap after {expected}")]
    Gap { expected: u32, got: u32 },
}

#[derive(Clone, Debug)]
enum State {
    /// Reading the two-byte length; holds the high byte once seen.
    Length(Option<u8>),
    /// Reading a message body of the announced length.
    Body { announced: usize, buf: Vec<u8> },
    /// Skipping an oversized message; `remaining` bytes still to skip.
    Skip { remaining: usize },
}

/// Per-flow framing state for one direction (server → client) of a
/// DNS-over-TCP connection.
#[derive(Clone, Debug)]
pub struct TcpStreamReassembler {
    max_message: usize,
    /// Sequence number of the next byte expected; `None` until the first
    /// segment, whose first byte is taken to start a length prefix.
    next_seq: Option<u32>,
    state: State,
}

impl Default for TcpStreamReassembler {
    fn default() -> Self {
        TcpStreamReassembler::new(DEFAULT_MAX_MESSAGE)
    }
}

impl TcpStreamReassembler {
    /// A reassembler that buffers messages of at most `max_message` bytes.
    pub fn new(max_message: usize) -> TcpStreamReassembler {
        TcpStreamReassembler {
            max_message,
            next_seq: None,
            state: State::Length(None),
        }
    }

    /// Forgets any partial message; the next segment is taken to start a
    /// new length prefix.
    pub fn reset(&mut self) {
        self.next_seq = None;
        self.state = State::Length(None);
    }

    /// Bytes currently held for a partial message.
    pub fn buffered(&self) -> usize {
        match &self.state {
            State::Body { buf, .. } => buf.len(),
            State::Length(_) | State::Skip { .. } => 0,
        }
    }

    /// Feeds the payload of one segment whose first byte has sequence
    /// number `seq`. Bytes already seen (retransmissions, overlaps) are
    /// skipped; a segment beyond the next expected byte is refused.
    pub fn push(&mut self, seq: u32, payload: &[u8]) -> Result<Vec<Framed>, FramingError> {
        let fresh = match self.next_seq {
            None => payload,
            Some(expected) => {
                // Serial-number arithmetic (RFC 1982): negative = old bytes.
                let ahead = seq.wrapping_sub(expected) as i32;
                if ahead > 0 {
                    return Err(FramingError::Gap { expected, got: seq });
                }
                let already_seen = ahead.unsigned_abs() as usize;
                payload.get(already_seen..).unwrap_or_default()
            }
        };
        if self.next_seq.is_none() {
            self.next_seq = Some(seq);
        }
        if let Some(next) = self.next_seq.as_mut() {
            // A TCP segment is far below 4 GiB; truncation cannot occur for
            // real payloads and wrapping is the protocol's own arithmetic.
            *next = next.wrapping_add(fresh.len() as u32);
        }
        Ok(self.consume(fresh))
    }

    fn consume(&mut self, mut bytes: &[u8]) -> Vec<Framed> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match &mut self.state {
                State::Length(None) => {
                    self.state = State::Length(Some(bytes[0]));
                    bytes = &bytes[1..];
                }
                State::Length(Some(high)) => {
                    let announced = usize::from(u16::from_be_bytes([*high, bytes[0]]));
                    bytes = &bytes[1..];
                    self.state = if announced == 0 {
                        out.push(Framed::Message(Vec::new()));
                        State::Length(None)
                    } else if announced > self.max_message {
                        out.push(Framed::Oversized {
                            announced,
                            max: self.max_message,
                        });
                        State::Skip {
                            remaining: announced,
                        }
                    } else {
                        State::Body {
                            announced,
                            buf: Vec::with_capacity(announced.min(bytes.len())),
                        }
                    };
                }
                State::Body { announced, buf } => {
                    let take = (*announced - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() == *announced {
                        out.push(Framed::Message(std::mem::take(buf)));
                        self.state = State::Length(None);
                    }
                }
                State::Skip { remaining } => {
                    let take = (*remaining).min(bytes.len());
                    *remaining -= take;
                    bytes = &bytes[take..];
                    if *remaining == 0 {
                        self.state = State::Length(None);
                    }
                }
            }
        }
        out
    }
}
