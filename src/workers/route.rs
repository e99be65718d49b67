//! The Node's route to a DNS server, for the DNS worker's reverse-path
//! check ([`crate::fqdn::ReplyPath`]): one `RTM_GETROUTE` request on a
//! `NETLINK_ROUTE` socket per lookup, what `ip route get ADDR` asks, and
//! the output interface of the answer. It decides nothing and writes no
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

use std::io::Read;
use std::net::IpAddr;
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
                Answer::Route(oif) => return oif,
            }
        }
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
