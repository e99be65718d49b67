//! A minimal ipset client over netfilter netlink, the only code in
//! tollgate that speaks the ipset netlink protocol. Two users:
//!
//! - the workers (the DNS path and the verdict cache) add addresses to
//!   (and remove them from) existing `hash:ip` sets, and `src,proto:port,dst`
//!   tuples to `hash:ip,port,ip` sets, with a per-entry timeout, several
//!   entries in one `sendmsg`, waiting for the kernel's acknowledgement of
//!   each ([`IpsetSocket::apply`]): spawning `ipset add` costs ~3 ms per
//!   call, one batch here tens of microseconds;
//! - the datapath's reconcile creates, fills, swaps and destroys sets
//!   ([`SetCommand`]s, [`IpsetSocket::run`]), one command at a time, where
//!   it ran `ipset restore` (a process, ~2.4 ms of CPU, up to three a
//!   ruleset change).
//!
//! Reading sets (`ipset save`, `ipset list`) stays with the `ipset`
//! command ([`super::kernel`]).
//!
//! Wire format of one entry request (all integers host order unless flagged):
//!
//! ```text
//! nlmsghdr { len, type = NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_ADD (9) / DEL (10),
//!            flags = NLM_F_REQUEST | NLM_F_ACK, seq, pid = 0 }
//! nfgenmsg { family = NFPROTO_IPV4 (2) / NFPROTO_IPV6 (10), version 0, res_id 0 }
//! IPSET_ATTR_PROTOCOL (1)  u8 = 6
//! IPSET_ATTR_SETNAME  (2)  "tollgate-fqdn-…\0"
//! IPSET_ATTR_DATA     (7 | NLA_F_NESTED)
//!   IPSET_ATTR_IP      (1 | NLA_F_NESTED)
//!     IPSET_ATTR_IPADDR_IPV4 (1 | NLA_F_NET_BYTEORDER) 4 bytes
//!       or IPSET_ATTR_IPADDR_IPV6 (2 | NLA_F_NET_BYTEORDER) 16 bytes
//!   IPSET_ATTR_PORT    (4 | NLA_F_NET_BYTEORDER) u16 big-endian   (tuples)
//!   IPSET_ATTR_PROTO   (7)  u8                                   (tuples)
//!   IPSET_ATTR_IP2     (20 | NLA_F_NESTED), as IPSET_ATTR_IP      (tuples)
//!   IPSET_ATTR_TIMEOUT (6 | NLA_F_NET_BYTEORDER) u32 big-endian   (add only)
//! ```
//!
//! Without `NLM_F_EXCL` the kernel treats an add of a present entry as
//! `-exist`: the timeout is refreshed. A delete of an absent entry is
//! answered `IPSET_ERR_EXIST`, which [`IpsetSocket::apply`] accepts.

use crate::netlink::{
    self, attribute, nest_end, nest_start, NLA_F_NET_BYTEORDER, NLM_F_ACK, NLM_F_REQUEST,
};
use std::io::Read;
use std::net::IpAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

mod sets;
pub use sets::{Entry, Revisions, SetCommand, SetKind, SetWriteCause, SetWriteError};

/// `NETLINK_NETFILTER` protocol of `AF_NETLINK` sockets.
const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_IPSET: u16 = 6;
const IPSET_CMD_ADD: u16 = 9;
const IPSET_CMD_DEL: u16 = 10;
/// Lowest protocol version every ipset-capable kernel accepts for add/del.
const IPSET_PROTOCOL: u8 = 6;
const IPSET_ATTR_PROTOCOL: u16 = 1;
const IPSET_ATTR_SETNAME: u16 = 2;
const IPSET_ATTR_DATA: u16 = 7;
const IPSET_ATTR_IP: u16 = 1;
const IPSET_ATTR_TIMEOUT: u16 = 6;
const IPSET_ATTR_PORT: u16 = 4;
const IPSET_ATTR_PROTO: u16 = 7;
const IPSET_ATTR_IP2: u16 = 20;
const IPSET_ATTR_IPADDR_IPV4: u16 = 1;
const IPSET_ATTR_IPADDR_IPV6: u16 = 2;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
/// Longest set name the kernel accepts, without the NUL.
pub const MAX_SET_NAME: usize = 31;
/// `IPSET_ERR_EXIST`: deleting an entry that is not there.
const IPSET_ERR_EXIST: i32 = 4103;
/// `IPSET_ERR_PROTOCOL`: a request or answer the other side cannot read.
const IPSET_ERR_PROTOCOL: i32 = 4097;

