//! The datapath library (`tollgate::datapath::Kernel`) against the kernel,
//! without the agent: rules exactly as `iptables-save` prints them,
//! idempotent installs, reconciling what a crash left, and a teardown that
//! removes what tollgate owns and nothing else.

use crate::harness::Lab;
use tollgate::config::{AgentConfig, MachineDefaults, Setting};
use tollgate::datapath::{desired, reconcile, teardown, Changes, Family, Iptables, Kernel};
use tollgate::ruleset::Enforced;

fn enforced(node_ingress: bool, endpoints: &[&str]) -> Enforced {
    Enforced {
        node_ingress,
        node_egress: false,
        endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        verdict_cache: None,
        ..Enforced::default()
    }
}

#[test]
fn install_is_idempotent_and_teardown_leaves_foreign_rules() {
    let Some(lab) = Lab::builder("install_is_idempotent_and_teardown_leaves_foreign_rules").build()
    else {
        return;
    };
    let ns = lab.node();
    // The kernel calls below run on a thread inside the namespace.
    ns.enter(|| {
        let defaults = MachineDefaults {
            node_name: "n".into(),
            queues: 2,
        };
        let settings = [
            "datapath.interfaces=['veth*']",
            "datapath.privileged=['10.9.0.0/16,tcp/22', 'fd00:9::/64,icmp', '10.8.0.1,udp']",
            "datapath.failMode=open",
        ]
        .map(|s| s.parse::<Setting>().unwrap());
        let config = AgentConfig::load(&defaults, None, &settings)
            .unwrap()
            .config;
        let queues = config.queue_numbers();
        ns.ok(
            "iptables -A INPUT -s 192.0.2.1 -j DROP && ip6tables -A OUTPUT -d 2001:db8::1 -j DROP \
               && ipset create foreign hash:ip",
        );
        let mut kernel = Iptables::detect().unwrap();
        let plan = desired(
            &config.datapath,
            &queues,
            &enforced(true, &["10.0.0.5", "fd00::5"]),
            &[],
        );
        assert!(
            reconcile(&mut kernel, &plan).unwrap(),
            "first install changes"
        );
        let after = kernel.installed().unwrap();
        let diff = Changes::between(&plan, &after);
        assert!(
            diff.is_empty(),
            "iptables-save differs from the plan: {diff:#?}"
        );
        assert!(
            !reconcile(&mut kernel, &plan).unwrap(),
            "second install is a no-op"
        );
        let save = ns.ok("iptables-save -t filter");
        assert!(
            save.contains("-A INPUT -j TOLLGATE-INPUT\n-A INPUT -s 192.0.2.1/32 -j DROP"),
            "{save}"
        );

        // Membership change: the set is swapped, the rules stay.
        let grown = desired(
            &config.datapath,
            &queues,
            &enforced(true, &["10.0.0.5", "10.0.0.6", "fd00::5"]),
            &[],
        );
        assert!(reconcile(&mut kernel, &grown).unwrap());
        assert!(ns
            .ok("ipset list tollgate-endpoints-v4")
            .contains("10.0.0.6"));
        assert!(Changes::between(&grown, &kernel.installed().unwrap()).is_empty());

        // What a crashed agent of another configuration left behind.
        ns.ok(
            "iptables -N TOLLGATE-OLD && iptables -I INPUT 1 -j TOLLGATE-OLD \
               && iptables -I FORWARD 1 -j TOLLGATE-FORWARD && ipset create tollgate-stale hash:ip",
        );
        assert!(reconcile(&mut kernel, &grown).unwrap());
        assert!(Changes::between(&grown, &kernel.installed().unwrap()).is_empty());
        let save = ns.ok("iptables-save -t filter");
        assert_eq!(save.matches("-j TOLLGATE-FORWARD").count(), 1, "{save}");
        assert!(!save.contains("TOLLGATE-OLD"), "{save}");
        assert!(!ns.ok("ipset list -n").contains("tollgate-stale"));

        teardown(&mut kernel).unwrap();
        let v4 = ns.ok("iptables-save -t filter");
        let v6 = ns.ok("ip6tables-save -t filter");
        assert!(
            !v4.contains("TOLLGATE") && !v6.contains("TOLLGATE"),
            "{v4}{v6}"
        );
        assert!(v4.contains("-A INPUT -s 192.0.2.1/32 -j DROP"), "{v4}");
        assert!(v6.contains("-A OUTPUT -d 2001:db8::1/128 -j DROP"), "{v6}");
        assert_eq!(ns.ok("ipset list -n").trim(), "foreign");
    });
}

