//! The metrics endpoint: a small blocking HTTP/1.1 listener that answers
//! `GET /metrics` with [`Metrics::render`], and `GET /livez` and `GET
//! /readyz` with 200 or 503 and the reason ([`Probes`]), then closes the
//! connection. Each client gets a thread of its own (at most
//! [`MAX_CLIENTS`] at once) and [`CLIENT_DEADLINE`] for the whole
//! exchange, so idle or slow clients cannot hold the probes; it reads at
//! most one bounded request head and never touches the packet path.
#![allow(clippy::disallowed_methods)] // the listener bounds each client's time with the clock.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Check, Metrics, Probes};

/// Longest request head read.
const MAX_HEAD: usize = 8192;
/// How long a client may take, in all, to send its request and read the
/// answer.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(5);
/// Clients served at once; a connection beyond them is closed unanswered.
pub const MAX_CLIENTS: usize = 32;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics listener on {address}: {error}")]
pub struct ListenError {
    pub address: SocketAddr,
    pub error: std::io::Error,
}

/// What the endpoint answers from.
#[derive(Clone)]
struct Answers {
    metrics: Arc<Metrics>,
    probes: Arc<dyn Probes>,
}

/// Binds `address` (errors are returned before any thread runs) and serves
/// until the process exits. Returns the bound address (port 0 picks one).
pub fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    probes: Arc<dyn Probes>,
) -> Result<SocketAddr, ListenError> {
    let error = |error| ListenError { address, error };
    let listener = TcpListener::bind(address).map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    let answers = Answers { metrics, probes };
    let clients = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => admit(stream, &answers, &clients),
                    Err(e) => tracing::debug!(error = %e, "metrics accept"),
                }
            }
        })
        .map_err(error)?;
    Ok(bound)
}

/// Answers `stream` on a thread of its own, unless [`MAX_CLIENTS`] are
/// being served already.
fn admit(stream: TcpStream, answers: &Answers, clients: &Arc<AtomicUsize>) {
    if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
        clients.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!("metrics client refused: too many at once");
        return;
    }
    let (answers, done) = (answers.clone(), Arc::clone(clients));
    let spawned = std::thread::Builder::new()
        .name("metrics-client".into())
        .spawn(move || {
            if let Err(e) = answer(stream, &answers) {
                tracing::debug!(error = %e, "metrics client");
            }
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        clients.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!(error = %e, "metrics client thread");
    }
}

fn answer(mut stream: TcpStream, answers: &Answers) -> std::io::Result<()> {
    let deadline = Instant::now() + CLIENT_DEADLINE;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))
    };
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        stream.set_read_timeout(Some(left()?))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let (status, content_type, body) = route(&head, answers);
    let mut text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    text.extend_from_slice(body.as_bytes());
    for chunk in text.chunks(64 * 1024) {
        stream.set_write_timeout(Some(left()?))?;
        stream.write_all(chunk)?;
    }
    stream.flush()
}

/// The answer to a request head: status line, content type, body.
fn route(head: &[u8], answers: &Answers) -> (&'static str, &'static str, String) {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next(), parts.next());
    let path = target.map(|t| t.split(|&b| b == b'?').next().unwrap_or(t));
    match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            answers.metrics.render(),
        ),
        (Some(b"GET"), Some(b"/livez")) => probe(answers, Check::Live),
        (Some(b"GET"), Some(b"/readyz")) => probe(answers, Check::Ready),
        (Some(b"GET"), _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics, /livez, /readyz\n".into(),
        ),
    }
}

/// `200 ok` or `503` with the reason, one line.
fn probe(answers: &Answers, check: Check) -> (&'static str, &'static str, String) {
    match answers.probes.check(check) {
        Ok(()) => ("200 OK", "text/plain", "ok\n".into()),
        Err(why) => ("503 Service Unavailable", "text/plain", format!("{why}\n")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Probes answering what the test sets.
    #[derive(Default)]
    struct Fixed(Mutex<(Option<String>, Option<String>)>);

    impl Probes for Fixed {
        fn check(&self, check: Check) -> Result<(), String> {
            let state = self.0.lock().unwrap();
            let why = match check {
                Check::Live => &state.0,
                Check::Ready => &state.1,
            };
            why.clone().map_or(Ok(()), Err)
        }
    }

    fn answers() -> (Answers, Arc<Fixed>) {
        let probes = Arc::new(Fixed::default());
        let answers = Answers {
            metrics: Arc::new(Metrics::new()),
            probes: Arc::clone(&probes) as _,
        };
        (answers, probes)
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn routes() {
        let (a, probes) = answers();
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n", &a).0, "200 OK");
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", &a).0, "200 OK");
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n", &a).0, "404 Not Found");
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n", &a).0,
            "405 Method Not Allowed"
        );
        assert_eq!(route(b"", &a).0, "405 Method Not Allowed");
        assert_eq!(route(b"GET /livez HTTP/1.1\r\n\r\n", &a).0, "200 OK");
        probes.0.lock().unwrap().1 = Some("no complete snapshot yet".into());
        let ready = route(b"GET /readyz HTTP/1.1\r\n\r\n", &a);
        assert_eq!(ready.0, "503 Service Unavailable");
        assert_eq!(ready.2, "no complete snapshot yet\n");
        assert_eq!(route(b"GET /livez HTTP/1.1\r\n\r\n", &a).0, "200 OK");
    }

    #[test]
    fn serves_over_tcp() {
        let (a, probes) = answers();
        let sets = crate::agent::Sets::registered(&a.metrics);
        sets.agent.ruleset_applied(
            3,
            &crate::compile::compile(&Default::default(), &Default::default()),
        );
        let addr = serve("127.0.0.1:0".parse().unwrap(), a.metrics, a.probes).unwrap();
        let text = get(addr, "/metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("\ntollgate_ruleset_generation 3\n"), "{text}");
        probes.0.lock().unwrap().0 = Some("queue 100: panicked".into());
        let text = get(addr, "/livez");
        assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
        assert!(text.ends_with("\r\n\r\nqueue 100: panicked\n"), "{text}");
    }

    #[test]
    fn idle_clients_do_not_hold_the_probes() {
        let (a, _) = answers();
        let addr = serve("127.0.0.1:0".parse().unwrap(), a.metrics, a.probes).unwrap();
        let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let started = Instant::now();
        assert!(get(addr, "/livez").starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(
            started.elapsed() < CLIENT_DEADLINE,
            "answered while idle clients wait"
        );
        // The idle ones are closed at their deadline.
        for mut s in idle {
            let mut rest = Vec::new();
            s.set_read_timeout(Some(CLIENT_DEADLINE * 3)).unwrap();
            assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0);
        }
    }
}
