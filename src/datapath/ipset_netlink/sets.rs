//! Set-level writes of the datapath's reconcile: create, flush, swap and
//! destroy sets and change their members, each a netlink request answered
//! before the next is sent. The commands run in order and the first the
//! kernel refuses ends the write, as `ipset restore` stops at its first
//! failing line, so [`super::super::transition`]'s account of a partial
//! write holds unchanged; what a command means is what its `ipset restore`
//! line ([`SetCommand`]'s `Display`) means, with `-exist`.
//!
//! Wire format, beyond the entry writes of the parent module (what
//! `ipset restore` sends, read with `strace`; this client omits its line
//! numbers and sends one entry a request):
//!
//! ```text
//! CREATE (2), flags REQUEST | ACK | CREATE:
//!   IPSET_ATTR_SETNAME (2), IPSET_ATTR_TYPENAME (3) "hash:ip\0",
//!   IPSET_ATTR_REVISION (4) u8, IPSET_ATTR_FAMILY (5) u8 NFPROTO_*,
//!   IPSET_ATTR_DATA (7 | NESTED) { IPSET_ATTR_TIMEOUT (6 | NBO) u32,
//!                                  IPSET_ATTR_MAXELEM (19 | NBO) u32 }
//!   (a `list:set`: IPSET_ATTR_FAMILY NFPROTO_UNSPEC (0), no DATA options)
//! ADD (9) / DEL (10): IPSET_ATTR_SETNAME, IPSET_ATTR_DATA {
//!   IPSET_ATTR_IP (1 | NESTED) { IPADDR_IPV4 / IPV6 },
//!   or IPSET_ATTR_NAME (18) "member-set\0"          (list:set)
//!   IPSET_ATTR_CIDR (3) u8                       (hash:net, hash:net,iface)
//!   IPSET_ATTR_CADT_FLAGS (8 | NBO) u32 = NOMATCH (4)   (exceptions)
//!   IPSET_ATTR_IFACE (23) "veth1\0"              (hash:net,iface) }
//! FLUSH (4) / DESTROY (3): IPSET_ATTR_SETNAME
//! SWAP (6): IPSET_ATTR_SETNAME, IPSET_ATTR_SETNAME2 (3)
//! TYPE (13), flags REQUEST (answered by a TYPE message, not an ack):
//!   IPSET_ATTR_TYPENAME, IPSET_ATTR_FAMILY → IPSET_ATTR_REVISION u8 (newest)
//! ```
//!
//! Before its first create of a type a socket asks the kernel for the
//! type's newest revision (TYPE), as `ipset` does, and creates with it,
//! capped at what the `ipset` command knows ([`Revisions`]).
//!
//! Without `NLM_F_EXCL` every command is `-exist`: creating a set that
//! exists with the same type and options, adding a present entry and
//! deleting an absent one succeed. Destroying a set that is not there is
//! accepted here, as `ipset restore -exist` accepts it.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{
    address_attr, check_name, parse_acks, string_attr, IpsetSocket, NetlinkError, IPSET_ATTR_DATA,
    IPSET_ATTR_PROTOCOL, IPSET_ATTR_SETNAME, IPSET_ATTR_TIMEOUT, IPSET_CMD_ADD, IPSET_CMD_DEL,
    IPSET_ERR_EXIST, IPSET_ERR_PROTOCOL, IPSET_PROTOCOL, NFNL_SUBSYS_IPSET, NFPROTO_IPV4,
    NFPROTO_IPV6,
};
use crate::datapath::state::{
    Family, CACHE_LIST_TYPE, CACHE_SET_TYPE, RANGE_SET_TYPE, SOURCE_SET_TYPE,
};
use crate::netlink::{
    self, attribute, nest_end, nest_start, NLA_F_NET_BYTEORDER, NLM_F_ACK, NLM_F_REQUEST,
};

