//! The raw sockets (`IPPROTO_RAW`: the packets carry their own IP header)
//! that send the packets closing a denied L7 connection. They send what
//! [`crate::l7::deny_packets`] built and decide nothing.

use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

use crate::l7::Injection;

/// Raw sockets for injected packets.
pub struct Injector {
    v4: Socket,
    v6: Socket,
}

impl Injector {
    pub fn open() -> std::io::Result<Injector> {
        let raw = |domain| Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW)));
        Ok(Injector {
            v4: raw(Domain::IPV4)?,
            v6: raw(Domain::IPV6)?,
        })
    }

    pub fn send(&self, injection: &Injection) -> std::io::Result<()> {
        let socket = match injection.destination {
            IpAddr::V4(_) => &self.v4,
            IpAddr::V6(_) => &self.v6,
        };
        let to = SocketAddr::new(injection.destination, 0);
        socket.send_to(&injection.packet, &to.into()).map(drop)
    }
}
