//! FQDN egress end to end (root only; skipped otherwise).

mod common;

use common::{is_root, within, NetNs};
use tollgate::datapath::ipset_netlink::{EntryOp, IpsetSocket};

#[test]
fn netlink_client_adds_refreshes_and_deletes_entries() {
    if !is_root() {
        return;
    }
    let ns = NetNs::create("fq-nl");
    ns.ok(
        "ipset create tollgate-fqdn-t-v4 hash:ip family inet timeout 300 && \
           ipset create tollgate-fqdn-t-v6 hash:ip family inet6 timeout 300",
    );
    within(&ns, || {
        let mut socket = IpsetSocket::open().unwrap();
        socket
            .apply(&[
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: "10.61.0.1".parse().unwrap(),
                    timeout_secs: 100,
                },
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v6",
                    address: "fd61::1".parse().unwrap(),
                    timeout_secs: 50,
                },
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: "10.61.0.2".parse().unwrap(),
                    timeout_secs: 9,
                },
            ])
            .unwrap();
        socket
            .apply(&[
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: "10.61.0.1".parse().unwrap(),
                    timeout_secs: 1000,
                },
                EntryOp::Del {
                    set: "tollgate-fqdn-t-v4",
                    address: "10.61.0.2".parse().unwrap(),
                },
                EntryOp::Del {
                    set: "tollgate-fqdn-t-v4",
                    address: "10.61.0.9".parse().unwrap(),
                },
            ])
            .unwrap();
        let missing = socket.apply(&[EntryOp::Add {
            set: "tollgate-nope",
            address: "10.61.0.1".parse().unwrap(),
            timeout_secs: 1,
        }]);
        assert!(missing.is_err(), "{missing:?}");
    });
    let save = ns.ok("ipset save");
    eprintln!("{save}");
    assert!(
        save.contains("add tollgate-fqdn-t-v4 10.61.0.1 timeout 99"),
        "{save}"
    );
}
