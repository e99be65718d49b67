//! Each command's bytes against what `ipset restore` (v7.17) sent for the
//! same line (`strace -e trace=sendto -xx`), less the two differences
//! this client makes on purpose: protocol 6 (libipset says 7; the kernel
//! accepts 6 to 7) and no `IPSET_ATTR_LINENO`.

use super::*;

/// The request header and the protocol and set name attributes every
/// command starts with.
fn head(total: u32, cmd: u16, flags: u16, seq: u32, set: &str) -> Vec<u8> {
    let mut want = Vec::new();
    want.extend(total.to_ne_bytes());
    want.extend(((6u16 << 8) | cmd).to_ne_bytes());
    want.extend(flags.to_ne_bytes());
    want.extend(seq.to_ne_bytes());
    want.extend(0u32.to_ne_bytes());
    want.extend([2, 0, 0, 0]); // NFPROTO_IPV4, as libipset sends for every set
    want.extend(5u16.to_ne_bytes());
    want.extend(1u16.to_ne_bytes());
    want.extend([6, 0, 0, 0]);
    attr(&mut want, 2, &[set.as_bytes(), b"\0"].concat());
    want
}

fn attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend((len as u16).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(value);
    out.resize(out.len() + (len.next_multiple_of(4) - len), 0);
}

fn encoded(command: &SetCommand) -> Vec<u8> {
    encoded_as(command, 0)
}

fn encoded_as(command: &SetCommand, revision: u8) -> Vec<u8> {
    let mut out = Vec::new();
    encode(command, revision, 9, &mut out).unwrap();
    assert_eq!(
        u32::from_ne_bytes(out[..4].try_into().unwrap()) as usize,
        out.len(),
        "the header's length is the message's"
    );
    out
}

const REQUEST_ACK: u16 = 0x1 | 0x4;

#[test]
fn create_carries_type_revision_family_and_options() {
    let command = SetCommand::Create {
        set: "t-c".into(),
        kind: SetKind::HashIpPortIp,
        family: Family::V4,
        timeout_secs: Some(60),
        max_entries: Some(65536),
    };
    assert_eq!(
        command.to_string(),
        "create t-c hash:ip,port,ip family inet timeout 60 maxelem 65536"
    );
    let got = encoded_as(&command, 6);
    let mut want = head(92, 2, REQUEST_ACK | 0x400, 9, "t-c");
    attr(&mut want, 3, b"hash:ip,port,ip\0");
    attr(&mut want, 4, &[6]);
    attr(&mut want, 5, &[2]);
    want.extend(20u16.to_ne_bytes());
    want.extend((7u16 | 0x8000).to_ne_bytes());
    attr(&mut want, 6 | 0x4000, &60u32.to_be_bytes());
    attr(&mut want, 19 | 0x4000, &65536u32.to_be_bytes());
    assert_eq!(got, want);

    // An IPv6 set without options: an empty data attribute, as libipset's.
    let command = SetCommand::Create {
        set: "t-s".into(),
        kind: SetKind::HashNetIface,
        family: Family::V6,
        timeout_secs: None,
        max_entries: None,
    };
    assert_eq!(
        command.to_string(),
        "create t-s hash:net,iface family inet6"
    );
    let mut want = head(76, 2, REQUEST_ACK | 0x400, 9, "t-s");
    attr(&mut want, 3, b"hash:net,iface\0");
    attr(&mut want, 4, &[8]);
    attr(&mut want, 5, &[10]);
    want.extend(4u16.to_ne_bytes());
    want.extend((7u16 | 0x8000).to_ne_bytes());
    assert_eq!(encoded_as(&command, 8), want);
}

/// `IPSET_ATTR_DATA` holding `IPSET_ATTR_IP` with an IPv4 address, then
/// `rest`.
fn data_v4(want: &mut Vec<u8>, octets: [u8; 4], rest: &[u8]) {
    want.extend((4 + 12 + rest.len() as u16).to_ne_bytes());
    want.extend((7u16 | 0x8000).to_ne_bytes());
    want.extend(12u16.to_ne_bytes());
    want.extend((1u16 | 0x8000).to_ne_bytes());
    attr(want, 1 | 0x4000, &octets);
    want.extend(rest);
}

