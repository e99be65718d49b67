//! One agent per network namespace: [`NamespaceLock`] binds the abstract
//! unix socket `@tollgate-agent`. Abstract sockets live in the network
//! namespace (not the file system), so the lock covers exactly the kernel
//! state tollgate owns, whatever the queue numbers, and the kernel
//! releases it when the process dies (no stale lock file after `kill -9`).
//! The holder answers every connection with its pid, so a second agent or
//! `tollgate cleanup` can name it, and keeps the last few connections open
//! until it dies: `tollgate cleanup --wait` ([`NamespaceLock::acquire_waiting`])
//! blocks on one and wakes the moment the kernel closes it. It never
//! touches netfilter.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
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

    /// Takes the lock, waiting for the holder to end first if there is
    /// one: `waiting` is told the holder's pid once. The wait is not a
    /// poll: it blocks on a connection the holder keeps open, which the
    /// kernel closes when the holder's process ends (`kill -9` too).
    pub fn acquire_waiting(
        mut waiting: impl FnMut(Option<u32>),
    ) -> Result<NamespaceLock, LockError> {
        let address = SocketAddr::from_abstract_name(LOCK_NAME).map_err(LockError::Io)?;
        let mut told = false;
        loop {
            match NamespaceLock::acquire() {
                Err(LockError::Held { pid }) => {
                    if !told {
                        waiting(pid);
                        told = true;
                    }
                    if !wait_closed(&address) {
                        // Between the holder's end and the kernel freeing
                        // the name: the next bind succeeds within moments.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                other => return other,
            }
        }
    }
}

/// Connections the holder keeps open for waiters; beyond this the oldest
/// is closed (its waiter finds the lock still held and waits again), so
/// no local process can make the agent hold an unbounded number of
/// descriptors.
const WAITERS: usize = 8;

/// Tells everyone who connects the holder's pid (one line) and keeps the
/// connection open.
fn answer(listener: &UnixListener) {
    let pid = format!("{}\n", std::process::id());
    let mut open = VecDeque::with_capacity(WAITERS);
    for mut stream in listener.incoming().flatten() {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        if stream.write_all(pid.as_bytes()).is_ok() {
            if open.len() == WAITERS {
                open.pop_front();
            }
            open.push_back(stream);
        }
    }
}

/// The pid the holder answers with, if it answers within a second.
fn holder_pid(address: &SocketAddr) -> Option<u32> {
    let stream = UnixStream::connect_addr(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut line = String::new();
    BufReader::new(stream.take(16)).read_line(&mut line).ok()?;
    line.trim().parse().ok()
}

/// Blocks until the holder closes the connection (its process ended, or
/// it let go of this waiter). False when there was no one to connect to.
fn wait_closed(address: &SocketAddr) -> bool {
    let Ok(mut stream) = UnixStream::connect_addr(address) else {
        return false;
    };
    let mut sink = [0u8; 64];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waiter's side of the protocol against a holder thread on a
    /// private abstract name (the real name is per network namespace, and
    /// the unit tests share one): the pid line is read while the
    /// connection stays open, and the wait ends when the holder closes it.
    #[test]
    fn a_waiter_wakes_when_the_holder_closes_and_reads_its_pid() {
        let name = format!("tollgate-lock-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&address).unwrap();
        let answering = listener.try_clone().unwrap();
        let holder = std::thread::spawn(move || {
            // Answers two connections, then "dies": drops both.
            let pid = format!("{}\n", std::process::id());
            let mut kept = Vec::new();
            for mut stream in answering.incoming().flatten().take(2) {
                stream.write_all(pid.as_bytes()).unwrap();
                kept.push(stream);
            }
            std::thread::sleep(Duration::from_millis(50));
        });
        assert_eq!(holder_pid(&address), Some(std::process::id()));
        let started = std::time::Instant::now();
        assert!(wait_closed(&address));
        assert!(started.elapsed() >= Duration::from_millis(40));
        holder.join().unwrap();
        drop(listener);
        assert!(!wait_closed(&address));
    }

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
