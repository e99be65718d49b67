//! The interfaces behind the endpoints, for the anti-spoofing guards
//! ([`crate::datapath::antispoof::attach`]): every link of the namespace
//! (`RTM_GETLINK` dump: name, kind, bridge, veth peer and its namespace
//! id), what the far end of each veth holds in its own namespace (its MAC,
//! `RTM_GETLINK` with `IFLA_TARGET_NETNSID`, and its addresses,
//! `RTM_GETADDR` with `IFA_TARGET_NETNSID`: the kernel's own pairing, which
//! an endpoint cannot forge from its side), and the node's route to each
//! endpoint address (`ip route get`, [`crate::workers::route`]). It reads
//! only; it decides nothing and writes nothing.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::datapath::antispoof::{Facts, Link, Mac, Peer};
use crate::workers::route::RouteSocket;

/// Answers slower than this count as lost: the guards are then planned
/// from what was read (an endpoint whose interface is unknown is reported).
const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// The facts for `addresses` (the endpoints' addresses).
pub fn read(addresses: &[IpAddr], bridge_guards: bool) -> io::Result<Facts> {
    let mut netlink = Netlink::open()?;
    let mut links = Vec::new();
    for message in netlink.ask(RouteNetlinkMessage::GetLink(LinkMessage::default()), true)? {
        let RouteNetlinkMessage::NewLink(link) = message else {
            continue;
        };
        links.push(netlink.link(&link));
    }
    let mut routes = BTreeMap::new();
    let mut route = RouteSocket::open()?;
    for &address in addresses {
        routes.insert(address, route.output_interface(address));
    }
    Ok(Facts {
        links,
        routes,
        bridge_guards,
    })
}

/// A `NETLINK_ROUTE` socket with strict checking (which the kernel needs
/// to take `IFA_TARGET_NETNSID` in an address dump).
struct Netlink {
    socket: Socket,
    seq: u32,
}

impl Netlink {
    fn open() -> io::Result<Netlink> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        socket.set_netlink_get_strict_chk(true)?;
        socket2::SockRef::from(&socket).set_read_timeout(Some(ANSWER_WAIT))?;
        Ok(Netlink { socket, seq: 0 })
    }

    /// Sends one request and collects its answers (a dump's until done).
    fn ask(
        &mut self,
        request: RouteNetlinkMessage,
        dump: bool,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        header.sequence_number = self.seq;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::from(request));
        message.finalize();
        let mut buffer = vec![0; message.header.length as usize];
        message.serialize(&mut buffer);
        self.socket.send(&buffer, 0)?;
        let mut out = Vec::new();
        loop {
            let (datagram, _) = self.socket.recv_from_full()?;
            let mut at = 0;
            while at < datagram.len() {
                let message =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[at..])
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                let length = message.header.length as usize;
                if length == 0 {
                    break;
                }
                at += length;
                if message.header.sequence_number != self.seq {
                    continue;
                }
                match message.payload {
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(error) => {
                        return match error.code {
                            None => Ok(out),
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                        }
                    }
                    NetlinkPayload::InnerMessage(inner) => {
                        out.push(inner);
                        if !dump {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// One link, with what its veth peer holds when it is in another
    /// namespace (unreadable: no peer).
    fn link(&mut self, message: &LinkMessage) -> Link {
        let mut link = Link {
            index: message.header.index,
            name: String::new(),
            kind: None,
            master: None,
            peer: None,
        };
        let (mut peer_index, mut peer_namespace) = (None, None);
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::IfName(name) => link.name = name.clone(),
                LinkAttribute::Controller(master) => link.master = Some(*master),
                LinkAttribute::Link(index) => peer_index = Some(*index),
                LinkAttribute::LinkNetNsId(id) => peer_namespace = Some(*id),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::Kind(kind) = info {
                            link.kind = Some(kind.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Some("veth"), Some(index), Some(namespace)) =
            (link.kind.as_deref(), peer_index, peer_namespace)
        {
            link.peer = self.peer(index, namespace).ok();
        }
        link
    }

    /// The MAC and addresses of interface `index` of namespace id
    /// `namespace`.
    fn peer(&mut self, index: u32, namespace: i32) -> io::Result<Peer> {
        let mut request = LinkMessage::default();
        request.header.index = index;
        request.attributes.push(LinkAttribute::IfNetnsId(namespace));
        let mut peer = Peer::default();
        for message in self.ask(RouteNetlinkMessage::GetLink(request), false)? {
            let RouteNetlinkMessage::NewLink(link) = message else {
                continue;
            };
            peer.mac = link.attributes.iter().find_map(|a| match a {
                LinkAttribute::Address(bytes) => {
                    <[u8; 6]>::try_from(bytes.as_slice()).ok().map(Mac)
                }
                _ => None,
            });
        }
        peer.addresses = self.addresses(Some((index, namespace)))?;
        Ok(peer)
    }

    /// The addresses of interface `index` of namespace id `namespace`, or
    /// of every interface of this namespace: each address's `IFA_LOCAL`,
    /// else its `IFA_ADDRESS` (what `ip addr show` prints as its own).
    fn addresses(&mut self, of: Option<(u32, i32)>) -> io::Result<Vec<IpAddr>> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut request = AddressMessage::default();
            request.header.family = family;
            if let Some((index, namespace)) = of {
                request.header.index = index;
                request
                    .attributes
                    .push(AddressAttribute::TargetNetNsId(namespace));
            }
            for message in self.ask(RouteNetlinkMessage::GetAddress(request), true)? {
                let RouteNetlinkMessage::NewAddress(address) = message else {
                    continue;
                };
                if of.is_some_and(|(index, _)| address.header.index != index) {
                    continue;
                }
                let attribute = |local: bool| {
                    address.attributes.iter().find_map(|a| match a {
                        AddressAttribute::Local(ip) if local => Some(*ip),
                        AddressAttribute::Address(ip) if !local => Some(*ip),
                        _ => None,
                    })
                };
                out.extend(attribute(true).or_else(|| attribute(false)));
            }
        }
        Ok(out)
    }
}

/// Every address on the interfaces of this namespace.
pub fn namespace_addresses() -> io::Result<Vec<IpAddr>> {
    Netlink::open()?.addresses(None)
}
