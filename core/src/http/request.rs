//! Per-flow HTTP/1.x request tracking: reassembles each request head within
//! a bound, parses it with httparse, checks it for framing ambiguities (more
//! of them under [`FramingPolicy::Strict`]), and skips the body so the next
//! head on the connection is found.

use std::sync::Arc;

use super::chunked::{ChunkedBody, Progress};
use super::error::{Ambiguity, Malformed};
use super::path::normalize_target;

/// Default bound on one request head (request line and headers).
pub const DEFAULT_MAX_HEAD: usize = 16 * 1024;

/// Head buffers up to this capacity are kept for the next request.
const SMALL_HEAD: usize = 2048;

/// Most header fields accepted in one head.
pub const MAX_HEADERS: usize = 100;

/// What a rule is matched against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// As sent (methods are case-sensitive tokens).
    pub method: String,
    /// Lower-case host from the Host header or an absolute-form target,
    /// without port or IPv6 brackets; `None` when the request names none.
    pub host: Option<String>,
    /// Port given with the host, if any.
    pub port: Option<u16>,
    /// Normalized path plus the query string as sent (see `path.rs`); `*`
    /// for `OPTIONS *`, empty for a CONNECT target.
    pub path: String,
}

/// Methods whose body strict framing refuses unless allowed: servers
/// commonly ignore it and read it as the next request.
pub const BODYLESS_METHODS: [&str; 4] = ["GET", "HEAD", "DELETE", "TRACE"];

/// Which framing shapes a tracker refuses beyond the always-refused ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FramingPolicy {
    /// Only what is ambiguous to tollgate itself ([`Malformed`]).
    Lenient,
    /// Also what backends commonly frame differently ([`Ambiguity`]):
    /// bodies on [`BODYLESS_METHODS`] except `bodies_allowed`, obsolete line
    /// folding, bare CR or LF, duplicate or conflicting framing fields.
    #[default]
    Strict,
    /// Strict, with bodies allowed on these methods (case-sensitive tokens).
    StrictAllowingBodies(Arc<[String]>),
}

impl FramingPolicy {
    fn strict(&self) -> bool {
        !matches!(self, FramingPolicy::Lenient)
    }

    /// Whether a body on `method` is refused.
    fn refuses_body(&self, method: &str) -> bool {
        let allowed = match self {
            FramingPolicy::Lenient => return false,
            FramingPolicy::Strict => &[][..],
            FramingPolicy::StrictAllowingBodies(methods) => &methods[..],
        };
        BODYLESS_METHODS.contains(&method) && !allowed.iter().any(|m| m == method)
    }
}

/// What a stretch of client bytes turned out to be. After anything but
/// `Request` the tracker ignores the rest of the flow: the connection
/// must be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpEvent {
    Request(RequestHead),
    Malformed(Malformed),
    /// The head did not end within the bound.
    Oversized,
    /// The request line is not HTTP/1.x.
    NotHttp,
    /// Refused by strict framing; the head, when it could be read.
    Ambiguous {
        request: Option<RequestHead>,
        why: Ambiguity,
    },
}

#[derive(Clone, Debug)]
enum State {
    /// Looking for a request head; `buf` holds a partial one.
    Head,
    /// Skipping a Content-Length body.
    Body {
        remaining: u64,
    },
    Chunked(ChunkedBody),
    /// An event other than `Request` was reported; input is ignored.
    Failed,
}

/// Tracks one client→server HTTP/1.x stream. Feed payload bytes in
/// stream order; the same events come out however the stream is split.
/// Per-flow memory is at most `max_head` bytes plus a few words.
#[derive(Clone, Debug)]
pub struct RequestTracker {
    max_head: usize,
    framing: FramingPolicy,
    buf: Vec<u8>,
    state: State,
}

impl Default for RequestTracker {
    fn default() -> Self {
        RequestTracker::new(DEFAULT_MAX_HEAD)
    }
}

/// How the body after a head is delimited.
enum Framing {
    None,
    Length(u64),
    Chunked,
}

enum HeadParse {
    Partial,
    Complete {
        len: usize,
        head: RequestHead,
        framing: Framing,
    },
    Failed(HttpEvent),
}

impl RequestTracker {
    /// A lenient tracker ([`FramingPolicy::Lenient`]).
    pub fn new(max_head: usize) -> RequestTracker {
        RequestTracker::with_framing(max_head, FramingPolicy::Lenient)
    }

    pub fn with_framing(max_head: usize, framing: FramingPolicy) -> RequestTracker {
        RequestTracker {
            max_head,
            framing,
            buf: Vec::new(),
            state: State::Head,
        }
    }

