//! The client the CLI uses (`tollgate status`, `tollgate get`, `tollgate
//! trace`, `tollgate observe`): one request per connection, each step
//! bounded by [`TIMEOUT`] (but the wait for the next line of an answer
//! that follows), so a stuck or stopped agent is an error, never a hang. It never
//! interprets an answer beyond the protocol (an `error` answer becomes
//! [`StatusError::Agent`]).
#![allow(clippy::disallowed_methods)] // the connect deadline reads the clock.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Request, Response, StatusError, TIMEOUT};

/// Sends one request to the agent listening on `path`, waiting at most
/// [`TIMEOUT`] for each step.
pub fn request(path: &Path, request: &Request) -> Result<Response, StatusError> {
    request_within(path, request, TIMEOUT)
}

pub(super) fn request_within(
    path: &Path,
    request: &Request,
    timeout: Duration,
) -> Result<Response, StatusError> {
    let failed = |error: std::io::Error| match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => StatusError::Timeout {
            path: path.to_path_buf(),
            after: timeout,
        },
        _ => StatusError::Io {
            path: path.to_path_buf(),
            error,
        },
    };
    let stream = connect(path, Instant::now() + timeout).map_err(failed)?;
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    stream.set_write_timeout(Some(timeout)).map_err(failed)?;
    let mut text = serde_json::to_string(request).map_err(|e| failed(std::io::Error::other(e)))?;
    text.push('\n');
    // A busy agent may answer and close before the request is written:
    // its answer is still read.
    let written = (&stream).write_all(text.as_bytes());
    let mut answer = String::new();
    let read = BufReader::new(&stream).read_line(&mut answer);
    if answer.is_empty() {
        return Err(match read.err().or(written.err()) {
            Some(e) if !matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                failed(e)
            }
            _ => StatusError::Closed {
                path: path.to_path_buf(),
            },
        });
    }
    match serde_json::from_str::<Response>(answer.trim()) {
        Ok(Response::Error(message)) => Err(StatusError::Agent(message)),
        Ok(response) => Ok(response),
        Err(_) => Err(StatusError::Protocol {
            path: path.to_path_buf(),
            answer,
        }),
    }
}

/// Sends a request whose answer is several lines (`observe`) and hands
/// each to `each` as it comes, until the agent closes or `each` fails (the
/// caller's output closed: not an error). With `follow` the answer has no
/// end and the agent may be silent for long: lines are waited for without
/// a deadline; connecting and sending still have [`TIMEOUT`].
pub fn stream(
    path: &Path,
    request: &Request,
    follow: bool,
    mut each: impl FnMut(Response) -> std::io::Result<()>,
) -> Result<(), StatusError> {
    let failed = |error: std::io::Error| match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => StatusError::Timeout {
            path: path.to_path_buf(),
            after: TIMEOUT,
        },
        _ => StatusError::Io {
            path: path.to_path_buf(),
            error,
        },
    };
    let stream = connect(path, Instant::now() + TIMEOUT).map_err(failed)?;
    let wait = (!follow).then_some(TIMEOUT);
    stream.set_read_timeout(wait).map_err(failed)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(failed)?;
    let mut text = serde_json::to_string(request).map_err(|e| failed(std::io::Error::other(e)))?;
    text.push('\n');
    (&stream).write_all(text.as_bytes()).map_err(failed)?;
    for line in BufReader::new(&stream).lines() {
        let line = line.map_err(failed)?;
        match serde_json::from_str::<Response>(line.trim()) {
            Ok(Response::Error(message)) => return Err(StatusError::Agent(message)),
            Ok(response) => {
                if each(response).is_err() {
                    return Ok(());
                }
            }
            Err(_) => {
                return Err(StatusError::Protocol {
                    path: path.to_path_buf(),
                    answer: line,
                })
            }
        }
    }
    Ok(())
}

/// Connects by `deadline`: a listener whose queue is full (an agent that
/// stopped accepting) is a timeout, not a hang.
fn connect(path: &Path, deadline: Instant) -> std::io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let address = SockAddr::unix(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    loop {
        match socket.connect(&address) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    socket.set_nonblocking(false)?;
    Ok(UnixStream::from(socket))
}