const IPSET_CMD_CREATE: u16 = 2;
const IPSET_CMD_DESTROY: u16 = 3;
const IPSET_CMD_FLUSH: u16 = 4;
const IPSET_CMD_SWAP: u16 = 6;
const IPSET_CMD_TYPE: u16 = 13;
const IPSET_ATTR_TYPENAME: u16 = 3;
const IPSET_ATTR_SETNAME2: u16 = 3;
const IPSET_ATTR_REVISION: u16 = 4;
const IPSET_ATTR_FAMILY: u16 = 5;
const IPSET_ATTR_CIDR: u16 = 3;
const IPSET_ATTR_CADT_FLAGS: u16 = 8;
const IPSET_ATTR_MAXELEM: u16 = 19;
const IPSET_ATTR_IFACE: u16 = 23;
/// A member set's name (the entry of a `list:set`).
const IPSET_ATTR_NAME: u16 = 18;
/// The family of a set that holds sets (`list:set`): none of its own.
const NFPROTO_UNSPEC: u8 = 0;
const IPSET_FLAG_NOMATCH: u32 = 1 << 2;
const NLM_F_CREATE: u16 = 0x400;
/// Longest interface name, without the NUL (`IFNAMSIZ` less one).
const MAX_IFACE_NAME: usize = 15;

/// The set types the datapath creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// Addresses: endpoints, learned FQDN addresses.
    HashIp,
    /// Prefixes with `nomatch` exceptions: ipBlocks.
    HashNet,
    /// (prefix, incoming interface) pairs: anti-spoofing sources.
    HashNetIface,
    /// (source, protocol:port, destination) tuples: the verdict cache.
    HashIpPortIp,
    /// Sets: the verdict cache's lookups, holding the sets of the
    /// generation they answer from.
    ListSet,
}

impl SetKind {
    /// The type's name, as `ipset` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            SetKind::HashIp => "hash:ip",
            SetKind::HashNet => RANGE_SET_TYPE,
            SetKind::HashNetIface => SOURCE_SET_TYPE,
            SetKind::HashIpPortIp => CACHE_SET_TYPE,
            SetKind::ListSet => CACHE_LIST_TYPE,
        }
    }

    const ALL: [SetKind; 5] = [
        SetKind::HashIp,
        SetKind::HashNet,
        SetKind::HashNetIface,
        SetKind::HashIpPortIp,
        SetKind::ListSet,
    ];
}

/// The newest revision of each [`SetKind`] the `ipset` command knows. A
/// set is created with the newest revision both the kernel and the
/// command know, the one `ipset restore` would create: the command could
/// not list a set of a revision it does not know (the drift check reads
/// the sets with `ipset save`), and a kernel's newest revision carries
/// its defaults (a kernel gives bucket sizes and hash seeds only to the
/// newest revision of a type). Every feature tollgate uses (timeouts,
/// `nomatch`, `/0` with an interface) is older than Linux 3.19.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revisions([u8; 5]);

impl Revisions {
    /// Reads the "Supported set types" of `ipset help`
    /// (`    hash:ip\t\t6\tbitmask support`, newest first); `Err` names a
    /// type the command does not list.
    pub fn from_help(help: &str) -> Result<Revisions, &'static str> {
        let mut newest = [None; 5];
        for line in help.lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(revision)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(revision) = revision.parse::<u8>() else {
                continue;
            };
            if let Some(kind) = SetKind::ALL.iter().find(|kind| kind.name() == name) {
                let slot: &mut Option<u8> = &mut newest[*kind as usize];
                *slot = Some(slot.map_or(revision, |known| known.max(revision)));
            }
        }
        let mut out = [0; 5];
        for kind in SetKind::ALL {
            out[kind as usize] = newest[kind as usize].ok_or(kind.name())?;
        }
        Ok(Revisions(out))
    }

    /// The newest revision of `kind` the command knows.
    pub fn of(self, kind: SetKind) -> u8 {
        self.0[kind as usize]
    }
}

/// A member of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// An address (`hash:ip`).
    Ip(IpAddr),
    /// A prefix (`hash:net`).
    Net(IpNet),
    /// An address excepted from the set's prefixes (`hash:net`,
    /// `nomatch`).
    Except(IpAddr),
    /// A prefix arriving on an interface (`hash:net,iface`).
    NetIface(IpNet, String),
    /// A set, by name (`list:set`).
    Set(String),
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Ip(address) => write!(f, "{address}"),
            Entry::Net(net) => write!(f, "{net}"),
            Entry::Except(address) => write!(f, "{address} nomatch"),
            Entry::NetIface(net, interface) => write!(f, "{net},{interface}"),
            Entry::Set(name) => f.write_str(name),
        }
    }
}