    /// Bytes held for a partial head.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of a Content-Length body still to come, when the stream is in
    /// one: bytes whose content cannot change how the stream is framed.
    pub fn body_remaining(&self) -> Option<u64> {
        match self.state {
            State::Body { remaining } => Some(remaining),
            _ => None,
        }
    }

    /// Whether an event other than `Request` has ended inspection.
    pub fn has_failed(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    /// Consumes the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<HttpEvent> {
        let mut events = Vec::new();
        while !bytes.is_empty() {
            match &mut self.state {
                State::Failed => break,
                State::Body { remaining } => {
                    let take = (*remaining).min(bytes.len() as u64);
                    *remaining -= take;
                    // `take` ≤ the slice length, so it fits in usize.
                    bytes = &bytes[take as usize..];
                    if *remaining == 0 {
                        self.state = State::Head;
                    }
                }
                State::Chunked(body) => match body.feed(bytes, self.max_head) {
                    Ok(Progress::NeedMore) => bytes = &[],
                    Ok(Progress::Done(used)) => {
                        bytes = bytes.get(used..).unwrap_or_default();
                        self.state = State::Head;
                    }
                    Err(reason) => self.fail(&mut events, HttpEvent::Malformed(reason)),
                },
                State::Head => bytes = self.feed_head(bytes, &mut events),
            }
        }
        events
    }

    /// Head state: returns the bytes left after this step.
    fn feed_head<'a>(&mut self, bytes: &'a [u8], events: &mut Vec<HttpEvent>) -> &'a [u8] {
        let held = self.buf.len();
        let take = bytes.len().min(self.max_head - held);
        let parsed = if held == 0 {
            // Fast path: parse straight from the segment.
            parse_head(&bytes[..take], &self.framing)
        } else {
            self.buf.extend_from_slice(&bytes[..take]);
            parse_head(&self.buf, &self.framing)
        };
        match parsed {
            HeadParse::Complete { len, head, framing } => {
                // The held prefix was incomplete, so the head ends in `bytes`.
                let used = len.saturating_sub(held);
                self.release_buffer();
                events.push(HttpEvent::Request(head));
                self.state = match framing {
                    Framing::None | Framing::Length(0) => State::Head,
                    Framing::Length(n) => State::Body { remaining: n },
                    Framing::Chunked => State::Chunked(ChunkedBody::new()),
                };
                bytes.get(used..).unwrap_or_default()
            }
            HeadParse::Partial if held + take >= self.max_head => {
                self.fail(events, HttpEvent::Oversized);
                &[]
            }
            HeadParse::Partial => {
                if held == 0 {
                    self.buf.extend_from_slice(&bytes[..take]);
                }
                &bytes[take..]
            }
            HeadParse::Failed(event) => {
                self.fail(events, event);
                &[]
            }
        }
    }

    fn fail(&mut self, events: &mut Vec<HttpEvent>, event: HttpEvent) {
        events.push(event);
        self.buf = Vec::new();
        self.state = State::Failed;
    }

    /// Empties the head buffer; a large one is freed, so an idle
    /// keep-alive flow does not pin up to `max_head` bytes.
    fn release_buffer(&mut self) {
        if self.buf.capacity() > SMALL_HEAD {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
    }
}

fn parse_head(bytes: &[u8], policy: &FramingPolicy) -> HeadParse {
    let mut bytes = bytes;
    if policy.strict() {
        // Refused for an anomaly unless httparse already fails on the
        // bytes before it; bytes whose meaning awaits the next one are not
        // parsed yet. So the event depends only on the bytes up to the
        // anomaly, however the stream was split.
        match line_anomaly(bytes) {
            Scan::Anomaly(at, why) => {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                return match httparse::Request::new(&mut headers).parse(&bytes[..at]) {
                    Err(err) => HeadParse::Failed(classify_error(err)),
                    Ok(_) => HeadParse::Failed(HttpEvent::Ambiguous { request: None, why }),
                };
            }
            Scan::Decided(at) => bytes = &bytes[..at],
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Partial) => return HeadParse::Partial,
        Ok(httparse::Status::Complete(len)) => len,
        Err(err) => return HeadParse::Failed(classify_error(err)),
    };
    if has_bare_lf(&bytes[..len]) {
        return HeadParse::Failed(HttpEvent::Malformed(Malformed::BareLineEnding));
    }
    match check_head(&request, policy) {
        Ok((head, _, Some(why))) => HeadParse::Failed(HttpEvent::Ambiguous {
            request: Some(head),
            why,
        }),
        Ok((head, framing, None)) => HeadParse::Complete { len, head, framing },
        Err(reason) => HeadParse::Failed(HttpEvent::Malformed(reason)),
    }
}

