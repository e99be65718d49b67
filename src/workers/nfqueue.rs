//! One NFQUEUE queue on its own netlink socket ([`Queue`]): binds and
//! configures the queue in one acknowledged request, receives every packet
//! waiting in one `recvmmsg` after a `poll` with a timeout, and sends one
//! round of verdicts in one `send` (or a few, 64 KiB each), as batch
//! verdicts where the kernel's semantics allow them
//! ([`nfqueue::plan_verdicts`]). When a send fails it sends nothing more
//! of the round and hands the rest back to the loop, since a later batch
//! would also cover the packets whose verdicts were lost. The bytes are
//! read and written by the pure [`crate::packet::nfqueue`]; the system
//! calls `netlink-sys` lacks are in [`crate::sys`]. It never decides a
//! verdict.
#![allow(clippy::disallowed_methods)] // the socket's setup waits for the kernel's answers with a deadline.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use netlink_sys::constants::NETLINK_NETFILTER;

use super::runtime::{QueueError, QueueSpec, Receipt, Socket};
use crate::packet::nfqueue::{
    self, Message, Outgoing, Plain, QueueConfig, Sequence, MESSAGE_OVERHEAD, NFQA_CFG_F_FAIL_OPEN,
    NFQA_CFG_F_GSO,
};
use crate::packet::{Action, LocalSide, PacketId, Queued};
use crate::telemetry::kernel;

/// Bytes of receive buffers per queue at most: as many datagrams as fit
/// are taken per system call (4 to 64).
const RECEIVE_BYTES: usize = 1 << 20;
/// Largest verdict round sent in one system call; a longer one is split.
const SEND_BYTES: usize = 1 << 16;
/// How long binding waits for the kernel's answer.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

/// One received packet, owned until its verdict.
#[derive(Debug)]
pub struct Packet {
    /// Its place in the kernel's queue order ([`Sequence`]).
    key: u64,
    id: PacketId,
    mark: u32,
    hook: u8,
    indev: u32,
    payload: Vec<u8>,
}

/// A bound queue.
pub struct Queue {
    socket: netlink_sys::Socket,
    spec: QueueSpec,
    buffers: Vec<Vec<u8>>,
    lengths: Vec<(usize, bool)>,
    out: Vec<u8>,
    seq: u32,
    sequence: Sequence,
    /// Packets that arrived while binding waited for its answer.
    early: VecDeque<Packet>,
    /// Received buffers that did not read as netlink to their end since
    /// the last [`Socket::recv`] reported them, and ever (for the
    /// rate-limited log).
    unreadable: u64,
    unreadable_ever: u64,
}

impl Queue {
    /// Binds the queue in the calling thread's network namespace: copies up
    /// to `copy_range` bytes of each packet, lets up to `max_len` wait,
    /// sets fail-open and GSO as the spec says, sizes the receive buffer,
    /// and leaves socket overflows (ENOBUFS) reported instead of hidden.
    pub fn open(spec: QueueSpec) -> Result<Queue, QueueError> {
        let queue = spec.queue;
        let setup = |step| QueueError::setup(queue, step);
        let mut socket = netlink_sys::Socket::new(NETLINK_NETFILTER).map_err(setup("open"))?;
        socket.bind_auto().map_err(setup("bind socket"))?;
        socket
            .set_no_enobufs(false)
            .map_err(setup("overflow reporting"))?;
        if spec.receive_buffer > 0 {
            crate::sys::set_receive_buffer(socket.as_fd(), spec.receive_buffer)
                .map_err(setup("receive buffer"))?;
        }
        let buffer = usize::from(spec.copy_range) + MESSAGE_OVERHEAD;
        let count = (RECEIVE_BYTES / buffer).clamp(4, 64);
        let mut queue = Queue {
            socket,
            spec,
            buffers: crate::sys::receive_buffers(count, buffer),
            lengths: Vec::with_capacity(count),
            out: Vec::with_capacity(SEND_BYTES),
            seq: 0,
            sequence: Sequence::default(),
            early: VecDeque::new(),
            unreadable: 0,
            unreadable_ever: 0,
        };
        queue.bind().map_err(|error| {
            // The kernel answers EPERM both without CAP_NET_ADMIN and when
            // another socket holds the queue; only the latter lists it.
            let held = error.raw_os_error() == Some(libc::EPERM)
                && kernel::read()
                    .iter()
                    .any(|(bound, _)| *bound == queue.spec.queue);
            if held {
                QueueError::InUse {
                    queue: queue.spec.queue,
                }
            } else {
                setup("bind")(error)
            }
        })?;
        Ok(queue)
    }