/// One entry write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryOp<'a> {
    /// Add, or refresh the timeout of, `address` in `set`.
    Add {
        set: &'a str,
        address: IpAddr,
        timeout_secs: u32,
    },
    /// Remove `address` from `set` (absent is fine).
    Del { set: &'a str, address: IpAddr },
    /// Add, or refresh the timeout of, `src,protocol:port,dst` in a
    /// `hash:ip,port,ip` set (for ICMP, `port` is `type << 8 | code`).
    AddTuple {
        set: &'a str,
        src: IpAddr,
        protocol: u8,
        port: u16,
        dst: IpAddr,
        timeout_secs: u32,
    },
}

impl EntryOp<'_> {
    fn set(&self) -> &str {
        match *self {
            EntryOp::Add { set, .. } | EntryOp::Del { set, .. } | EntryOp::AddTuple { set, .. } => {
                set
            }
        }
    }

    fn address(&self) -> IpAddr {
        match *self {
            EntryOp::Add { address, .. } | EntryOp::Del { address, .. } => address,
            EntryOp::AddTuple { src, .. } => src,
        }
    }
}

/// `IPSET_ERR_HASH_FULL`: the set holds `maxelem` entries.
pub const IPSET_ERR_HASH_FULL: i32 = 4352;

/// Why a batch failed. `Kernel` carries the first error the kernel
/// returned (an errno, or an ipset code above 4096, e.g. 4097 for a
/// missing set); the other entries of the batch were still processed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("netlink socket: {0}")]
    Socket(std::io::Error),
    #[error("set name {name:?} is longer than {MAX_SET_NAME} bytes")]
    SetName { name: String },
    #[error("ipset {op} {set} {address}: kernel error {code}")]
    Kernel {
        op: &'static str,
        set: String,
        address: IpAddr,
        code: i32,
    },
    #[error("netlink reply truncated or out of sequence")]
    BadReply,
    #[error("an entry's two addresses are of different families")]
    MixedFamilies,
}

/// Appends one request for `op` with sequence number `seq` to `out`.
pub fn encode(op: &EntryOp<'_>, seq: u32, out: &mut Vec<u8>) -> Result<(), NetlinkError> {
    let (cmd, set, address, timeout) = match *op {
        EntryOp::Add {
            set,
            address,
            timeout_secs,
        } => (IPSET_CMD_ADD, set, address, Some(timeout_secs)),
        EntryOp::Del { set, address } => (IPSET_CMD_DEL, set, address, None),
        EntryOp::AddTuple {
            set,
            src,
            timeout_secs,
            ..
        } => (IPSET_CMD_ADD, set, src, Some(timeout_secs)),
    };
    check_name(set)?;
    let start = netlink::begin(
        out,
        (NFNL_SUBSYS_IPSET << 8) | cmd,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
    );
    let family = match address {
        IpAddr::V4(_) => NFPROTO_IPV4,
        IpAddr::V6(_) => NFPROTO_IPV6,
    };
    out.extend_from_slice(&[family, 0, 0, 0]);
    attribute(out, IPSET_ATTR_PROTOCOL, &[IPSET_PROTOCOL]);
    string_attr(out, IPSET_ATTR_SETNAME, set);
    let data = nest_start(out, IPSET_ATTR_DATA);
    address_attr(out, IPSET_ATTR_IP, address);
    if let EntryOp::AddTuple {
        protocol,
        port,
        dst,
        ..
    } = *op
    {
        if dst.is_ipv4() != address.is_ipv4() {
            return Err(NetlinkError::MixedFamilies);
        }
        attribute(
            out,
            IPSET_ATTR_PORT | NLA_F_NET_BYTEORDER,
            &port.to_be_bytes(),
        );
        attribute(out, IPSET_ATTR_PROTO, &[protocol]);
        address_attr(out, IPSET_ATTR_IP2, dst);
    }
    if let Some(timeout) = timeout {
        attribute(
            out,
            IPSET_ATTR_TIMEOUT | NLA_F_NET_BYTEORDER,
            &timeout.to_be_bytes(),
        );
    }
    nest_end(out, data);
    netlink::end(out, start);
    Ok(())
}

/// Refuses a set name the kernel would not take.
fn check_name(set: &str) -> Result<(), NetlinkError> {
    if set.len() > MAX_SET_NAME || set.as_bytes().contains(&0) {
        return Err(NetlinkError::SetName { name: set.into() });
    }
    Ok(())
}

/// A NUL-terminated string attribute (a set, type or interface name).
fn string_attr(out: &mut Vec<u8>, kind: u16, value: &str) {
    attribute(out, kind, &[value.as_bytes(), &[0]].concat());
}

