//! TLS ClientHello server name (SNI) for Antrea `tls` rules:
//! [`client_hello_sni`] reads the first bytes a client sends (one or more
//! handshake records, RFC 8446 §4.1.2 and RFC 6066 §3) and [`matches()`]
//! applies an `sni` pattern. Pure, bounded and panic-free on any input:
//! no sockets, no decryption, nothing beyond the ClientHello is read.

use crate::fqdn::glob_match;
use crate::model::TlsProtocol;

/// Largest ClientHello accepted (post-quantum key shares make them a few
/// KiB; 16 KiB is one full TLS record).
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST_NAME: u8 = 0;

/// Why no server name could be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The ClientHello is not complete yet: call again with more bytes.
    #[error("ClientHello incomplete")]
    Incomplete,
    #[error("not a TLS handshake record")]
    NotHandshake,
    #[error("first handshake message is type {msg_type}, not ClientHello")]
    NotClientHello { msg_type: u8 },
    #[error("ClientHello of {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
    #[error("malformed ClientHello")]
    Malformed,
    #[error("extension {extension} appears twice")]
    DuplicateExtension { extension: u16 },
    #[error("server name is not a valid host name")]
    InvalidServerName,
}

/// The server name a client asks for, lower-case; `Ok(None)` when the
/// ClientHello carries no `server_name` extension. `stream` is the client
/// byte stream from its start.
pub fn client_hello_sni(stream: &[u8]) -> Result<Option<String>, TlsError> {
    let hello = reassemble_handshake(stream)?;
    parse_client_hello(&hello)
}

/// Whether `rule` allows a connection whose ClientHello named `sni`. An
/// absent or empty pattern matches anything; otherwise the name must be
/// present and match the pattern (`*` as in `http` host patterns),
/// ignoring case.
pub fn matches(rule: &TlsProtocol, sni: Option<&str>) -> bool {
    match rule.sni.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        None => true,
        Some(pattern) => sni.is_some_and(|name| {
            let pattern = pattern.to_ascii_lowercase();
            let pattern = pattern.strip_suffix('.').unwrap_or(&pattern);
            glob_match(pattern.as_bytes(), name.to_ascii_lowercase().as_bytes())
        }),
    }
}

/// Concatenates the fragments of the first handshake message, which may
/// span several records, and returns its body (after the 4-byte header
/// has been checked).
fn reassemble_handshake(mut stream: &[u8]) -> Result<Vec<u8>, TlsError> {
    let mut message: Vec<u8> = Vec::new();
    loop {
        let Some(header) = stream.get(..5) else {
            return Err(TlsError::Incomplete);
        };
        if header[0] != CONTENT_HANDSHAKE || header[1] != 3 {
            return Err(TlsError::NotHandshake);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 {
            return Err(TlsError::Malformed);
        }
        let Some(fragment) = stream.get(5..5 + len) else {
            return Err(TlsError::Incomplete);
        };
        message.extend_from_slice(fragment);
        stream = &stream[5 + len..];
        if let [msg_type, a, b, c, ..] = message[..] {
            if msg_type != HANDSHAKE_CLIENT_HELLO {
                return Err(TlsError::NotClientHello { msg_type });
            }
            let body_len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            if body_len > MAX_CLIENT_HELLO {
                return Err(TlsError::TooLarge {
                    len: body_len,
                    max: MAX_CLIENT_HELLO,
                });
            }
            if message.len() >= 4 + body_len {
                message.truncate(4 + body_len);
                message.drain(..4);
                return Ok(message);
            }
        }
        if message.len() > MAX_CLIENT_HELLO + 4 {
            return Err(TlsError::Malformed);
        }
    }
}

/// Big-endian reader over a byte slice; every read is bounds-checked.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TlsError> {
        if n > self.bytes.len() {
            return Err(TlsError::Malformed);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, TlsError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, TlsError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a `width`-byte length prefix.
    fn vector(&mut self, width: usize) -> Result<Reader<'a>, TlsError> {
        let len = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        Ok(Reader {
            bytes: self.take(len)?,
        })
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn parse_client_hello(body: &[u8]) -> Result<Option<String>, TlsError> {
    let mut r = Reader { bytes: body };
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    let session_id = r.vector(1)?;
    if session_id.bytes.len() > 32 {
        return Err(TlsError::Malformed);
    }
    let suites = r.vector(2)?;
    if suites.bytes.is_empty() || suites.bytes.len() % 2 != 0 {
        return Err(TlsError::Malformed);
    }
    if r.vector(1)?.is_empty() {
        return Err(TlsError::Malformed);
    }
    if r.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut extensions = r.vector(2)?;
    if !r.is_empty() {
        return Err(TlsError::Malformed);
    }
    let mut seen: Vec<u16> = Vec::new();
    let mut server_name = None;
    while !extensions.is_empty() {
        let extension = extensions.u16()?;
        let data = extensions.vector(2)?;
        if seen.contains(&extension) {
            return Err(TlsError::DuplicateExtension { extension });
        }
        seen.push(extension);
        if extension == EXTENSION_SERVER_NAME {
            server_name = parse_server_name(data)?;
        }
    }
    Ok(server_name)
}

fn parse_server_name(mut data: Reader<'_>) -> Result<Option<String>, TlsError> {
    let mut list = data.vector(2)?;
    if !data.is_empty() || list.is_empty() {
        return Err(TlsError::Malformed);
    }
    let mut host = None;
    while !list.is_empty() {
        let name_type = list.u8()?;
        let name = list.vector(2)?;
        if name_type != NAME_TYPE_HOST_NAME {
            continue;
        }
        if host.is_some() {
            return Err(TlsError::Malformed);
        }
        host = Some(validate_host_name(name.bytes)?);
    }
    Ok(host)
}

/// RFC 6066: an ASCII DNS host name without a trailing dot.
fn validate_host_name(raw: &[u8]) -> Result<String, TlsError> {
    let valid = !raw.is_empty()
        && raw.len() <= 253
        && !raw.ends_with(b".")
        && raw.split(|b| *b == b'.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        });
    if !valid {
        return Err(TlsError::InvalidServerName);
    }
    Ok(String::from_utf8_lossy(raw).to_ascii_lowercase())
}

#[cfg(test)]
mod tests;