/// What [`line_anomaly`] found.
enum Scan {
    /// The first bare CR, bare LF or obsolete line folding, and where.
    Anomaly(usize, Ambiguity),
    /// None in the bytes before this position: the whole head (up to its
    /// empty line), or all bytes but a lone CR whose meaning depends on
    /// the byte not there yet.
    Decided(usize),
}

/// Looks for the first bare CR, bare LF or obsolete line folding in a
/// head, no further than its end (an empty line). The answer for a prefix
/// is never contradicted by a longer one.
fn line_anomaly(bytes: &[u8]) -> Scan {
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\r' => match bytes.get(i + 1) {
                None => return Scan::Decided(i),
                Some(b'\n') => {}
                Some(_) => return Scan::Anomaly(i, Ambiguity::BareCr),
            },
            b'\n' => return Scan::Anomaly(i, Ambiguity::BareLf),
            _ => {
                i += 1;
                continue;
            }
        }
        // A CRLF at `i` ends a line, which httparse may judge already (a
        // request line that is not HTTP is refused at its CRLF); what
        // starts the next line decides whether it was folded.
        let next = i + 2;
        match bytes.get(next) {
            None => return Scan::Decided(next),
            Some(b' ' | b'\t') => return Scan::Anomaly(next, Ambiguity::ObsoleteLineFolding),
            Some(b'\r') => {
                return match bytes.get(next + 1) {
                    None => Scan::Decided(next),
                    Some(b'\n') => Scan::Decided(bytes.len()),
                    Some(_) => Scan::Anomaly(next, Ambiguity::BareCr),
                }
            }
            Some(b'\n') => return Scan::Anomaly(next, Ambiguity::BareLf),
            Some(_) => i = next,
        }
    }
    Scan::Decided(bytes.len())
}

/// Maps an httparse error to an event. Only the error kind is used (not
/// the bytes after it), so the outcome does not depend on how much of the
/// stream had arrived. Obsolete line folding surfaces here as a header
/// name starting with whitespace.
fn classify_error(err: httparse::Error) -> HttpEvent {
    match err {
        httparse::Error::Token | httparse::Error::Version => HttpEvent::NotHttp,
        httparse::Error::TooManyHeaders => {
            HttpEvent::Malformed(Malformed::TooManyHeaders { max: MAX_HEADERS })
        }
        httparse::Error::HeaderName
        | httparse::Error::HeaderValue
        | httparse::Error::NewLine
        | httparse::Error::Status => HttpEvent::Malformed(Malformed::HeaderSyntax),
    }
}

fn has_bare_lf(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

/// The head, its framing, and what strict framing refuses in it.
type Checked = (RequestHead, Framing, Option<Ambiguity>);

fn check_head(
    request: &httparse::Request<'_, '_>,
    policy: &FramingPolicy,
) -> Result<Checked, Malformed> {
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err(Malformed::HeaderSyntax);
    };
    let mut host_header: Option<&[u8]> = None;
    let mut content_length: Option<u64> = None;
    let mut content_length_values = 0;
    let mut transfer_encoding = false;
    let mut transfer_encoding_fields = 0;
    let mut transfer_codings: Vec<&[u8]> = Vec::new();
    for header in request.headers.iter() {
        let value = trim(header.value);
        if header.name.eq_ignore_ascii_case("host") {
            if host_header.replace(value).is_some() {
                return Err(Malformed::DuplicateHost);
            }
        } else if header.name.eq_ignore_ascii_case("content-length") {
            for item in value.split(|b| *b == b',') {
                let n = parse_decimal(trim(item)).ok_or(Malformed::InvalidContentLength)?;
                content_length_values += 1;
                if content_length.replace(n).is_some_and(|old| old != n) {
                    return Err(Malformed::ConflictingContentLength);
                }
            }
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            transfer_encoding_fields += 1;
            transfer_codings.extend(
                value
                    .split(|b| *b == b',')
                    .map(trim)
                    .filter(|c| !c.is_empty()),
            );
        }
    }
    let strict = policy.strict();
    let mut ambiguity = None;
    if strict && content_length_values > 1 {
        ambiguity = Some(Ambiguity::DuplicateContentLength);
    }
    let framing = match (content_length, transfer_encoding) {
        (Some(_), true) if strict => {
            ambiguity = Some(Ambiguity::ContentLengthWithTransferEncoding);
            Framing::None
        }
        (Some(_), true) => return Err(Malformed::ContentLengthWithTransferEncoding),
        (Some(n), false) => Framing::Length(n),
        (None, false) => Framing::None,
        (None, true) => {
            if version == 0 {
                return Err(Malformed::TransferEncodingInHttp10);
            }
            let chunked = |c: &[u8]| c.eq_ignore_ascii_case(b"chunked");
            let last_is_chunked = transfer_codings.last().is_some_and(|c| chunked(c));
            if !last_is_chunked || transfer_codings.iter().filter(|c| chunked(c)).count() != 1 {
                return Err(Malformed::UnsupportedTransferEncoding);
            }
            if strict && (transfer_encoding_fields != 1 || transfer_codings.len() != 1) {
                ambiguity.get_or_insert(Ambiguity::TransferEncodingNotChunked);
            }
            Framing::Chunked
        }
    };
    let has_body = transfer_encoding || content_length.is_some_and(|n| n > 0);
    if ambiguity.is_none() && has_body && policy.refuses_body(method) {
        ambiguity = Some(Ambiguity::BodyOn {
            method: method.to_owned(),
        });
    }
    let header_authority = match host_header {
        Some(value) if !value.is_empty() => Some(parse_authority(value)?),
        _ => None,
    };
    let (authority, path) = parse_target(method, target)?;
    let (host, port) = match (authority, header_authority) {
        (Some(uri), Some(header)) => {
            let ports_differ = matches!((uri.1, header.1), (Some(a), Some(b)) if a != b);
            if uri.0 != header.0 || ports_differ {
                return Err(Malformed::HostMismatch);
            }
            (Some(uri.0), uri.1)
        }
        (Some((host, port)), None) | (None, Some((host, port))) => (Some(host), port),
        (None, None) => (None, None),
    };
    Ok((
        RequestHead {
            method: method.to_owned(),
            host,
            port,
            path,
        },
        framing,
        ambiguity,
    ))
}

