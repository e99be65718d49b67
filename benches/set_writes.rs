//! The set writes of one ruleset switch (root only), both ways in the same
//! run, in a network namespace of its own: `ipset restore -exist` (three
//! processes, as the reconcile ran until it wrote over netlink) against
//! the netlink client the reconcile uses now (`IpsetSocket::run`, one
//! socket a write, as `datapath::kernel` opens them). A switch, as the
//! verdict cache and an endpoint change make it: the next generation's 18
//! cache sets created, one endpoint address added and the one before it
//! removed, the last generation's 18 sets destroyed.
//!
//! `cargo bench --bench set_writes` (5 interleaved rounds of 50 switches
//! each way; prints per switch the median over rounds of wall time and of
//! CPU time, the process's and its children's); `cargo test --bench
//! set_writes` is a smoke run of one round of 3.
#![allow(unsafe_code)] // the bench enters a namespace (setns), checks its uid, reads rusage.
#![allow(clippy::disallowed_methods)] // benches run programs and read the clock.

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::datapath::ipset_netlink::{Entry, IpsetSocket, Revisions, SetCommand, SetKind};
use tollgate::datapath::Family;

/// Sets of one verdict cache generation (`docs/design/verdict-cache.md`).
const CACHE_SETS: usize = 18;
const ENDPOINTS: &str = "tollgate-bench-ep";

/// The three writes of switch `n`: create generation `n`'s sets and
/// change the endpoint set; destroy generation `n - 1`'s.
fn switch(n: usize) -> [Vec<SetCommand>; 3] {
    let cache = |generation: usize, i: usize| format!("tollgate-bench-{generation}-{i}");
    let create = (0..CACHE_SETS)
        .map(|i| SetCommand::Create {
            set: cache(n, i),
            kind: SetKind::HashIpPortIp,
            family: if i % 2 == 0 { Family::V4 } else { Family::V6 },
            timeout_secs: Some(120),
            max_entries: Some(65_536),
        })
        .collect();
    let address = |k: usize| IpAddr::V4(Ipv4Addr::new(10, 7, (k / 250) as u8, (k % 250) as u8 + 1));
    let members = vec![
        SetCommand::Create {
            set: ENDPOINTS.into(),
            kind: SetKind::HashIp,
            family: Family::V4,
            timeout_secs: None,
            max_entries: None,
        },
        SetCommand::Add {
            set: ENDPOINTS.into(),
            entry: Entry::Ip(address(n)),
        },
        SetCommand::Del {
            set: ENDPOINTS.into(),
            entry: Entry::Ip(address(n.wrapping_sub(1))),
        },
    ];
    let destroy = (0..CACHE_SETS)
        .map(|i| SetCommand::Destroy {
            set: cache(n.wrapping_sub(1), i),
        })
        .collect();
    [create, members, destroy]
}

fn by_restore(writes: &[Vec<SetCommand>; 3]) {
    for commands in writes {
        let lines: String = commands.iter().map(|c| format!("{c}\n")).collect();
        let mut child = Command::new("ipset")
            .args(["restore", "-exist"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("ipset restore");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(lines.as_bytes())
            .expect("write");
        assert!(child.wait().expect("wait").success(), "{lines}");
    }
}

fn by_netlink(writes: &[Vec<SetCommand>; 3], known: Revisions) {
    for commands in writes {
        IpsetSocket::open()
            .expect("socket")
            .run(commands, known)
            .expect("set writes");
    }
}

/// CPU time used so far by this process and its waited-for children.
fn cpu() -> Duration {
    let of = |who| {
        // SAFETY: getrusage writes into the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(who, &mut usage) }, 0);
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        time(usage.ru_utime) + time(usage.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("set_writes: skipped, needs root");
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (rounds, per_round) = if smoke { (1, 3) } else { (5, 50) };
    let name = format!("tg-setbench-{}", std::process::id());
    let added = Command::new("ip").args(["netns", "add", &name]).status();
    assert!(added.expect("ip netns add").success());
    let file = File::open(format!("/run/netns/{name}")).expect("netns file");
    // SAFETY: setns on a valid namespace fd; this process is single-threaded
    // here, and its children inherit the namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns");
    let help = Command::new("ipset")
        .arg("help")
        .output()
        .expect("ipset help");
    let known = Revisions::from_help(&String::from_utf8_lossy(&help.stdout)).expect("revisions");

    let mut n = 1;
    let mut figures: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for round in 0..rounds {
        // Interleaved, each way first in turn.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for way in order {
            let (wall_start, cpu_start) = (Instant::now(), cpu());
            for _ in 0..per_round {
                let writes = switch(n);
                n += 1;
                match way {
                    0 => by_restore(&writes),
                    _ => by_netlink(&writes, known),
                }
            }
            let count = per_round as u32;
            figures[way].0.push(wall_start.elapsed() / count);
            figures[way].1.push((cpu() - cpu_start) / count);
        }
    }
    let listed = Command::new("ipset")
        .args(["list", "-n"])
        .output()
        .expect("ipset list");
    let sets = String::from_utf8_lossy(&listed.stdout).lines().count();
    assert_eq!(
        sets,
        CACHE_SETS + 1,
        "one generation and the endpoint set left"
    );
    let _ = Command::new("ip").args(["netns", "del", &name]).status();

    println!(
        "set writes of a ruleset switch ({CACHE_SETS} sets created, a member added and one \
         removed, {CACHE_SETS} destroyed), {rounds} interleaved rounds of {per_round}, \
         medians per switch:"
    );
    let [restore, netlink] = figures.map(|(wall, cpu)| (median(wall), median(cpu)));
    for (label, (wall, cpu)) in [
        ("ipset restore (3 processes)", restore),
        ("netlink", netlink),
    ] {
        println!("  {label:<28} wall {wall:>10.1?}   CPU {cpu:>10.1?}");
    }
    println!(
        "  netlink / ipset restore: wall {:.3}, CPU {:.3}",
        netlink.0.as_secs_f64() / restore.0.as_secs_f64(),
        netlink.1.as_secs_f64() / restore.1.as_secs_f64()
    );
}
