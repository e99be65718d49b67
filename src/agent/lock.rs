//! One agent per network namespace: [`NamespaceLock`] binds the abstract
//! unix socket `@tollgate-agent`. Abstract sockets live in the network
//! namespace (not the file system), so the lock covers exactly the kernel
//! state tollgate owns, whatever the queue numbers, and the kernel
//! releases it when the process dies (no stale lock file after `kill -9`).
//! The holder answers every connection with its pid, so a second agent or
//! `tollgate cleanup` can name it. It never touches netfilter.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

/// The abstract name (`@tollgate-agent` in `ss -xl`).
pub const LOCK_NAME: &[u8] = b"tollgate-agent";

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another tollgate agent{} runs in this network namespace (it holds the abstract socket @tollgate-agent); stop it first: one agent per network namespace", holder(.pid))]
    Held { pid: Option<u32> },
    #[error("taking the agent lock (abstract socket @tollgate-agent): {0}")]
    Io(std::io::Error),
}

fn holder(pid: &Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

/// Held while it lives; dropping it (or the process ending) frees it.
pub struct NamespaceLock {
    _listener: UnixListener,
}

impl NamespaceLock {
    /// Takes the lock of the current network namespace, or says who holds
    /// it.
    pub fn acquire() -> Result<NamespaceLock, LockError> {
        let address = SocketAddr::from_abstract_name(LOCK_NAME).map_err(LockError::Io)?;
        match UnixListener::bind_addr(&address) {
            Ok(listener) => {
                let answering = listener.try_clone().map_err(LockError::Io)?;
                std::thread::Builder::new()
                    .name("agent-lock".into())
                    .spawn(move || answer(&answering))
                    .map_err(LockError::Io)?;
                Ok(NamespaceLock {
                    _listener: listener,
                })
            }
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => Err(LockError::Held {
                pid: holder_pid(&address),
            }),
            Err(error) => Err(LockError::Io(error)),
        }
    }
}

/// Tells everyone who connects the holder's pid.
fn answer(listener: &UnixListener) {
    let pid = std::process::id().to_string();
    for mut stream in listener.incoming().flatten() {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = stream.write_all(pid.as_bytes());
    }
}

/// The pid the holder answers with, if it answers within a second.
fn holder_pid(address: &SocketAddr) -> Option<u32> {
    let stream = UnixStream::connect_addr(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut text = String::new();
    stream.take(16).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_error_names_the_holder() {
        let held = LockError::Held { pid: Some(42) };
        assert!(held
            .to_string()
            .starts_with("another tollgate agent (pid 42) runs"));
        let unknown = LockError::Held { pid: None }.to_string();
        assert!(unknown.starts_with("another tollgate agent runs in this network namespace"));
    }
}