type Authority = (String, Option<u16>);

/// Splits a request target into the authority it names (absolute and
/// authority forms) and the normalized path to match.
fn parse_target(method: &str, target: &str) -> Result<(Option<Authority>, String), Malformed> {
    if target.starts_with('/') {
        return Ok((None, normalize_target(target)?));
    }
    if target == "*" {
        return if method == "OPTIONS" {
            Ok((None, "*".to_owned()))
        } else {
            Err(Malformed::InvalidTarget)
        };
    }
    if method == "CONNECT" {
        return Ok((Some(parse_authority(target.as_bytes())?), String::new()));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(Malformed::InvalidTarget);
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(Malformed::InvalidTarget);
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let authority = parse_authority(authority.as_bytes())?;
    let path = match path.strip_prefix('?') {
        Some(_) => normalize_target(&format!("/{path}"))?,
        None if path.is_empty() => "/".to_owned(),
        None => normalize_target(path)?,
    };
    Ok((Some(authority), path))
}

/// Parses `host[:port]` or `[v6]:port` (RFC 3986 authority without
/// userinfo) into a lower-case host and optional port.
fn parse_authority(raw: &[u8]) -> Result<Authority, Malformed> {
    let (host, port) = if let Some(rest) = raw.strip_prefix(b"[") {
        let close = rest
            .iter()
            .position(|b| *b == b']')
            .ok_or(Malformed::InvalidHost)?;
        let (literal, after) = (&rest[..close], &rest[close + 1..]);
        if literal.is_empty()
            || !literal
                .iter()
                .all(|b| b.is_ascii_hexdigit() || *b == b':' || *b == b'.')
        {
            return Err(Malformed::InvalidHost);
        }
        let port = match after {
            [] => None,
            [b':', digits @ ..] => Some(digits),
            _ => return Err(Malformed::InvalidHost),
        };
        (literal, port)
    } else {
        match raw.iter().rposition(|b| *b == b':') {
            Some(i) => (&raw[..i], Some(&raw[i + 1..])),
            None => (raw, None),
        }
    };
    let reg_name_byte = |b: &u8| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
    };
    if host.is_empty() || !(raw.starts_with(b"[") || host.iter().all(reg_name_byte)) {
        return Err(Malformed::InvalidHost);
    }
    let port = match port {
        None | Some([]) => None,
        Some(digits) => Some(
            parse_decimal(digits)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or(Malformed::InvalidHost)?,
        ),
    };
    let mut host = String::from_utf8_lossy(host).into_owned();
    host.make_ascii_lowercase();
    if let Some(stripped) = host.strip_suffix('.') {
        host = stripped.to_owned();
    }
    // An empty label (`a..b`, `.a`, `a..`, `.`) has no one reading: one
    // trailing dot is the root, a second would be matched as part of the
    // name while servers refuse or trim it. Refused, not guessed.
    if host.is_empty() || host.starts_with('.') || host.ends_with('.') || host.contains("..") {
        return Err(Malformed::InvalidHost);
    }
    Ok((host, port))
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}
