//! HTTP client byte streams → request decisions: `tollgate_core::http`
//! `RequestTracker` fed in arbitrary segments, the Antrea `http` rule
//! matcher on every request it finds, and the TLS ClientHello reader on
//! the same stream.
//!
//! Input: 8 control bytes (they seed the segmentation), then the client
//! byte stream (the seed corpus holds requests recorded from curl and
//! hand-made ambiguous ones: pipelined, chunked, CL+TE, obs-fold, bare LF,
//! absolute-form, and a real ClientHello).
//!
//! Invariants:
//! - split invariance: the events of the stream fed in any segmentation
//!   are the events of the stream fed at once, lenient and under strict
//!   framing; the head buffer stays within its bound;
//! - a refusal (malformed, oversized, not HTTP) is the last event: nothing
//!   on the flow is inspected after it;
//! - a request's path is normalized (origin form, no empty, `.` or `..`
//!   segment) and its host lower-case, so a rule written from the request
//!   itself matches it, an empty rule matches anything, a rule naming
//!   another method does not, and `decide` is the disjunction of `matches`;
//! - the ClientHello reader gives every prefix of the stream either
//!   "incomplete" or the answer of the whole stream.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tollgate_core::http::{decide, matches, FramingPolicy, HttpEvent, RequestHead, RequestTracker};
use tollgate_core::model::HttpProtocol;
use tollgate_core::tls::{client_hello_sni, TlsError};

const CONTROL: usize = 8;
const MAX_HEAD: usize = 1024;

#[derive(Arbitrary, Debug)]
struct Rule {
    host: Option<String>,
    method: Option<String>,
    path: Option<String>,
}

fuzz_target!(|data: &[u8]| {
    if data.len() < CONTROL {
        return;
    }
    let (control, stream) = data.split_at(CONTROL);
    let mut rng = Rng::new(control);
    let cuts = cuts(stream.len(), &mut rng);

    let mut whole = RequestTracker::new(MAX_HEAD);
    let events = whole.feed(stream);
    let mut split = RequestTracker::new(MAX_HEAD);
    let mut split_events = Vec::new();
    let mut at = 0;
    for &cut in &cuts {
        split_events.extend(split.feed(&stream[at..cut]));
        assert!(split.buffered() <= MAX_HEAD);
        at = cut;
    }
    assert_eq!(
        split_events, events,
        "segmentation changed the request events"
    );
    assert_eq!(split.has_failed(), whole.has_failed());
    let strict = || RequestTracker::with_framing(MAX_HEAD, FramingPolicy::Strict);
    let strict_events = strict().feed(stream);
    let mut strict_split = strict();
    let mut at = 0;
    let mut strict_split_events = Vec::new();
    for &cut in &cuts {
        strict_split_events.extend(strict_split.feed(&stream[at..cut]));
        at = cut;
    }
    assert_eq!(
        strict_split_events, strict_events,
        "segmentation changed the strict framing events"
    );
    // Strict framing only refuses more: its requests are a prefix of the
    // lenient ones.
    let strict_requests = strict_events
        .iter()
        .take_while(|e| matches!(e, HttpEvent::Request(_)))
        .count();
    assert_eq!(strict_events[..strict_requests], events[..strict_requests]);
    if let Some(i) = events
        .iter()
        .position(|e| !matches!(e, HttpEvent::Request(_)))
    {
        assert_eq!(i + 1, events.len(), "events after a refusal: {events:?}");
        assert!(whole.has_failed());
        assert!(whole.feed(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").is_empty());
    }

    let extra: Vec<HttpProtocol> = Vec::<Rule>::arbitrary(&mut Unstructured::new(stream))
        .unwrap_or_default()
        .into_iter()
        .take(4)
        .map(|r| HttpProtocol {
            host: r.host,
            method: r.method,
            path: r.path,
        })
        .collect();
    for event in &events {
        if let HttpEvent::Request(head) = event {
            request(head, &extra);
        }
    }

    let full = client_hello_sni(stream);
    for &cut in cuts.iter().take(24) {
        let prefix = client_hello_sni(&stream[..cut]);
        assert!(
            prefix == Err(TlsError::Incomplete) || prefix == full,
            "{cut}-byte prefix gives {prefix:?}, the {}-byte stream {full:?}",
            stream.len()
        );
    }
});

fn request(head: &RequestHead, extra: &[HttpProtocol]) {
    let path = head.path.split('?').next().unwrap_or_default();
    let special = (head.method == "OPTIONS" && head.path == "*")
        || (head.method == "CONNECT" && head.path.is_empty());
    if !special {
        assert!(path.starts_with('/'), "path not in origin form: {head:?}");
        let segments: Vec<&str> = path[1..].split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            assert!(
                *segment != "." && *segment != "..",
                "dot segment left: {head:?}"
            );
            assert!(
                !segment.is_empty() || i + 1 == segments.len(),
                "empty segment: {head:?}"
            );
        }
        assert!(
            !head.path.contains('#') && !path.contains('\\'),
            "ambiguous path: {head:?}"
        );
    }
    if let Some(host) = &head.host {
        assert_eq!(
            *host,
            host.to_ascii_lowercase(),
            "host not lower-case: {head:?}"
        );
    }

    let host = head.host.as_ref().map(|h| {
        let h = if h.contains(':') {
            format!("[{h}]")
        } else {
            h.clone()
        };
        match head.port {
            Some(port) => format!("{h}:{port}"),
            None => h,
        }
    });
    let own = HttpProtocol {
        host,
        method: Some(head.method.clone()),
        path: Some(head.path.clone()),
    };
    assert!(
        matches(&own, head),
        "a rule written from the request does not match it: {own:?} {head:?}"
    );
    let any = HttpProtocol {
        host: None,
        method: None,
        path: None,
    };
    assert!(matches(&any, head));
    let other = HttpProtocol {
        method: Some(format!("X{}", head.method)),
        ..any.clone()
    };
    assert!(!matches(&other, head));
    assert!(!decide(&[], head));
    assert_eq!(decide(extra, head), extra.iter().any(|r| matches(r, head)));
    let mut with_own = extra.to_vec();
    with_own.push(own);
    assert!(decide(&with_own, head));
}

/// Cut points of the stream, ascending, ending at its length.
fn cuts(len: usize, rng: &mut Rng) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        let size = match rng.next() % 3 {
            0 => 1,
            1 => 1 + rng.next() % 16,
            _ => 1 + rng.next() % 700,
        };
        at = (at + size as usize).min(len);
        out.push(at);
    }
    out
}

/// xorshift32 seeded by the control bytes.
struct Rng(u32);

impl Rng {
    fn new(control: &[u8]) -> Rng {
        let seed = control
            .iter()
            .fold(0x9e37_79b9u32, |h, b| h.rotate_left(5) ^ u32::from(*b));
        Rng(seed | 1)
    }

    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}