#[test]
fn entries_carry_prefix_length_nomatch_and_interface() {
    let address = SetCommand::Del {
        set: "t-ip".into(),
        entry: Entry::Ip("10.0.0.2".parse().unwrap()),
    };
    assert_eq!(address.to_string(), "del t-ip 10.0.0.2");
    let mut want = head(56, 10, REQUEST_ACK, 9, "t-ip");
    data_v4(&mut want, [10, 0, 0, 2], &[]);
    assert_eq!(encoded(&address), want);

    let net = SetCommand::Add {
        set: "t-n".into(),
        entry: Entry::Net("10.1.0.0/16".parse().unwrap()),
    };
    assert_eq!(net.to_string(), "add t-n 10.1.0.0/16");
    let mut cidr = Vec::new();
    attr(&mut cidr, 3, &[16]);
    let mut want = head(60, 9, REQUEST_ACK, 9, "t-n");
    data_v4(&mut want, [10, 1, 0, 0], &cidr);
    assert_eq!(encoded(&net), want);

    let except = SetCommand::Add {
        set: "t-n".into(),
        entry: Entry::Except("10.1.2.3".parse().unwrap()),
    };
    assert_eq!(except.to_string(), "add t-n 10.1.2.3 nomatch");
    let mut flags = Vec::new();
    attr(&mut flags, 8 | 0x4000, &4u32.to_be_bytes());
    let mut want = head(60, 9, REQUEST_ACK, 9, "t-n");
    data_v4(&mut want, [10, 1, 2, 3], &flags);
    assert_eq!(encoded(&except), want);

    let source = SetCommand::Add {
        set: "t-s".into(),
        entry: Entry::NetIface("fe80::/10".parse().unwrap(), "veth1".into()),
    };
    assert_eq!(source.to_string(), "add t-s fe80::/10,veth1");
    let got = encoded(&source);
    // The data attribute as libipset wrote it, less its line number.
    let mut data = vec![0x30, 0x00, 0x07, 0x80, 0x18, 0x00, 0x01, 0x80];
    data.extend([0x14, 0x00, 0x02, 0x40, 0xfe, 0x80]);
    data.extend([0; 14]);
    data.extend([0x05, 0x00, 0x03, 0x00, 0x0a, 0x00, 0x00, 0x00]);
    data.extend([0x0a, 0x00, 0x17, 0x00]);
    data.extend(b"veth1\0\0\0");
    let mut want = head(36 + data.len() as u32, 9, REQUEST_ACK, 9, "t-s");
    want.extend(data);
    assert_eq!(got, want);
}

#[test]
fn flush_swap_and_destroy_name_their_sets() {
    let flush = SetCommand::Flush {
        set: "t-s-next".into(),
    };
    assert_eq!(flush.to_string(), "flush t-s-next");
    assert_eq!(
        encoded(&flush),
        head(44, 4, REQUEST_ACK, 9, "t-s-next"),
        "as libipset's, 44 bytes"
    );
    let swap = SetCommand::Swap {
        set: "t-s-next".into(),
        with: "t-s".into(),
    };
    assert_eq!(swap.to_string(), "swap t-s-next t-s");
    let mut want = head(52, 6, REQUEST_ACK, 9, "t-s-next");
    attr(&mut want, 3, b"t-s\0");
    assert_eq!(encoded(&swap), want);
    let destroy = SetCommand::Destroy {
        set: "t-s-next".into(),
    };
    assert_eq!(destroy.to_string(), "destroy t-s-next");
    assert_eq!(encoded(&destroy), head(44, 3, REQUEST_ACK, 9, "t-s-next"));
}

#[test]
fn names_the_kernel_would_not_take_are_refused_before_sending() {
    let long_set = SetCommand::Flush {
        set: "x".repeat(32),
    };
    assert!(matches!(
        encode(&long_set, 0, 1, &mut Vec::new()),
        Err(SetWriteCause::Netlink(NetlinkError::SetName { .. }))
    ));
    let long_interface = SetCommand::Add {
        set: "s".into(),
        entry: Entry::NetIface("10.0.0.0/8".parse().unwrap(), "a".repeat(16)),
    };
    assert!(matches!(
        encode(&long_interface, 0, 1, &mut Vec::new()),
        Err(SetWriteCause::InterfaceName(_))
    ));
}