/// A nested address attribute (`IPSET_ATTR_IP` or `IPSET_ATTR_IP2`).
fn address_attr(out: &mut Vec<u8>, kind: u16, address: IpAddr) {
    let ip = nest_start(out, kind);
    match address {
        IpAddr::V4(v4) => attribute(
            out,
            IPSET_ATTR_IPADDR_IPV4 | NLA_F_NET_BYTEORDER,
            &v4.octets(),
        ),
        IpAddr::V6(v6) => attribute(
            out,
            IPSET_ATTR_IPADDR_IPV6 | NLA_F_NET_BYTEORDER,
            &v6.octets(),
        ),
    }
    nest_end(out, ip);
}

/// The acknowledgements in one datagram from the kernel: `(seq, error)`
/// per `NLMSG_ERROR` message (error 0 is success, otherwise a negated
/// code).
pub fn parse_acks(bytes: &[u8]) -> Result<Vec<(u32, i32)>, NetlinkError> {
    let mut acks = Vec::new();
    for message in netlink::messages(bytes) {
        let message = message.map_err(|_| NetlinkError::BadReply)?;
        if let Some(errno) = message.errno() {
            // The original request header follows the code; its seq is ours.
            let seq = message.request_seq().ok_or(NetlinkError::BadReply)?;
            acks.push((seq, -errno));
        }
    }
    Ok(acks)
}

/// A netfilter netlink socket for ipset writes. Not shared between
/// threads: each writer (the DNS worker, the verdict cache's writer, a
/// reconcile) owns one.
pub struct IpsetSocket {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
    /// The kernel's newest revision of each set type, once asked (by
    /// [`SetKind`]).
    revisions: [Option<u8>; 5],
}

