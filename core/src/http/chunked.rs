//! Incremental `Transfer-Encoding: chunked` framing (RFC 9112 §7.1): finds
//! where a chunked body ends without keeping any of it. Strict grammar:
//! CRLF only, no whitespace except before a `;` extension, bounded
//! extension and trailer lengths, sizes that fit in 64 bits.

use super::error::Malformed;
use super::path::hex;

/// Longest chunk extension accepted (bytes after the size, per chunk).
const MAX_EXTENSION: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChunkedBody {
    /// Reading hex digits of a chunk size.
    Size {
        digits: u8,
        value: u64,
    },
    /// Whitespace after the size; only a `;` may follow.
    BeforeExtension {
        value: u64,
    },
    /// Inside a chunk extension, up to CR.
    Extension {
        value: u64,
        len: usize,
    },
    /// CR of the size line seen, LF expected.
    SizeLf {
        value: u64,
    },
    /// Chunk data still to skip.
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// Inside the trailer section; `line` bytes into the current line.
    Trailer {
        line: usize,
        total: usize,
    },
    TrailerLf {
        line: usize,
        total: usize,
    },
}

/// Progress after feeding bytes to a chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// All bytes consumed; the body continues.
    NeedMore,
    /// The body ended after this many of the bytes.
    Done(usize),
}

impl ChunkedBody {
    pub(super) fn new() -> ChunkedBody {
        ChunkedBody::Size {
            digits: 0,
            value: 0,
        }
    }

    /// Consumes `bytes`; `max_trailer` bounds the trailer section.
    pub(super) fn feed(&mut self, bytes: &[u8], max_trailer: usize) -> Result<Progress, Malformed> {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            *self = match *self {
                ChunkedBody::Data { remaining } => {
                    let available = (bytes.len() - i) as u64;
                    let take = remaining.min(available);
                    // `take` ≤ the slice length, so it fits in usize.
                    i += take as usize;
                    *self = if take == remaining {
                        ChunkedBody::DataCr
                    } else {
                        ChunkedBody::Data {
                            remaining: remaining - take,
                        }
                    };
                    continue;
                }
                ChunkedBody::Size { digits, value } => match (b, hex(b)) {
                    (_, Some(d)) => {
                        if digits >= 16 {
                            return Err(Malformed::ChunkSize);
                        }
                        ChunkedBody::Size {
                            digits: digits + 1,
                            value: value << 4 | u64::from(d),
                        }
                    }
                    (b'\n', None) => return Err(Malformed::BareLineEnding),
                    _ if digits == 0 => return Err(Malformed::ChunkSize),
                    (b' ' | b'\t', None) => ChunkedBody::BeforeExtension { value },
                    (b';', None) => ChunkedBody::Extension { value, len: 0 },
                    (b'\r', None) => ChunkedBody::SizeLf { value },
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::BeforeExtension { value } => match b {
                    b' ' | b'\t' => ChunkedBody::BeforeExtension { value },
                    b';' => ChunkedBody::Extension { value, len: 0 },
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::Extension { value, len } => match b {
                    b'\r' => ChunkedBody::SizeLf { value },
                    b'\n' => return Err(Malformed::BareLineEnding),
                    b'\t' | b' '..=b'~' | 0x80..=0xff if len < MAX_EXTENSION => {
                        ChunkedBody::Extension {
                            value,
                            len: len + 1,
                        }
                    }
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::SizeLf { value } => match (b, value) {
                    (b'\n', 0) => ChunkedBody::Trailer { line: 0, total: 0 },
                    (b'\n', remaining) => ChunkedBody::Data { remaining },
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::DataCr => match b {
                    b'\r' => ChunkedBody::DataLf,
                    b'\n' => return Err(Malformed::BareLineEnding),
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::DataLf => match b {
                    b'\n' => ChunkedBody::new(),
                    _ => return Err(Malformed::ChunkSyntax),
                },
                ChunkedBody::Trailer { line, total } => match b {
                    b'\r' => ChunkedBody::TrailerLf { line, total },
                    b'\n' => return Err(Malformed::BareLineEnding),
                    _ if total >= max_trailer => return Err(Malformed::TrailerTooLarge),
                    _ => ChunkedBody::Trailer {
                        line: line + 1,
                        total: total + 1,
                    },
                },
                ChunkedBody::TrailerLf { line, total } => match b {
                    b'\n' if line == 0 => return Ok(Progress::Done(i + 1)),
                    b'\n' => ChunkedBody::Trailer { line: 0, total },
                    _ => return Err(Malformed::ChunkSyntax),
                },
            };
            i += 1;
        }
        Ok(Progress::NeedMore)
    }
}
