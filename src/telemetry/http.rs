//! The metrics endpoint: a small blocking HTTP/1.1 listener on its own
//! thread that answers `GET /metrics` with [`Metrics::render`] and closes
//! the connection. It reads at most one bounded request head per
//! connection with a timeout, so a slow or hostile client cannot hold it
//! for long; it never touches the packet path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::Metrics;

/// Longest request head read.
const MAX_HEAD: usize = 8192;
/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics listener on {address}: {error}")]
pub struct ListenError {
    pub address: SocketAddr,
    pub error: std::io::Error,
}

/// Binds `address` (errors are returned before any thread runs) and serves
/// until the process exits. Returns the bound address (port 0 picks one).
pub fn serve(address: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, ListenError> {
    let error = |error| ListenError { address, error };
    let listener = TcpListener::bind(address).map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &metrics) {
                            tracing::debug!(error = %e, "metrics client");
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "metrics accept"),
                }
            }
        })
        .map_err(error)?;
    Ok(bound)
}

fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let (status, content_type, body) = route(&head, metrics);
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// The answer to a request head: status line, content type, body.
fn route(head: &[u8], metrics: &Metrics) -> (&'static str, &'static str, String) {
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
            metrics.render(),
        ),
        (Some(b"GET"), _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let m = Metrics::new();
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n", &m).0, "200 OK");
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", &m).0, "200 OK");
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n", &m).0, "404 Not Found");
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n", &m).0,
            "405 Method Not Allowed"
        );
        assert_eq!(route(b"", &m).0, "405 Method Not Allowed");
    }

    #[test]
    fn serves_over_tcp() {
        let m = Arc::new(Metrics::new());
        m.ruleset_applied(3, 2, 5);
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&m)).unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("\ntollgate_ruleset_generation 3\n"), "{text}");
    }
}
