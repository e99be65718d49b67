//! [`Malformed`]: why a request was refused as malformed or ambiguous.
//! Shared by the head parser ([`super::request`]), the chunked-body
//! follower ([`super::chunked`]) and the path normaliser ([`super::path`]),
//! so none of them imports another for it. [`Ambiguity`]: the shapes
//! strict framing refuses on top, each with the reason the 403 and the
//! audit log print.

/// Why a request was refused as malformed or ambiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("line ending without CR")]
    BareLineEnding,
    #[error("invalid request line or header syntax (includes obsolete line folding)")]
    HeaderSyntax,
    #[error("more than {max} header fields")]
    TooManyHeaders { max: usize },
    #[error("both Content-Length and Transfer-Encoding")]
    ContentLengthWithTransferEncoding,
    #[error("Content-Length values differ")]
    ConflictingContentLength,
    #[error("Content-Length is not a decimal number")]
    InvalidContentLength,
    #[error("Transfer-Encoding does not end in chunked")]
    UnsupportedTransferEncoding,
    #[error("Transfer-Encoding in an HTTP/1.0 request")]
    TransferEncodingInHttp10,
    #[error("more than one Host header")]
    DuplicateHost,
    #[error("invalid host")]
    InvalidHost,
    #[error("absolute-form target names another host than the Host header")]
    HostMismatch,
    #[error("invalid request target")]
    InvalidTarget,
    #[error("invalid percent-encoding in the path")]
    InvalidPercentEncoding,
    #[error("path with an encoded separator, backslash, NUL or fragment")]
    AmbiguousPath,
    #[error("invalid chunk size")]
    ChunkSize,
    #[error("invalid chunked framing")]
    ChunkSyntax,
    #[error("chunked trailer section over the head bound")]
    TrailerTooLarge,
}

/// A request shape backends commonly frame differently: refused in strict
/// framing mode, with this text as the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguity {
    /// Non-zero Content-Length or any Transfer-Encoding on a method whose
    /// body servers often ignore (and then read as the next request).
    #[error("strict framing: body on {method}")]
    BodyOn { method: String },
    #[error("strict framing: obsolete line folding")]
    ObsoleteLineFolding,
    #[error("strict framing: bare CR")]
    BareCr,
    #[error("strict framing: bare LF")]
    BareLf,
    /// Two Content-Length fields, or a list, even of equal values.
    #[error("strict framing: duplicate Content-Length")]
    DuplicateContentLength,
    #[error("strict framing: Content-Length with Transfer-Encoding")]
    ContentLengthWithTransferEncoding,
    /// Anything but one Transfer-Encoding field whose value is `chunked`.
    #[error("strict framing: Transfer-Encoding other than chunked")]
    TransferEncodingNotChunked,
}
