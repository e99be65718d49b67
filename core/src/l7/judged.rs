//! What an L7 connection's judged bytes were (issue 27: judged bytes are
//! pinned): hashes of the whole segments that carried head, ClientHello or
//! framing bytes, and the sequence ranges of Content-Length body, so a
//! later copy of any of them, passed or still withheld, can be checked to
//! repeat them exactly. Pure; it keeps no payload.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};

/// Judged segments (passed or deferred) a copy is checked against: hashes
/// of the last [`SENSITIVE_KEPT`] segments that carried head (or
/// ClientHello, or chunked framing) bytes, and the last
/// [`BODY_RANGES_KEPT`] sequence ranges of Content-Length body, whose
/// content does not matter.
#[derive(Debug, Default)]
pub(super) struct Judged {
    /// `(seq, len, hash)` of whole segments.
    sensitive: VecDeque<(u32, u32, u64)>,
    /// `(start, end)` sequence ranges.
    body: VecDeque<(u32, u32)>,
}

/// Sensitive segments remembered per connection.
pub const SENSITIVE_KEPT: usize = 32;
/// Body ranges remembered per connection.
pub const BODY_RANGES_KEPT: usize = 64;

impl Judged {
    pub(super) fn record_sensitive(&mut self, seq: u32, bytes: &[u8], hasher: &RandomState) {
        if self.sensitive.len() == SENSITIVE_KEPT {
            self.sensitive.pop_front();
        }
        self.sensitive
            .push_back((seq, bytes.len() as u32, hasher.hash_one(bytes)));
    }

    pub(super) fn record_body(&mut self, start: u32, end: u32) {
        if let Some(last) = self.body.back_mut() {
            if last.1 == start {
                last.1 = end;
                return;
            }
        }
        if self.body.len() == BODY_RANGES_KEPT {
            self.body.pop_front();
        }
        self.body.push_back((start, end));
    }

    /// Whether `bytes` at `seq` repeat what was judged: every byte lies in
    /// a body range or in a remembered segment repeated whole and
    /// unchanged.
    pub(super) fn repeats(&self, mut seq: u32, mut bytes: &[u8], hasher: &RandomState) -> bool {
        while !bytes.is_empty() {
            let in_body = self.body.iter().find(|(start, end)| {
                seq.wrapping_sub(*start) as i32 >= 0 && end.wrapping_sub(seq) as i32 > 0
            });
            if let Some((_, end)) = in_body {
                let take = (end.wrapping_sub(seq) as usize).min(bytes.len());
                seq = seq.wrapping_add(take as u32);
                bytes = &bytes[take..];
                continue;
            }
            let Some(&(_, len, hash)) = self.sensitive.iter().find(|(s, _, _)| *s == seq) else {
                return false;
            };
            let len = len as usize;
            if len > bytes.len() || hasher.hash_one(&bytes[..len]) != hash {
                return false;
            }
            seq = seq.wrapping_add(len as u32);
            bytes = &bytes[len..];
        }
        true
    }
}
