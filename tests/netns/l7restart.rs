//! L7 rules across agent restarts that change `l7.queues`: nginx behind
//! the routing node (a Pod, FORWARD, IPv4 and IPv6) under a `GET /api/*`
//! rule; each restart stops the agent with SIGTERM, then either runs
//! `tollgate cleanup` (the new agent starts from an empty kernel, while
//! conntrack keeps the old connections' connmarks) or not (the new agent
//! adopts the old one's chains, whose L7 queue choice is for the other
//! queue count), and starts the next agent with the other `l7.queues`
//! (2 → 1 → 2 …). Right after the new agent logs `ruleset applied
//! generation=1`: a `GET /admin` on a fresh connection per family, and on
//! keep-alive connections opened (and allowed a request) before the
//! restart, from client ports whose buckets fall on each of two L7 queues.
//! nginx's access log is the proof that no `/admin` ever reached it; a
//! fresh `GET /api/x` per family after each restart is the positive
//! control. `l7.queues` is configuration, not policy: SIGHUP rereads only
//! the policies, so only a restart can change it.
//!
//! `TOLLGATE_TEST_L7_RESTARTS=N` runs N restarts instead of the four of one
//! cycle (both directions, with and without cleanup), at most 200.
//! Addresses: the lab's (`10.I.k.0/24`, `fd00:I:k::/64`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::faults::{Faults, Tool};
use crate::harness::{wait_until, Agent, Lab, Netns, ALLOW_WAIT, DENY_WAIT};
use crate::l7::{access_log, nginx, raw_exchange, Seen};

const ALLOWED: &[u8] = b"GET /api/x HTTP/1.1\r\nHost: web\r\n\r\n";
const DENIED: &[u8] = b"GET /admin HTTP/1.1\r\nHost: web\r\n\r\n";

/// Restarts of one cycle: (l7.queues 2 → 1, 1 → 2) × (cleanup, adoption).
const CYCLE: usize = 4;
/// Most restarts `TOLLGATE_TEST_L7_RESTARTS` may ask for.
const MOST: usize = 200;