/// The datapath's set writes over netlink leave what `ipset restore
/// -exist` of the same lines leaves: one of each command the reconcile
/// sends, run both ways under different names and compared in `ipset
/// save` (the header options that only later type revisions print, bucket
/// size and hash seed, left out). Then a refused command stops the write
/// with the kernel's reason, and what ran before it stays.
///
/// Mutation (tried): `nomatch` not flagged (`Entry::Except` encoded as
/// `Entry::Ip`) → the saved line lacks `nomatch` → fails.
#[test]
fn netlink_set_writes_match_ipset_restore() {
    use tollgate::datapath::ipset_netlink::{
        Entry, IpsetSocket, Revisions, SetCommand, SetKind, SetWriteCause,
    };

    let Some(lab) = Lab::builder("netlink_set_writes_match_ipset_restore").build() else {
        return;
    };
    let ns = lab.node();
    let commands = |p: &str| {
        let set = |name: &str| format!("{p}-{name}");
        let create = |name: &str, kind, family, timeout_secs, max_entries| SetCommand::Create {
            set: set(name),
            kind,
            family,
            timeout_secs,
            max_entries,
        };
        let add = |name: &str, entry| SetCommand::Add {
            set: set(name),
            entry,
        };
        let ip = |s: &str| s.parse().unwrap();
        let net = |s: &str| s.parse().unwrap();
        vec![
            create("ep4", SetKind::HashIp, Family::V4, None, None),
            add("ep4", Entry::Ip(ip("10.0.0.1"))),
            add("ep4", Entry::Ip(ip("10.0.0.2"))),
            SetCommand::Del {
                set: set("ep4"),
                entry: Entry::Ip(ip("10.0.0.2")),
            },
            SetCommand::Del {
                set: set("ep4"),
                entry: Entry::Ip(ip("10.0.0.9")),
            },
            // Again: exists with the same type and options.
            create("ep4", SetKind::HashIp, Family::V4, None, None),
            create("ep6", SetKind::HashIp, Family::V6, None, None),
            add("ep6", Entry::Ip(ip("fd00::5"))),
            create("learned", SetKind::HashIp, Family::V6, Some(300), None),
            create(
                "cache",
                SetKind::HashIpPortIp,
                Family::V4,
                Some(60),
                Some(4096),
            ),
            // The cache's lookup set: holds a set, then a second one,
            // which it lets go again.
            create("list", SetKind::ListSet, Family::V4, None, None),
            add("list", Entry::Set(set("cache"))),
            create(
                "cache6",
                SetKind::HashIpPortIp,
                Family::V6,
                Some(60),
                Some(4096),
            ),
            add("list", Entry::Set(set("cache6"))),
            SetCommand::Del {
                set: set("list"),
                entry: Entry::Set(set("cache6")),
            },
            create("ranges", SetKind::HashNet, Family::V4, None, None),
            add("ranges", Entry::Net(net("10.1.0.0/16"))),
            add("ranges", Entry::Except(ip("10.1.2.3"))),
            add("ranges", Entry::Net(net("192.0.2.7/32"))),
            create("src", SetKind::HashNetIface, Family::V6, None, None),
            create("src-next", SetKind::HashNetIface, Family::V6, None, None),
            SetCommand::Flush {
                set: set("src-next"),
            },
            add(
                "src-next",
                Entry::NetIface(net("fe80::/10"), "veth-a1".into()),
            ),
            add("src-next", Entry::NetIface(net("::/0"), "lo".into())),
            SetCommand::Swap {
                set: set("src-next"),
                with: set("src"),
            },
            SetCommand::Destroy {
                set: set("src-next"),
            },
            SetCommand::Destroy {
                set: set("never-made"),
            },
        ]
    };
    let known = Revisions::from_help(&ns.ok("ipset help")).unwrap();
    let by_netlink = commands("nl");
    ns.enter(|| IpsetSocket::open().unwrap().run(&by_netlink, known))
        .expect("netlink writes");
    let lines: String = commands("rs").iter().map(|c| format!("{c}\n")).collect();
    let restore = ns
        .command(&["ipset", "restore", "-exist"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(lines.as_bytes())?;
            child.wait_with_output()
        })
        .expect("ipset restore");
    assert!(
        restore.status.success(),
        "{lines}{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    let save = ns.ok("ipset save");
    // Each prefix's lines, named alike, without what only later
    // revisions print.
    let saved = |prefix: &str| -> Vec<String> {
        let mut lines: Vec<String> = save
            .lines()
            .filter(|line| {
                line.split_whitespace()
                    .nth(1)
                    .is_some_and(|name| name.starts_with(prefix))
            })
            .map(|line| {
                let mut words = line.split_whitespace().peekable();
                let mut out = Vec::new();
                while let Some(word) = words.next() {
                    if matches!(word, "bucketsize" | "initval") {
                        words.next();
                        continue;
                    }
                    out.push(word.replacen(prefix, "x-", 1));
                }
                out.join(" ")
            })
            .collect();
        lines.sort();
        lines
    };
    let (netlink, restored) = (saved("nl-"), saved("rs-"));
    assert_eq!(netlink.len(), 16, "{save}");
    assert_eq!(netlink, restored, "{save}");
    assert!(
        netlink.contains(&"add x-ranges 10.1.2.3 nomatch".to_string()),
        "{netlink:#?}"
    );
    assert!(
        netlink.contains(&"add x-list x-cache".to_string()),
        "{netlink:#?}"
    );
    // Of the revision `ipset restore` chose: the newest the kernel and
    // the command both know.
    for name in ["ep4", "learned", "cache", "list", "ranges", "src"] {
        let revision = |p: &str| {
            let listed = ns.ok(&format!("ipset list {p}-{name}"));
            listed
                .lines()
                .find(|line| line.starts_with("Revision:"))
                .map(str::to_string)
                .unwrap_or_else(|| panic!("{listed}"))
        };
        assert_eq!(revision("nl"), revision("rs"), "{name}");
    }

    // A refused command ends the write: the set before it exists, the one
    // after it does not; a set a rule uses is not destroyed.
    ns.ok("iptables -A INPUT -m set --match-set nl-ep4 src -j ACCEPT");
    let stopped = ns.enter(|| {
        IpsetSocket::open().unwrap().run(
            &[
                SetCommand::Create {
                    set: "nl-before".into(),
                    kind: SetKind::HashIp,
                    family: Family::V4,
                    timeout_secs: None,
                    max_entries: None,
                },
                SetCommand::Destroy {
                    set: "nl-ep4".into(),
                },
                SetCommand::Flush {
                    set: "nl-ep6".into(),
                },
            ],
            known,
        )
    });
    let error = stopped.expect_err("a set in use is not destroyed");
    assert!(
        matches!(error.cause, SetWriteCause::Refused(4100)),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "ipset destroy nl-ep4: the set is in use by a rule (kernel error 4100)"
    );
    let names = ns.ok("ipset list -n");
    assert!(
        names.contains("nl-before") && names.contains("nl-ep4"),
        "{names}"
    );
    assert!(
        ns.ok("ipset list nl-ep6").contains("fd00::5"),
        "the flush after the refusal did not run"
    );
}
