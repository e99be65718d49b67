//! L7 HTTP/1.x request inspection for flows under an L7 rule:
//! [`RequestTracker`] finds every request head in a client→server byte
//! stream (reassembled within a bound, framing tracked through
//! Content-Length and chunked bodies so pipelined and keep-alive requests are
//! all seen), and [`matches()`]/[`decide`] apply the Antrea `http` rule
//! patterns. Pure: never touches sockets or packets, never buffers a body.
//! Anything ambiguous between tollgate and the server is refused, not guessed;
//! in strict framing mode ([`FramingPolicy::Strict`]) so are shapes that
//! backends commonly frame differently ([`Ambiguity`]).
//! Only HTTP/1.x is understood: HTTP/2 (prior knowledge), and the bytes
//! after a protocol upgrade (WebSocket, h2c) or a CONNECT request, are not
//! HTTP/1.x requests and are reported as such, so those flows are denied.

mod chunked;
mod error;
mod matcher;
mod path;
mod request;

pub use error::{Ambiguity, Malformed};
pub use matcher::{decide, matches, HttpMismatch, HttpRule};
pub use request::{
    FramingPolicy, HttpEvent, RequestHead, RequestTracker, BODYLESS_METHODS, DEFAULT_MAX_HEAD,
    MAX_HEADERS,
};

#[cfg(test)]
mod tests;