/// One set-level write: an `ipset restore` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetCommand {
    Create {
        set: String,
        kind: SetKind,
        family: Family,
        /// Entries expire after this many seconds unless written again.
        timeout_secs: Option<u32>,
        /// The most entries the set holds (the kernel's default: 65,536).
        max_entries: Option<u32>,
    },
    Add {
        set: String,
        entry: Entry,
    },
    Del {
        set: String,
        entry: Entry,
    },
    Flush {
        set: String,
    },
    /// Exchanges the contents (and names) of two sets of one type.
    Swap {
        set: String,
        with: String,
    },
    Destroy {
        set: String,
    },
}

impl fmt::Display for SetCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetCommand::Create {
                set,
                kind,
                family,
                timeout_secs,
                max_entries,
            } => {
                write!(f, "create {set} {}", kind.name())?;
                // A `list:set` takes no family: it holds sets of either.
                if *kind != SetKind::ListSet {
                    write!(f, " family {}", family.ipset_family())?;
                }
                if let Some(timeout) = timeout_secs {
                    write!(f, " timeout {timeout}")?;
                }
                if let Some(max) = max_entries {
                    write!(f, " maxelem {max}")?;
                }
                Ok(())
            }
            SetCommand::Add { set, entry } => write!(f, "add {set} {entry}"),
            SetCommand::Del { set, entry } => write!(f, "del {set} {entry}"),
            SetCommand::Flush { set } => write!(f, "flush {set}"),
            SetCommand::Swap { set, with } => write!(f, "swap {set} {with}"),
            SetCommand::Destroy { set } => write!(f, "destroy {set}"),
        }
    }
}

/// A set write the kernel refused, or that could not be asked.
#[derive(Debug, thiserror::Error)]
#[error("ipset {command}: {cause}")]
pub struct SetWriteError {
    /// The command, as its `ipset restore` line.
    pub command: String,
    pub cause: SetWriteCause,
}

#[derive(Debug, thiserror::Error)]
pub enum SetWriteCause {
    #[error("{}", describe(*.0))]
    Refused(i32),
    #[error("{0}")]
    Netlink(NetlinkError),
    #[error("interface name {0:?} is longer than {MAX_IFACE_NAME} bytes")]
    InterfaceName(String),
}

/// What the kernel's answer `code` (an errno, or an ipset code above
/// 4096) means, in `ipset`'s words where it has them.
fn describe(code: i32) -> String {
    let what = match code {
        libc::ENOENT => "the set does not exist",
        libc::EEXIST => "a set of that name exists with another type or options",
        4097 => "kernel and tollgate disagree on the ipset protocol",
        4098 => "the kernel does not know this set type or revision",
        4099 => "the kernel's limit on the number of sets is reached",
        4100 => "the set is in use by a rule",
        4101 => "the second set of the swap does not exist",
        4102 => "the two sets of the swap are of different types",
        4103 => "the set or entry exists (or, deleting, does not)",
        4104 => "the prefix length is invalid for this set",
        4106 => "the family is invalid for this set",
        4107 => "the set was created without timeouts",
        4108 => "the set is referenced by another set",
        4109 | 4110 => "the address does not fit the set's family",
        4352 => "the set is full (hash is full)",
        _ => return format!("kernel error {code}"),
    };
    format!("{what} (kernel error {code})")
}

