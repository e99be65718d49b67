//! The Node's route to a DNS server, for the DNS worker's reverse-path
//! check ([`crate::fqdn::ReplyPath`]): an `RTM_GETROUTE` request on a
//! `NETLINK_ROUTE` socket, what `ip route get ADDR` asks, and the output
//! interface of the answer ([`RouteSocket`]). The DNS worker keeps the
//! answers ([`Routes`]) until the kernel announces a change that could
//! alter one: it reads the announcements waiting before every answer it
//! uses, so a reply queued after a route change is judged by the new
//! route, as when it asked each time. It decides nothing and writes no
//! route.
//!
//! Wire format (host order):
//!
//! ```text
//! request:  nlmsghdr { len, type = RTM_GETROUTE (26), flags = NLM_F_REQUEST, seq, pid 0 }
//!           rtmsg { family AF_INET/AF_INET6, dst_len 32/128, 0 … , flags u32 0 }
//!           RTA_DST (1) 4 or 16 bytes
//! answer:   nlmsghdr { type = RTM_NEWROUTE (24) } rtmsg … RTA_OIF (4) u32
//!        or nlmsghdr { type = NLMSG_ERROR (2) } -errno (e.g. ENETUNREACH)
//! ```

use std::collections::HashMap;
use std::io::Read;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::netlink::{self, NLM_F_REQUEST};

const NETLINK_ROUTE: libc::c_int = 0;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTMSG_LEN: usize = 12;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;

/// A route socket, owned by the DNS worker.
pub struct RouteSocket {
    socket: Socket,
    seq: u32,
}

impl RouteSocket {
    /// Opens the socket in the caller's network namespace.
    pub fn open() -> std::io::Result<RouteSocket> {
        let socket = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(NETLINK_ROUTE)),
        )?;
        // A lost answer must not hold a DNS reply for long.
        socket.set_read_timeout(Some(Duration::from_millis(200)))?;
        Ok(RouteSocket { socket, seq: 0 })
    }

    /// The index of the interface the Node's route to `to` leaves by;
    /// `None` when there is no route (or no answer: the caller then learns
    /// nothing, which only denies more).
    pub fn output_interface(&mut self, to: IpAddr) -> Option<u32> {
        self.ask(to).flatten()
    }

    /// The kernel's answer for `to`: `None` when none came (the request or
    /// the read failed, or timed out).
    fn ask(&mut self, to: IpAddr) -> Option<Option<u32>> {
        self.seq = self.seq.wrapping_add(1);
        // An unconnected netlink socket sends to the kernel (port id 0).
        self.socket.send(&encode(to, self.seq)).ok()?;
        let mut answer = [0u8; 4096];
        loop {
            let n = match (&self.socket).read(&mut answer) {
                Ok(n) => n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            };
            match parse(&answer[..n], self.seq) {
                Answer::Stale => continue,
                Answer::Route(oif) => return Some(oif),
            }
        }
    }
}

/// The `rtnetlink` groups whose announcements can change the answer for
/// some address: routes and rules of both families, next-hop objects,
/// and links and addresses (an IPv4 route that goes with its link or its
/// address is removed without an announcement of its own).
const ROUTE_GROUPS: [libc::c_uint; 8] = [
    libc::RTNLGRP_LINK,
    libc::RTNLGRP_IPV4_IFADDR,
    libc::RTNLGRP_IPV4_ROUTE,
    libc::RTNLGRP_IPV4_RULE,
    libc::RTNLGRP_IPV6_IFADDR,
    libc::RTNLGRP_IPV6_ROUTE,
    libc::RTNLGRP_IPV6_RULE,
    libc::RTNLGRP_NEXTHOP,
];
/// Answers kept at most; past it they are all forgotten (replies "from"
/// many forged sources must not grow the worker).
const MAX_KNOWN: usize = 256;
/// Announcements read per system call, and system calls per check (what
/// is left is read at the next check, which forgets again).
const CHANGE_BUFFERS: usize = 8;
const MAX_CHANGE_READS: usize = 16;

/// [`RouteSocket`]'s answers, kept until an announcement on a socket
/// subscribed to [`ROUTE_GROUPS`] says a route, rule, next hop, link or
/// address changed. The kernel queues an announcement on the socket before
/// the change's request returns, so a packet that arrives after a change
/// finds it waiting; a lost announcement (the socket's buffer was full)
/// or an unreadable socket forgets everything, as an announcement does.
/// Unanswered requests are not kept.
pub struct Routes {
    ask: RouteSocket,
    changes: netlink_sys::Socket,
    buffers: Vec<Vec<u8>>,
    lengths: Vec<(usize, bool)>,
    known: HashMap<IpAddr, Option<u32>>,
}

impl Routes {
    /// Opens both sockets in the caller's network namespace (the
    /// subscription first: a change made while the first answer is being
    /// asked for is then announced).
    pub fn open() -> std::io::Result<Routes> {
        let mut changes = netlink_sys::Socket::new(netlink_sys::constants::NETLINK_ROUTE)?;
        changes.bind_auto()?;
        for group in ROUTE_GROUPS {
            changes.add_membership(group)?;
        }
        Ok(Routes {
            ask: RouteSocket::open()?,
            changes,
            buffers: crate::sys::receive_buffers(CHANGE_BUFFERS, 4096),
            lengths: Vec::with_capacity(CHANGE_BUFFERS),
            known: HashMap::new(),
        })
    }