#[test]
fn exist_semantics_tolerate_what_ipset_restore_exist_does() {
    let del = SetCommand::Del {
        set: "s".into(),
        entry: Entry::Ip("10.0.0.1".parse().unwrap()),
    };
    let destroy = SetCommand::Destroy { set: "s".into() };
    assert!(tolerated(&del, IPSET_ERR_EXIST));
    assert!(tolerated(&destroy, libc::ENOENT));
    assert!(!tolerated(&destroy, 4100), "a set in use is an error");
    assert!(!tolerated(&del, libc::ENOENT), "a missing set is an error");
    let error = SetWriteError {
        command: destroy.to_string(),
        cause: SetWriteCause::Refused(4100),
    };
    assert_eq!(
        error.to_string(),
        "ipset destroy s: the set is in use by a rule (kernel error 4100)"
    );
}

#[test]
fn the_kernels_revision_is_asked_as_ipset_asks_it() {
    let mut got = Vec::new();
    encode_type_query(SetKind::HashIp, 9, &mut got);
    let mut want = Vec::new();
    want.extend(48u32.to_ne_bytes());
    want.extend(((6u16 << 8) | 13).to_ne_bytes());
    want.extend(1u16.to_ne_bytes()); // REQUEST only: the answer is the reply
    want.extend(9u32.to_ne_bytes());
    want.extend(0u32.to_ne_bytes());
    want.extend([2, 0, 0, 0]);
    attr(&mut want, 1, &[6]);
    attr(&mut want, 3, b"hash:ip\0");
    attr(&mut want, 5, &[2]);
    assert_eq!(got, want);

    // The kernel's answer (Linux 6.18): newest revision 6, oldest 0.
    let reply = |seq: u32| {
        let mut reply = Vec::new();
        reply.extend(64u32.to_ne_bytes());
        reply.extend(((6u16 << 8) | 13).to_ne_bytes());
        reply.extend(0u16.to_ne_bytes());
        reply.extend(seq.to_ne_bytes());
        reply.extend(4242u32.to_ne_bytes());
        reply.extend([2, 0, 0, 0]);
        attr(&mut reply, 1, &[7]);
        attr(&mut reply, 3, b"hash:ip\0");
        attr(&mut reply, 5, &[2]);
        attr(&mut reply, 4, &[6]);
        attr(&mut reply, 10, &[0]);
        reply
    };
    assert_eq!(parse_type_reply(&reply(9), 9), Some(Ok(6)));
    assert_eq!(parse_type_reply(&reply(8), 9), None, "another request's");

    // Refused: an NLMSG_ERROR naming the request.
    let mut error = Vec::new();
    error.extend(36u32.to_ne_bytes());
    error.extend(2u16.to_ne_bytes());
    error.extend(0u16.to_ne_bytes());
    error.extend(9u32.to_ne_bytes());
    error.extend(0u32.to_ne_bytes());
    error.extend((-4098i32).to_ne_bytes());
    error.extend(48u32.to_ne_bytes());
    error.extend(0u32.to_ne_bytes());
    error.extend(9u32.to_ne_bytes());
    error.extend(0u32.to_ne_bytes());
    assert_eq!(parse_type_reply(&error, 9), Some(Err(4098)));
}

#[test]
fn the_commands_revisions_are_read_from_its_help() {
    // `ipset help` of ipset 7.17, cut.
    let help = "ipset v7.17\n\nUsage: ipset [options] COMMAND\n\nSupported set types:\n\
    list:set\t\t3\tskbinfo support\n\
    hash:net,iface\t8\tbucketsize, initval support\n\
    hash:net,iface\t7\tskbinfo and wildcard support\n\
    hash:net\t\t7\tbucketsize, initval support\n\
    hash:ip,port,net\t8\tbucketsize, initval support\n\
    hash:ip,port,ip\t6\tbucketsize, initval support\n\
    hash:ip\t\t6\tbitmask support\n\
    hash:ip\t\t5\tbucketsize, initval support\n\
    bitmap:port\t\t4\tbucketsize, initval support\n";
    let known = Revisions::from_help(help).unwrap();
    assert_eq!(known.of(SetKind::HashIp), 6);
    assert_eq!(known.of(SetKind::HashNet), 7);
    assert_eq!(known.of(SetKind::HashNetIface), 8);
    assert_eq!(known.of(SetKind::HashIpPortIp), 6);
    let without = help.replace("hash:net\t", "hash:nets\t");
    assert_eq!(Revisions::from_help(&without), Err("hash:net"));
}