/// Appends the request for `command` with sequence number `seq` to `out`;
/// a set is created with type `revision`.
pub fn encode(
    command: &SetCommand,
    revision: u8,
    seq: u32,
    out: &mut Vec<u8>,
) -> Result<(), SetWriteCause> {
    let (kind, flags, set) = match command {
        SetCommand::Create { set, .. } => (IPSET_CMD_CREATE, NLM_F_CREATE, set),
        SetCommand::Add { set, .. } => (IPSET_CMD_ADD, 0, set),
        SetCommand::Del { set, .. } => (IPSET_CMD_DEL, 0, set),
        SetCommand::Flush { set } => (IPSET_CMD_FLUSH, 0, set),
        SetCommand::Swap { set, .. } => (IPSET_CMD_SWAP, 0, set),
        SetCommand::Destroy { set } => (IPSET_CMD_DESTROY, 0, set),
    };
    let start = netlink::begin(
        out,
        (NFNL_SUBSYS_IPSET << 8) | kind,
        NLM_F_REQUEST | NLM_F_ACK | flags,
        seq,
    );
    // The set's family is an attribute of its creation; `ipset` puts
    // NFPROTO_IPV4 in the header of every request.
    out.extend_from_slice(&[NFPROTO_IPV4, 0, 0, 0]);
    attribute(out, IPSET_ATTR_PROTOCOL, &[IPSET_PROTOCOL]);
    name_attr(out, IPSET_ATTR_SETNAME, set)?;
    match command {
        SetCommand::Create {
            kind,
            family,
            timeout_secs,
            max_entries,
            ..
        } => {
            type_name_attr(out, *kind);
            attribute(out, IPSET_ATTR_REVISION, &[revision]);
            let family = match (kind, family) {
                (SetKind::ListSet, _) => NFPROTO_UNSPEC,
                (_, Family::V4) => NFPROTO_IPV4,
                (_, Family::V6) => NFPROTO_IPV6,
            };
            attribute(out, IPSET_ATTR_FAMILY, &[family]);
            let data = nest_start(out, IPSET_ATTR_DATA);
            if let Some(timeout) = timeout_secs {
                attribute(
                    out,
                    IPSET_ATTR_TIMEOUT | NLA_F_NET_BYTEORDER,
                    &timeout.to_be_bytes(),
                );
            }
            if let Some(max) = max_entries {
                attribute(
                    out,
                    IPSET_ATTR_MAXELEM | NLA_F_NET_BYTEORDER,
                    &max.to_be_bytes(),
                );
            }
            nest_end(out, data);
        }
        SetCommand::Add { entry, .. } | SetCommand::Del { entry, .. } => {
            let data = nest_start(out, IPSET_ATTR_DATA);
            match entry {
                Entry::Ip(address) => address_attr(out, super::IPSET_ATTR_IP, *address),
                Entry::Net(net) => net_attrs(out, net),
                Entry::Except(address) => {
                    address_attr(out, super::IPSET_ATTR_IP, *address);
                    attribute(
                        out,
                        IPSET_ATTR_CADT_FLAGS | NLA_F_NET_BYTEORDER,
                        &IPSET_FLAG_NOMATCH.to_be_bytes(),
                    );
                }
                Entry::NetIface(net, interface) => {
                    if interface.len() > MAX_IFACE_NAME || interface.as_bytes().contains(&0) {
                        return Err(SetWriteCause::InterfaceName(interface.clone()));
                    }
                    net_attrs(out, net);
                    string_attr(out, IPSET_ATTR_IFACE, interface);
                }
                Entry::Set(name) => name_attr(out, IPSET_ATTR_NAME, name)?,
            }
            nest_end(out, data);
        }
        SetCommand::Swap { with, .. } => name_attr(out, IPSET_ATTR_SETNAME2, with)?,
        SetCommand::Flush { .. } | SetCommand::Destroy { .. } => {}
    }
    netlink::end(out, start);
    Ok(())
}

