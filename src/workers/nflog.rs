//! One NFLOG group on its own netlink socket ([`QueryLog`]): binds the
//! group in one acknowledged request, and drains the copies waiting in
//! it without ever waiting. The DNS worker reads the copies of the DNS
//! queries clients send this way (the queries themselves are not held).
//! The bytes are read and written by the pure [`crate::packet::nflog`].
//! Loss is reported, not hidden: when the socket's buffer was full the
//! kernel dropped copies and says so (ENOBUFS) at the next read. It never
//! decides a verdict nor logs per packet.
#![allow(clippy::disallowed_methods)] // binding waits for the kernel's answer with a deadline.

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use netlink_sys::constants::NETLINK_NETFILTER;

use crate::packet::nflog::{self, LogMessage, LoggedPacket, LOG_OVERHEAD};

/// Bytes of each packet copied: a whole DNS query (a UDP DNS message is
/// far smaller).
const COPY_RANGE: u32 = 4096;
/// Datagrams taken per system call.
const BUFFERS: usize = 32;
/// System calls one drain makes at most (bounded work per drain; what is
/// left waits for the next).
const MAX_ROUNDS: usize = 64;
/// How long binding waits for the kernel's answer.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

/// What one drain met besides the copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Copies handed on.
    pub copies: u64,
    /// The kernel reported copies lost to a full socket buffer.
    pub lost: bool,
    /// Messages that did not read as NFLOG (each ends its buffer's walk).
    pub unreadable: u64,
}

/// A bound log group.
pub struct QueryLog {
    socket: netlink_sys::Socket,
    buffers: Vec<Vec<u8>>,
    lengths: Vec<(usize, bool)>,
}

impl QueryLog {
    /// Binds `group` in the calling thread's network namespace, with a
    /// receive buffer of `receive_buffer` bytes (0: the system's default),
    /// overflows reported.
    pub fn open(group: u16, receive_buffer: usize) -> io::Result<QueryLog> {
        let mut socket = netlink_sys::Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.set_no_enobufs(false)?;
        if receive_buffer > 0 {
            crate::sys::set_receive_buffer(socket.as_fd(), receive_buffer)?;
        }
        let buffer = COPY_RANGE as usize + LOG_OVERHEAD;
        let mut log = QueryLog {
            socket,
            buffers: crate::sys::receive_buffers(BUFFERS, buffer),
            lengths: Vec::with_capacity(BUFFERS),
        };
        let mut out = Vec::new();
        nflog::log_config(&mut out, 1, group, COPY_RANGE);
        log.socket.send(&out, 0)?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !crate::sys::wait_readable(log.socket.as_fd(), left)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer from the kernel",
                ));
            }
            let received =
                crate::sys::recv_many(log.socket.as_fd(), &mut log.buffers, &mut log.lengths)?;
            for (buffer, &(length, _)) in log.buffers.iter().zip(&log.lengths).take(received) {
                let bytes = &buffer[..length.min(buffer.len())];
                for message in nflog::log_messages(bytes).flatten() {
                    match message {
                        LogMessage::Ack { seq: 1, errno: 0 } => return Ok(log),
                        LogMessage::Ack { seq: 1, errno } => {
                            return Err(io::Error::from_raw_os_error(errno))
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// Hands `each` every copy waiting (up to a bound), oldest first,
    /// without waiting.
    pub fn drain(&mut self, mut each: impl FnMut(LoggedPacket<'_>)) -> Drained {
        let mut drained = Drained::default();
        for _ in 0..MAX_ROUNDS {
            let received = match crate::sys::recv_many(
                self.socket.as_fd(),
                &mut self.buffers,
                &mut self.lengths,
            ) {
                Ok(received) => received,
                Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {
                    drained.lost = true;
                    continue;
                }
                Err(_) => break,
            };
            for (buffer, &(length, _)) in self.buffers.iter().zip(&self.lengths).take(received) {
                let bytes = &buffer[..length.min(buffer.len())];
                for message in nflog::log_messages(bytes) {
                    match message {
                        Ok(LogMessage::Packet(packet)) => {
                            drained.copies += 1;
                            each(packet);
                        }
                        Ok(_) => {}
                        Err(_) => drained.unreadable += 1,
                    }
                }
            }
            if received < self.buffers.len() {
                break;
            }
        }
        drained
    }
}