    /// Sends the configuration and waits for its acknowledgement, keeping
    /// the packets that arrive before it.
    fn bind(&mut self) -> io::Result<()> {
        let mut flags = 0;
        if self.spec.fail_open {
            flags |= NFQA_CFG_F_FAIL_OPEN;
        }
        if self.spec.gso {
            flags |= NFQA_CFG_F_GSO;
        }
        let seq = self.next_seq();
        self.out.clear();
        nfqueue::config(
            &mut self.out,
            seq,
            &QueueConfig {
                queue: self.spec.queue,
                copy_range: u32::from(self.spec.copy_range),
                max_len: self.spec.max_len,
                flags,
            },
        );
        self.socket.send(&self.out, 0)?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer from the kernel",
                ));
            }
            let mut acks = Vec::new();
            let mut packets = Vec::new();
            self.receive(left, &mut packets, &mut acks)?;
            self.early.extend(packets);
            if let Some((_, errno)) = acks.iter().find(|(s, _)| *s == seq) {
                return match errno {
                    0 => Ok(()),
                    errno => Err(io::Error::from_raw_os_error(*errno)),
                };
            }
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Waits up to `timeout`, then takes every datagram waiting (up to the
    /// buffers' count): packets to `into`, answers to our requests
    /// (sequence, errno) to `acks`.
    fn receive(
        &mut self,
        timeout: Duration,
        into: &mut Vec<Packet>,
        acks: &mut Vec<(u32, i32)>,
    ) -> io::Result<()> {
        if !crate::sys::wait_readable(self.fd(), timeout)? {
            return Ok(());
        }
        let fd = self.socket.as_fd();
        let received = crate::sys::recv_many(fd, &mut self.buffers, &mut self.lengths)?;
        for (buffer, &(length, cut)) in self.buffers.iter().zip(&self.lengths).take(received) {
            let bytes = &buffer[..length.min(buffer.len())];
            for message in nfqueue::messages(bytes) {
                match message {
                    Ok(Message::Packet(packet)) => into.push(Packet {
                        key: self.sequence.received(packet.id),
                        id: packet.id,
                        mark: packet.mark,
                        hook: packet.hook,
                        indev: packet.indev,
                        payload: packet.payload.to_vec(),
                    }),
                    Ok(Message::Ack { seq, errno }) => acks.push((seq, errno)),
                    Ok(Message::Other) => {}
                    Err(error) => {
                        self.unreadable += 1;
                        self.unreadable_ever += 1;
                        let n = self.unreadable_ever;
                        if n.is_power_of_two() {
                            let QueueSpec { queue, name, .. } = self.spec;
                            tracing::warn!(queue, unreadable = n, cut, %error, "{name}: unreadable netlink from the kernel");
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Socket for Queue {
    type Message = Packet;

    fn spec(&self) -> &QueueSpec {
        &self.spec
    }

    fn recv(&mut self, timeout: Duration, into: &mut Vec<Packet>) -> io::Result<Receipt> {
        let mut acks = Vec::new();
        if self.early.is_empty() {
            self.receive(timeout, into, &mut acks)?;
        } else {
            into.extend(self.early.drain(..));
        }
        // Verdicts are sent without asking for an answer: the kernel
        // answers only those it refused.
        Ok(Receipt {
            refused: acks.iter().filter(|(_, errno)| *errno != 0).count() as u64,
            unreadable: std::mem::take(&mut self.unreadable),
        })
    }

    fn key(message: &Packet) -> u64 {
        message.key
    }

    fn packet(message: &Packet) -> Queued<'_> {
        Queued {
            id: message.id,
            payload: &message.payload,
            mark: message.mark,
            local: LocalSide::of_hook(message.hook),
            indev: message.indev,
        }
    }

    fn verdicts(
        &mut self,
        round: Vec<(Packet, Action)>,
        oldest_left: Option<u64>,
    ) -> Vec<(Packet, Action)> {
        let socket = &self.socket;
        deliver(
            round,
            oldest_left,
            self.spec.queue,
            &mut self.seq,
            &mut self.out,
            |bytes| socket.send(bytes, 0).map(drop),
        )
    }
}

/// Encodes a round of verdicts (oldest packet first) as
/// [`nfqueue::plan_verdicts`] plans them and hands them to `send` in
/// pieces of about [`SEND_BYTES`]. At the first failing send it stops and
/// returns the verdicts of that piece and every later one, unsent: the
/// kernel still holds their packets, and a batch of a later piece would
/// give them its verdict. (A rewritten payload stays rewritten in the
/// returned packet; sending it again rewrites it again, which changes
/// nothing: the rewrite is idempotent.)
fn deliver(
    mut round: Vec<(Packet, Action)>,
    oldest_left: Option<u64>,
    queue: u16,
    seq: &mut u32,
    out: &mut Vec<u8>,
    mut send: impl FnMut(&[u8]) -> io::Result<()>,
) -> Vec<(Packet, Action)> {
    let plain: Vec<(u64, Option<Plain>)> = round
        .iter()
        .map(|(packet, action)| (packet.key, Plain::of(action)))
        .collect();
    let plan = nfqueue::plan_verdicts(&plain, oldest_left);
    // round[..delivered] has reached the kernel.
    let mut delivered = 0;
    out.clear();
    for (n, outgoing) in plan.iter().enumerate() {
        *seq = seq.wrapping_add(1);
        // round[..encoded] is sent or in `out`.
        let encoded = match *outgoing {
            Outgoing::Batch { last, .. } => {
                let (packet, action) = &round[last];
                let plain = Plain::of(action).unwrap_or(Plain::Drop);
                nfqueue::verdict_batch(out, *seq, queue, packet.id, plain);
                last + 1
            }
            Outgoing::One { index } => {
                let (packet, action) = &mut round[index];
                let (plain, payload) = match *action {
                    Action::AcceptRewritten(rewrite) => match rewrite.apply(&mut packet.payload) {
                        Ok(()) => (Plain::Accept, Some(packet.payload.as_slice())),
                        Err(_) => (Plain::Drop, None),
                    },
                    ref action => (Plain::of(action).unwrap_or(Plain::Drop), None),
                };
                nfqueue::verdict(out, *seq, queue, packet.id, plain, payload);
                index + 1
            }
        };
        if out.len() >= SEND_BYTES || n + 1 == plan.len() {
            let sent = send(out);
            out.clear();
            if sent.is_err() {
                return round.split_off(delivered);
            }
            delivered = encoded;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests;