impl IpsetSocket {
    /// Opens the socket in the caller's network namespace.
    pub fn open() -> Result<IpsetSocket, NetlinkError> {
        let socket = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(NETLINK_NETFILTER)),
        )
        .map_err(NetlinkError::Socket)?;
        // A lost acknowledgement must not hold a DNS reply forever.
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(NetlinkError::Socket)?;
        Ok(IpsetSocket {
            socket,
            seq: 0,
            buf: Vec::with_capacity(4096),
            revisions: [None; 5],
        })
    }

    /// Sends every op in one datagram and waits for all acknowledgements.
    /// Every op is attempted; the first kernel error is returned.
    pub fn apply(&mut self, ops: &[EntryOp<'_>]) -> Result<(), NetlinkError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        let first = self.seq.wrapping_add(1);
        for op in ops {
            self.seq = self.seq.wrapping_add(1);
            encode(op, self.seq, &mut self.buf)?;
        }
        // An unconnected netlink socket sends to the kernel (port id 0).
        self.socket.send(&self.buf).map_err(NetlinkError::Socket)?;
        let mut first_error = None;
        self.acknowledged(ops, first, |_, op, code| {
            if first_error.is_none() {
                first_error = Some(kernel_error(op, code));
            }
        })?;
        first_error.map_or(Ok(()), Err)
    }

    /// Sends every op in one datagram and waits for all acknowledgements;
    /// every op is attempted. Returns each op's result: 0, or the kernel's
    /// error code (e.g. [`IPSET_ERR_HASH_FULL`]).
    pub fn apply_each(&mut self, ops: &[EntryOp<'_>]) -> Result<Vec<i32>, NetlinkError> {
        let mut codes = vec![0; ops.len()];
        if ops.is_empty() {
            return Ok(codes);
        }
        self.buf.clear();
        let first = self.seq.wrapping_add(1);
        for op in ops {
            self.seq = self.seq.wrapping_add(1);
            encode(op, self.seq, &mut self.buf)?;
        }
        self.socket.send(&self.buf).map_err(NetlinkError::Socket)?;
        self.acknowledged(ops, first, |index, _, code| codes[index] = code)?;
        Ok(codes)
    }

    /// Reads one datagram from the kernel into `reply` (again when a
    /// signal interrupted the read); its length.
    fn receive(&self, reply: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match (&self.socket).read(reply) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                read => return read,
            }
        }
    }

    /// Reads the acknowledgements of `ops` (sequence numbers from
    /// `first`), handing each refusal that matters to `refused`.
    fn acknowledged(
        &mut self,
        ops: &[EntryOp<'_>],
        first: u32,
        mut refused: impl FnMut(usize, &EntryOp<'_>, i32),
    ) -> Result<(), NetlinkError> {
        let mut pending = ops.len();
        let mut reply = [0u8; 8192];
        while pending > 0 {
            let n = self.receive(&mut reply).map_err(NetlinkError::Socket)?;
            for (seq, code) in parse_acks(&reply[..n])? {
                let index = seq.wrapping_sub(first) as usize;
                let Some(op) = ops.get(index) else {
                    continue; // a stale ack of an earlier, failed batch
                };
                pending -= 1;
                let code = -code;
                let tolerated = matches!(op, EntryOp::Del { .. }) && code == IPSET_ERR_EXIST;
                if code != 0 && !tolerated {
                    refused(index, op, code);
                }
            }
        }
        Ok(())
    }
}

fn kernel_error(op: &EntryOp<'_>, code: i32) -> NetlinkError {
    let name = match op {
        EntryOp::Add { .. } | EntryOp::AddTuple { .. } => "add",
        EntryOp::Del { .. } => "del",
    };
    NetlinkError::Kernel {
        op: name,
        set: op.set().into(),
        address: op.address(),
        code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::NLMSG_ERROR;

    #[test]
    fn add_v4_with_timeout_encodes_like_libipset() {
        let mut out = Vec::new();
        let op = EntryOp::Add {
            set: "tollgate-fqdn-x-v4",
            address: "10.1.2.3".parse().unwrap(),
            timeout_secs: 300,
        };
        encode(&op, 7, &mut out).unwrap();
        let mut want: Vec<u8> = Vec::new();
        let total: u32 = 16 + 4 + 8 + 24 + (4 + 4 + 8 + 8);
        want.extend(total.to_ne_bytes());
        want.extend(((6u16 << 8) | 9).to_ne_bytes());
        want.extend(5u16.to_ne_bytes()); // REQUEST | ACK
        want.extend(7u32.to_ne_bytes());
        want.extend(0u32.to_ne_bytes());
        want.extend([2, 0, 0, 0]);
        want.extend(5u16.to_ne_bytes());
        want.extend(1u16.to_ne_bytes());
        want.extend([6, 0, 0, 0]);
        want.extend(23u16.to_ne_bytes()); // 4 + 18 + NUL
        want.extend(2u16.to_ne_bytes());
        want.extend(b"tollgate-fqdn-x-v4\0");
        want.push(0); // pad to 24
        want.extend(24u16.to_ne_bytes());
        want.extend((7u16 | 0x8000).to_ne_bytes());
        want.extend(12u16.to_ne_bytes());
        want.extend((1u16 | 0x8000).to_ne_bytes());
        want.extend(8u16.to_ne_bytes());
        want.extend((1u16 | 0x4000).to_ne_bytes());
        want.extend([10, 1, 2, 3]);
        want.extend(8u16.to_ne_bytes());
        want.extend((6u16 | 0x4000).to_ne_bytes());
        want.extend(300u32.to_be_bytes());
        assert_eq!(out, want);
    }

    #[test]
    fn del_v6_has_no_timeout_and_requests_are_concatenated() {
        let mut out = Vec::new();
        let v6 = "fd00::1".parse().unwrap();
        encode(
            &EntryOp::Del {
                set: "s",
                address: v6,
            },
            1,
            &mut out,
        )
        .unwrap();
        let first_len = out.len();
        assert_eq!(first_len, 16 + 4 + 8 + 8 + (4 + 4 + 20));
        assert_eq!(&out[4..6], &((6u16 << 8) | 10).to_ne_bytes());
        assert_eq!(out[16], 10, "NFPROTO_IPV6");
        assert_eq!(&out[first_len - 16..], &v6_octets(v6));
        encode(
            &EntryOp::Del {
                set: "s",
                address: v6,
            },
            2,
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 2 * first_len);
        assert_eq!(&out[first_len + 8..first_len + 12], &2u32.to_ne_bytes());
    }

    fn v6_octets(address: IpAddr) -> [u8; 16] {
        match address {
            IpAddr::V6(v6) => v6.octets(),
            IpAddr::V4(_) => unreachable!(),
        }
    }

    #[test]
    fn long_set_names_are_refused() {
        let op = EntryOp::Del {
            set: &"x".repeat(32),
            address: "10.0.0.1".parse().unwrap(),
        };
        assert!(matches!(
            encode(&op, 1, &mut Vec::new()),
            Err(NetlinkError::SetName { .. })
        ));
    }

    #[test]
    fn acks_carry_the_request_sequence() {
        let mut reply = Vec::new();
        for (seq, error) in [(41u32, 0i32), (42, -4097)] {
            reply.extend(36u32.to_ne_bytes());
            reply.extend(NLMSG_ERROR.to_ne_bytes());
            reply.extend(0u16.to_ne_bytes());
            reply.extend(seq.to_ne_bytes());
            reply.extend(0u32.to_ne_bytes());
            reply.extend(error.to_ne_bytes());
            reply.extend(36u32.to_ne_bytes()); // echoed request header
            reply.extend(0u32.to_ne_bytes());
            reply.extend(seq.to_ne_bytes());
            reply.extend(0u32.to_ne_bytes());
        }
        assert_eq!(parse_acks(&reply).unwrap(), vec![(41, 0), (42, -4097)]);
        assert!(parse_acks(&reply[..20]).is_err());
        let mut bad = reply.clone();
        bad[0] = 200;
        assert!(parse_acks(&bad).is_err());
    }
}
