//! The status server: binds the socket (mode 0600 in a 0700 directory,
//! so only root reaches it) and answers one request per connection.
//!
//! Clients are served concurrently, a thread each, at most
//! [`MAX_CLIENTS`] at once: one more is answered `busy` at once and
//! closed, so idle or slow clients can hold neither the socket nor a
//! probe. A client has [`REQUEST_TIMEOUT`] to send its request line (at
//! most 4096 bytes) and [`TIMEOUT`] to take the whole answer (an
//! `observe` answer: each line; at most
//! [`crate::workers::observe::MAX_FOLLOWERS`] clients follow at once).
//! Each request is logged at `debug`.
//!
//! It only moves bytes: what to answer is [`AgentStatus::answer`]'s. It
//! never holds state of its own beyond the clients being served, and never
//! touches the packet path.
#![allow(clippy::disallowed_methods)] // the request and answer deadlines read the clock.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::answer::write_answer;
use super::{AgentStatus, Request, Response, StatusError, TIMEOUT};

/// How long a client has to send its whole request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Clients served at once; one more is refused at once.
pub const MAX_CLIENTS: usize = 16;
/// Longest request line read.
pub(super) const MAX_REQUEST: usize = 4096;

/// The listening socket; removes its file when dropped.
pub struct StatusServer {
    path: PathBuf,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `path` (creating its directory with mode 0700 when missing; a
/// stale socket left by a killed agent is replaced, a live one is an
/// error) with mode 0600, and serves on a thread until the process exits.
pub fn serve(path: &Path, status: Arc<AgentStatus>) -> Result<StatusServer, StatusError> {
    let io = |error| StatusError::Io {
        path: path.to_path_buf(),
        error,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(StatusError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = bind_private(path).map_err(io)?;
    let server = StatusServer {
        path: path.to_path_buf(),
    };
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || accept(&listener, &status))
        .map_err(io)?;
    Ok(server)
}

/// Hands each client to a thread of its own while fewer than
/// [`MAX_CLIENTS`] are served; refuses the others at once.
fn accept(listener: &UnixListener, status: &Arc<AgentStatus>) {
    let serving = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                // Out of descriptors, most likely: let some clients end.
                tracing::warn!(%error, "status socket: accept failed");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Some(slot) = Slot::take(&serving) else {
            refuse(stream);
            continue;
        };
        let status = Arc::clone(status);
        let spawned = std::thread::Builder::new()
            .name("status-client".into())
            .spawn(move || {
                let _slot = slot;
                if let Err(error) = answer(stream, &status) {
                    tracing::debug!(%error, "status client");
                }
            });
        if let Err(error) = spawned {
            // The closure, its slot and its stream are dropped.
            tracing::warn!(%error, "status socket: cannot start a client thread");
        }
    }
}

/// One of the [`MAX_CLIENTS`] places; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(serving: &Arc<AtomicUsize>) -> Option<Slot> {
        serving
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_CLIENTS).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(serving)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a client over [`MAX_CLIENTS`] `busy` without waiting for it.
fn refuse(stream: UnixStream) {
    let busy = Response::Error(format!(
        "busy: {MAX_CLIENTS} status clients are being served; try again"
    ));
    let Ok(mut text) = serde_json::to_string(&busy) else {
        return;
    };
    text.push('\n');
    // Whatever request already came is read first, so that closing does
    // not turn the answer into a reset.
    if stream.set_nonblocking(true).is_ok() {
        let mut request = [0; MAX_REQUEST];
        let _ = (&stream).read(&mut request);
    }
    let _ = (&stream).write_all(text.as_bytes());
}

/// Binds `path` with mode 0600 from the first moment anyone else could
/// reach it, without touching the process-wide umask: the socket is bound
/// in a fresh 0700 directory beside `path`, given mode 0600 there, then
/// renamed into place.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let staging = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let staged = staging.join("s");
    let create = || std::fs::DirBuilder::new().mode(0o700).create(&staging);
    if let Err(error) = create() {
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(error);
        }
        // Left by an agent with our process id that died while binding
        // (in a container, every agent is process 1).
        let _ = std::fs::remove_file(&staged);
        std::fs::remove_dir(&staging)?;
        create()?;
    }
    let bound = UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
}

fn answer(stream: UnixStream, status: &AgentStatus) -> std::io::Result<()> {
    let line = read_request(&stream, Instant::now() + REQUEST_TIMEOUT)?;
    let request = serde_json::from_slice::<Request>(line.trim_ascii());
    if let Ok(request) = &request {
        tracing::debug!(request = request.name(), "status request");
    }
    let response = match request {
        Ok(Request::Observe {
            filter,
            follow,
            last,
        }) => return super::observe::answer(&stream, status, &filter, follow, last),
        Ok(request) => status.answer(&request),
        Err(error) => Response::Error(format!("bad request: {error}")),
    };
    let mut text = serde_json::to_string(&response).map_err(std::io::Error::other)?;
    text.push('\n');
    write_answer(&stream, text.as_bytes(), Instant::now() + TIMEOUT)
}

/// The request line, read by `deadline`: at most [`MAX_REQUEST`] bytes up
/// to a newline or the end of the stream.
fn read_request(stream: &UnixStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut chunk = [0; 512];
    while !line.contains(&b'\n') && line.len() < MAX_REQUEST {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let want = chunk.len().min(MAX_REQUEST - line.len());
        match (&*stream).read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(end) = line.iter().position(|b| *b == b'\n') {
        line.truncate(end);
    }
    Ok(line)
}