    /// [`RouteSocket::output_interface`], asked only when no answer is kept
    /// since the last announced change.
    pub fn output_interface(&mut self, to: IpAddr) -> Option<u32> {
        if self.changed() {
            self.known.clear();
        }
        if let Some(&oif) = self.known.get(&to) {
            return oif;
        }
        let oif = self.ask.ask(to)?;
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        self.known.insert(to, oif);
        oif
    }

    /// Reads every announcement waiting; whether there was any (or any
    /// was lost, or the socket could not be read). Asked before every
    /// reply is judged, and nearly always with nothing waiting: a `poll`
    /// that does not wait says so at less than half a `recvmmsg`'s cost.
    fn changed(&mut self) -> bool {
        match crate::sys::wait_readable(self.changes.as_fd(), Duration::ZERO) {
            Ok(false) => return false,
            Ok(true) => {}
            // The socket says nothing reliable: forget.
            Err(_) => return true,
        }
        let mut changed = false;
        for _ in 0..MAX_CHANGE_READS {
            match crate::sys::recv_many(self.changes.as_fd(), &mut self.buffers, &mut self.lengths)
            {
                Ok(received) if received < self.buffers.len() => return changed || received > 0,
                Ok(_) => changed = true,
                // Announcements were lost: forget, and read on.
                Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => changed = true,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                // The socket says nothing reliable: forget.
                Err(_) => return true,
            }
        }
        // Still more waiting: forget, and read the rest next time.
        true
    }
}

/// The request for the route to `to`.
pub fn encode(to: IpAddr, seq: u32) -> Vec<u8> {
    let (family, bits, address) = match to {
        IpAddr::V4(v4) => (libc::AF_INET as u8, 32, v4.octets().to_vec()),
        IpAddr::V6(v6) => (libc::AF_INET6 as u8, 128, v6.octets().to_vec()),
    };
    let mut out = Vec::with_capacity(netlink::NLMSG_HDRLEN + RTMSG_LEN + 4 + address.len());
    let start = netlink::begin(&mut out, RTM_GETROUTE, NLM_F_REQUEST, seq);
    // rtmsg: family, destination prefix length, the rest zero.
    out.extend_from_slice(&[family, bits, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&0u32.to_ne_bytes());
    netlink::attribute(&mut out, RTA_DST, &address);
    netlink::end(&mut out, start);
    out
}

/// What one datagram from the kernel says about request `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not an answer to `seq` (a late answer to an earlier request).
    Stale,
    /// The route's output interface; `None`: an error (no route) or a
    /// route without one.
    Route(Option<u32>),
}

/// Reads the answer to request `seq` out of `bytes`.
pub fn parse(bytes: &[u8], seq: u32) -> Answer {
    let Some(Ok(message)) = netlink::messages(bytes).next() else {
        return Answer::Stale;
    };
    if message.seq != seq {
        return Answer::Stale;
    }
    // An error (no route) or anything but a route.
    if message.kind != RTM_NEWROUTE {
        return Answer::Route(None);
    }
    let attributes = netlink::attributes(message.body.get(RTMSG_LEN..).unwrap_or_default());
    for attribute in attributes {
        // A lying attribute length ends the walk.
        let Ok((kind, value)) = attribute else {
            break;
        };
        if let (RTA_OIF, Some(oif)) = (kind, value.get(..4)) {
            return Answer::Route(Some(u32::from_ne_bytes([oif[0], oif[1], oif[2], oif[3]])));
        }
    }
    Answer::Route(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{NLMSG_ERROR, NLMSG_HDRLEN};

    fn answer(kind: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut out = vec![0u8; NLMSG_HDRLEN + RTMSG_LEN];
        out[4..6].copy_from_slice(&kind.to_ne_bytes());
        out[8..12].copy_from_slice(&seq.to_ne_bytes());
        for (kind, data) in attrs {
            let len = 4 + data.len();
            out.extend_from_slice(&(len as u16).to_ne_bytes());
            out.extend_from_slice(&kind.to_ne_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(4), 0);
        }
        let len = out.len() as u32;
        out[0..4].copy_from_slice(&len.to_ne_bytes());
        out
    }

    #[test]
    fn the_request_asks_for_one_host_route() {
        let v4 = encode("10.61.0.2".parse().unwrap(), 7);
        assert_eq!(v4.len(), 16 + 12 + 8);
        assert_eq!(u32::from_ne_bytes(v4[0..4].try_into().unwrap()), 36);
        assert_eq!(u16::from_ne_bytes([v4[4], v4[5]]), RTM_GETROUTE);
        assert_eq!(u32::from_ne_bytes(v4[8..12].try_into().unwrap()), 7);
        assert_eq!(&v4[16..18], &[libc::AF_INET as u8, 32]);
        assert_eq!(&v4[32..36], &[10, 61, 0, 2]);
        let v6 = encode("fd61::2".parse().unwrap(), 1);
        assert_eq!((v6.len(), v6[17]), (16 + 12 + 20, 128));
    }

    #[test]
    fn the_answer_gives_the_output_interface_of_its_own_request() {
        let route = answer(
            RTM_NEWROUTE,
            3,
            &[(15, &[254, 0, 0, 0]), (RTA_OIF, &5u32.to_ne_bytes())],
        );
        assert_eq!(parse(&route, 3), Answer::Route(Some(5)));
        assert_eq!(parse(&route, 4), Answer::Stale);
        let unreachable = answer(NLMSG_ERROR, 3, &[]);
        assert_eq!(parse(&unreachable, 3), Answer::Route(None));
        assert_eq!(parse(&route[..10], 3), Answer::Stale);
        // A lying attribute length ends the walk.
        let mut broken = route.clone();
        broken[28..30].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(parse(&broken, 3), Answer::Route(None));
    }
}