/// The Pod `web` (app=web) on the lab's node at `ips`, and its ingress
/// policy: TCP 80 allowed for `GET /api/*` only.
fn policy(ips: [IpAddr; 2]) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: shop, labels: {{app: web}}}}
spec: {{nodeName: node}}
status: {{podIP: '{}', podIPs: [{{ip: '{}'}}, {{ip: '{}'}}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {{name: web-api, namespace: shop}}
spec:
  priority: 5
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: api-get
    action: Allow
    ports: [{{protocol: TCP, port: 80}}]
    l7Protocols: [{{http: {{method: GET, path: /api/*}}}}]
",
        ips[0], ips[0], ips[1]
    )
}

/// Starts an agent with one connection queue (100; DNS 101) and
/// `l7_queues` L7 queues from 102, and waits for its first ruleset; checks
/// that exactly those L7 queues are bound.
fn start(lab: &Lab, l7_queues: u16) -> Agent {
    let setting = format!("l7.queues={l7_queues}");
    let options = lab.agent_options().queues(1).args(&["--set", &setting]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let bound: Vec<u32> = lab
        .queue_counters()
        .iter()
        .map(|c| c.queue)
        .filter(|&q| q >= 102)
        .collect();
    let expected: Vec<u32> = (102..102 + u32::from(l7_queues)).collect();
    assert_eq!(bound, expected, "L7 queues bound");
    agent
}

/// A connection from `client` port `port` to `to`.
fn connect(client: &Netns, port: u16, to: SocketAddr) -> std::io::Result<TcpStream> {
    connect_within(client, port, to, ALLOW_WAIT)
}

fn connect_within(
    client: &Netns,
    port: u16,
    to: SocketAddr,
    timeout: std::time::Duration,
) -> std::io::Result<TcpStream> {
    client.enter(|| {
        let socket = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        let any: IpAddr = match to {
            SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
        };
        socket.bind(&SocketAddr::new(any, port).into())?;
        socket.connect_timeout(&to.into(), timeout)?;
        Ok(socket.into())
    })
}

/// `request` on a new connection from `client` port `port` to `to`.
fn fresh(client: &Netns, port: u16, to: SocketAddr, request: &[u8]) -> Result<Seen, String> {
    let mut stream = connect(client, port, to).map_err(|e| format!("connect: {e}"))?;
    Ok(raw_exchange(&mut stream, request, 1))
}

fn restarts() -> usize {
    std::env::var("TOLLGATE_TEST_L7_RESTARTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CYCLE)
        .clamp(1, MOST)
}

/// See the module doc.
///
/// Mutation (tried): payload of an L7 connection whose state is gone
/// passes instead of resetting it (`Inspector::follow`'s `StateLost`
/// made `Pass`): the keep-alive connections' `GET /admin` after every
/// restart reach nginx.
#[test]
fn l7_denied_requests_stay_denied_across_restarts_that_change_l7_queues() {
    let Some(lab) =
        Lab::builder("l7_denied_requests_stay_denied_across_restarts_that_change_l7_queues")
            .peer("client")
            .peer("pod")
            .ipv6()
            .require(&["nginx"])
            .build()
    else {
        return;
    };
    let client = lab.ns("client");
    nginx(&lab, "pod");
    let ips = [lab.addr("pod").into(), lab.addr6("pod").into()];
    lab.write_policy("web.yaml", &policy(ips));
    let pods = ips.map(|ip| SocketAddr::new(ip, 80));
    let restarts = restarts();
    let started = Instant::now();
    let mut l7_queues = 2;
    let mut agent = start(&lab, l7_queues);
    // Client ports: never one twice (fresh tuples for the workers).
    let mut next_port = 20_000u16;
    let mut take_port = |step: u16| {
        let port = next_port;
        next_port += step;
        port
    };
    let mut opened = Vec::new();
    for n in 0..restarts {
        let cleanup = n % CYCLE < 2;
        let next = 3 - l7_queues;
        let what = format!(
            "restart {n}: l7.queues {l7_queues} -> {next}, {}",
            if cleanup { "cleanup" } else { "adoption" }
        );
        // Keep-alive connections, one request allowed on each: port 4k
        // has an even bucket (bits 1-6), 4k + 2 an odd one, so with two
        // L7 queues they are on different workers.
        let base = take_port(4);
        let mut kept = Vec::new();
        for pod in pods {
            for port in [base, base + 2] {
                let mut stream = connect(client, port, pod)
                    .unwrap_or_else(|e| panic!("{what}: keep-alive {port} -> {pod}: {e}"));
                let seen = raw_exchange(&mut stream, ALLOWED, 1);
                assert_eq!(seen.statuses, [200], "{what}: before, {port} -> {pod}");
                kept.push((port, pod, stream));
            }
        }
        agent.stop();
        if cleanup {
            let out = lab.tollgate_cleanup();
            assert!(out.success(), "{what}: tollgate cleanup: {}", out.stderr);
        }
        agent = start(&lab, next);
        assert_eq!(agent.log().contains("adopting"), !cleanup, "{what}");
        // At once: the denied request on fresh connections, then on the
        // connections opened before.
        let mut denied = Vec::new();
        for pod in pods {
            let port = take_port(2);
            denied.push((
                format!("fresh {port} -> {pod}"),
                fresh(client, port, pod, DENIED),
            ));
        }
        for (port, pod, stream) in &mut kept {
            let seen = raw_exchange(stream, DENIED, 1);
            denied.push((format!("keep-alive {port} -> {pod}"), Ok(seen)));
        }
        for (connection, seen) in denied {
            match seen {
                Ok(seen) if seen.denied() => {}
                other => opened.push(format!("{what}: {connection}: {other:?}")),
            }
        }
        for pod in pods {
            let port = take_port(2);
            let seen = fresh(client, port, pod, ALLOWED);
            assert!(
                matches!(&seen, Ok(s) if s.statuses == [200]),
                "{what}: allowed {port} -> {pod}: {seen:?}"
            );
        }
        l7_queues = next;
    }
    agent.stop();
    // nginx logs a request once answered: every allowed one is in.
    let allowed = restarts * 6;
    wait_until("nginx's log of every allowed request", ALLOW_WAIT, || {
        access_log(lab.dir()).matches("GET /api/x").count() >= allowed
    });
    let log = access_log(lab.dir());
    println!(
        "L7-RESTARTS {restarts} restarts in {:.1}s, {} denied requests, {allowed} allowed",
        started.elapsed().as_secs_f64(),
        restarts * 6
    );
    assert!(opened.is_empty(), "not denied:\n{}", opened.join("\n"));
    assert!(
        !log.contains("/admin"),
        "denied requests reached nginx:\n{log}"
    );
    assert_eq!(log.matches("GET /api/x").count(), allowed, "{log}");
}

/// A restart that renumbers the queues while the new agent's first kernel
/// write hangs (`iptables-restore` blocked): the old agent (`--queues 1`:
/// connection queue 100, L7 queues 102-103) left rules that send an L7
/// connection's packets to 102 or 103 by its client port, and the new one
/// (`--queues 3`) calls 100-102 its connection queues and 103 its DNS
/// queue. A `GET /admin` on a connection opened meanwhile from a port
/// whose bucket is the old first L7 queue (102), again on the same
/// connection once the new agent is in force, and on fresh connections
/// then; nginx's log must show none, and `GET /api/x` is answered after.
///
/// Mutation (tried): the new agent binds its queues at once whatever the
/// kernel holds (`crossed` ignored in `Starting::enforce`): the `GET
/// /admin` during the hung write and again on the same connection after
/// are answered 200, IPv4 and IPv6 (the connection worker took the L7
/// segments for first packets and allowed them, the connmark kept it).
#[test]
fn renumbered_queues_never_hand_an_l7_connection_to_another_worker() {
    let Some(lab) = Lab::builder("renumbered_queues_never_hand_an_l7_connection_to_another_worker")
        .peer("client")
        .peer("pod")
        .ipv6()
        .require(&["nginx", "curl"])
        .build()
    else {
        return;
    };
    let client = lab.ns("client");
    nginx(&lab, "pod");
    let ips = [lab.addr("pod").into(), lab.addr6("pod").into()];
    lab.write_policy("web.yaml", &policy(ips));
    let pods = ips.map(|ip| SocketAddr::new(ip, 80));
    let faults = Faults::install(&lab);
    let mut old = lab.start_agent(faults.options(&lab).queues(1));
    old.wait_generation(1);
    for (pod, port) in pods.into_iter().zip([20_000, 20_004]) {
        let seen = fresh(client, port, pod, ALLOWED);
        assert!(matches!(&seen, Ok(s) if s.statuses == [200]), "{seen:?}");
    }
    old.stop();

    faults.block(Tool::Iptables);
    let mut new = lab.start_agent(faults.options(&lab).queues(3));
    let hung = faults.blocked(Tool::Iptables);
    assert!(new.exited().is_none(), "the new agent exited");
    // Port 4k: an even bucket, the old first L7 queue (102).
    let mut opened = Vec::new();
    let mut outcomes = Vec::new();
    for (pod, port) in pods.into_iter().zip([20_008, 20_012]) {
        match connect_within(client, port, pod, DENY_WAIT) {
            Ok(mut stream) => {
                let seen = raw_exchange(&mut stream, DENIED, 1);
                outcomes.push(format!("during, {port} -> {pod}: {seen:?}"));
                opened.push((port, pod, stream));
            }
            Err(e) => outcomes.push(format!("during, {port} -> {pod}: {e}")),
        }
    }
    faults.unblock(Tool::Iptables);
    new.wait_generation(1);
    assert!(hung > 0);
    for (port, pod, stream) in &mut opened {
        let seen = raw_exchange(stream, DENIED, 1);
        outcomes.push(format!("after, same connection {port} -> {pod}: {seen:?}"));
    }
    for (pod, port) in pods.into_iter().zip([20_016, 20_020]) {
        let seen = fresh(client, port, pod, DENIED);
        assert!(
            matches!(&seen, Ok(s) if s.denied()),
            "fresh {port} -> {pod}: {seen:?}"
        );
    }
    for (pod, port) in pods.into_iter().zip([20_024, 20_028]) {
        let seen = fresh(client, port, pod, ALLOWED);
        assert!(matches!(&seen, Ok(s) if s.statuses == [200]), "{seen:?}");
    }
    new.stop();
    wait_until("nginx's log of every allowed request", ALLOW_WAIT, || {
        access_log(lab.dir()).matches("GET /api/x").count() >= 4
    });
    let log = access_log(lab.dir());
    println!("RENUMBERED {}", outcomes.join("; "));
    assert!(
        !log.contains("/admin"),
        "denied requests reached nginx ({}):\n{log}",
        outcomes.join("; ")
    );
}