/// Appends the request for the kernel's revisions of set type `kind`
/// (as `ipset` asks before it creates a set of a type).
pub fn encode_type_query(kind: SetKind, seq: u32, out: &mut Vec<u8>) {
    let start = netlink::begin(
        out,
        (NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_TYPE,
        NLM_F_REQUEST,
        seq,
    );
    out.extend_from_slice(&[NFPROTO_IPV4, 0, 0, 0]);
    attribute(out, IPSET_ATTR_PROTOCOL, &[IPSET_PROTOCOL]);
    type_name_attr(out, kind);
    attribute(out, IPSET_ATTR_FAMILY, &[NFPROTO_IPV4]);
    netlink::end(out, start);
}

/// The answer to type query `seq` in `bytes`, when they hold it: the
/// kernel's newest revision of the type, or its error code.
pub fn parse_type_reply(bytes: &[u8], seq: u32) -> Option<Result<u8, i32>> {
    for message in netlink::messages(bytes) {
        let message = message.ok()?;
        if message.seq != seq {
            continue;
        }
        if let Some(errno) = message.errno() {
            return Some(Err(errno));
        }
        if message.kind != (NFNL_SUBSYS_IPSET << 8) | IPSET_CMD_TYPE {
            continue;
        }
        let revision = netlink::attributes(message.body.get(4..)?)
            .map_while(Result::ok)
            .find_map(|(kind, value)| (kind == IPSET_ATTR_REVISION).then(|| value.first().copied()))
            .flatten();
        return Some(revision.ok_or(IPSET_ERR_PROTOCOL));
    }
    None
}

/// A type name attribute.
fn type_name_attr(out: &mut Vec<u8>, kind: SetKind) {
    string_attr(out, IPSET_ATTR_TYPENAME, kind.name());
}

/// A set name attribute, once the kernel would take the name.
fn name_attr(out: &mut Vec<u8>, kind: u16, set: &str) -> Result<(), SetWriteCause> {
    check_name(set).map_err(SetWriteCause::Netlink)?;
    string_attr(out, kind, set);
    Ok(())
}

/// A prefix: its address and its length.
fn net_attrs(out: &mut Vec<u8>, net: &IpNet) {
    address_attr(out, super::IPSET_ATTR_IP, net.addr());
    attribute(out, IPSET_ATTR_CIDR, &[net.prefix_len()]);
}

/// Whether the kernel's refusal `code` of `command` is what `-exist`
/// accepts.
fn tolerated(command: &SetCommand, code: i32) -> bool {
    match command {
        SetCommand::Del { .. } => code == IPSET_ERR_EXIST,
        SetCommand::Destroy { .. } => code == libc::ENOENT,
        _ => false,
    }
}

impl IpsetSocket {
    /// Runs `commands` in order, each answered before the next is sent;
    /// stops at the first the kernel refuses (what ran before it stays).
    /// Sets are created with revisions up to `known`'s.
    pub fn run(&mut self, commands: &[SetCommand], known: Revisions) -> Result<(), SetWriteError> {
        for command in commands {
            self.run_one(command, known)
                .map_err(|cause| SetWriteError {
                    command: command.to_string(),
                    cause,
                })?;
        }
        Ok(())
    }

    fn run_one(&mut self, command: &SetCommand, known: Revisions) -> Result<(), SetWriteCause> {
        let revision = match command {
            SetCommand::Create { kind, .. } => self.kernel_revision(*kind)?.min(known.of(*kind)),
            _ => 0,
        };
        self.buf.clear();
        self.seq = self.seq.wrapping_add(1);
        encode(command, revision, self.seq, &mut self.buf)?;
        let code = self.exchange(|reply, seq| {
            let acks = parse_acks(reply).map_err(SetWriteCause::Netlink)?;
            // An ack of an earlier request that timed out is skipped.
            Ok(acks
                .iter()
                .find(|(acked, _)| *acked == seq)
                .map(|&(_, code)| -code))
        })?;
        if code == 0 || tolerated(command, code) {
            Ok(())
        } else {
            Err(SetWriteCause::Refused(code))
        }
    }

    /// The kernel's newest revision of `kind`, asked once per socket.
    fn kernel_revision(&mut self, kind: SetKind) -> Result<u8, SetWriteCause> {
        if let Some(revision) = self.revisions[kind as usize] {
            return Ok(revision);
        }
        self.buf.clear();
        self.seq = self.seq.wrapping_add(1);
        encode_type_query(kind, self.seq, &mut self.buf);
        let kernel = self
            .exchange(|reply, seq| Ok(parse_type_reply(reply, seq)))?
            .map_err(SetWriteCause::Refused)?;
        self.revisions[kind as usize] = Some(kernel);
        Ok(kernel)
    }

    /// Sends the request in the buffer and reads replies until `answer`
    /// finds the one to it (by the request's sequence number).
    fn exchange<T>(
        &mut self,
        mut answer: impl FnMut(&[u8], u32) -> Result<Option<T>, SetWriteCause>,
    ) -> Result<T, SetWriteCause> {
        let socket_error = |error| SetWriteCause::Netlink(NetlinkError::Socket(error));
        self.socket.send(&self.buf).map_err(socket_error)?;
        let mut reply = [0u8; 1024];
        loop {
            let n = self.receive(&mut reply).map_err(socket_error)?;
            if let Some(found) = answer(&reply[..n], self.seq)? {
                return Ok(found);
            }
        }
    }
}

#[cfg(test)]
mod tests;
