//! A real Docker Engine (Debian's `docker.io`, dockerd 20.10:
//! [`harness::docker`]) against tollgate, on the wire, IPv4 and IPv6:
//! where Docker's own rules would decide first (its per-bridge ACCEPTs at
//! the top of FORWARD, with no `DOCKER-USER` in ip6tables), a daemon
//! restart with and without live-restore, a container from its first
//! moment, published ports relayed by `docker-proxy`, and Compose v1's
//! container names. Each test starts one daemon in its lab's node
//! namespace; figures are printed as `FIGURE` lines (`--nocapture`).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::docker::{figure, web, web_policy, COMPOSE_PROJECT};
use crate::harness::docker::{Docker, DockerdOptions, DOCKER_TOOLS};
use crate::harness::engine::Engine;
use crate::harness::podman::Container;
use crate::harness::probe::{connected_from, tcp_connect, Attempt, Prober};
use crate::harness::{poll_until, wait_until, Agent, Lab, TcpOutcome, AGENT_WAIT, ALLOW_WAIT};

/// Pace and timeout of the probes.
const EVERY: Duration = Duration::from_millis(20);
const ATTEMPT: Duration = Duration::from_millis(300);
const PROBE_LIMIT: Duration = Duration::from_secs(180);

/// The agent following `docker`'s API.
fn agent(lab: &Lab, docker: &Docker) -> Agent {
    lab.start_agent(
        lab.agent_options()
            .args(&["--docker", "--docker-host", &docker.docker_host()]),
    )
}

/// Where a lab's daemon will listen ([`Docker`] puts its socket there),
/// for an agent started before it.
fn docker_host(lab: &Lab) -> String {
    format!("unix://{}", lab.dir().join("docker.sock").display())
}

/// `addr:port` of both families.
fn both(v4: IpAddr, v6: IpAddr, port: u16) -> [SocketAddr; 2] {
    [SocketAddr::new(v4, port), SocketAddr::new(v6, port)]
}

fn connected(attempts: &[Attempt]) -> usize {
    connected_from(attempts, Duration::ZERO).len()
}

/// The first rule of `chain` in `table` of both families.
fn first_rules(lab: &Lab, table: &str, chain: &str) -> [String; 2] {
    ["iptables", "ip6tables"].map(|t| {
        lab.node()
            .ok(&format!("{t} -w -t {table} -S {chain}"))
            .lines()
            .find(|l| l.starts_with("-A "))
            .unwrap_or_default()
            .to_string()
    })
}

/// Boot order and a network created while tollgate runs, with the engine
/// the issue names (Docker 20.10, `--ip6tables`): tollgate starts first
/// (the startup policy holds until dockerd answers), then dockerd, which
/// puts its rules at the top of FORWARD and creates the test network and
/// its per-bridge ACCEPTs — in ip6tables above tollgate's jump, with no
/// `DOCKER-USER` there. tollgate decides forwarded connections in the
/// mangle table, where Docker never writes: client2 (denied) never
/// reaches web over IPv4 nor IPv6 (every 20 ms, from the moment it runs),
/// client1 does. The daemon's leftovers are checked after it is dropped:
/// no daemon, no cgroup, no `/etc/docker/key.json`.
///
/// Mutation (tried): deciding FORWARD in the filter table again (the full
/// chain there, no mangle FORWARD jump) lets client2 through over IPv6
/// (67 of 67 attempts connected).
#[test]
fn tollgate_before_dockerd_and_a_network_created_while_it_runs_decide_first() {
    let test = "tollgate_before_dockerd_and_a_network_created_while_it_runs_decide_first";
    let Some(lab) = Lab::builder(test).require(DOCKER_TOOLS).build() else {
        return;
    };
    let key = std::path::Path::new("/etc/docker/key.json");
    let key_before = key.exists();
    let project = format!("{}shop", lab.node().name().trim_end_matches("node"));
    lab.write_policy("web.yaml", &web_policy(&project));
    // tollgate first, before the engine exists.
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--docker",
        "--docker-host",
        &docker_host(&lab),
    ]));
    agent.wait_for_log("startup policy closed", AGENT_WAIT);
    agent.wait_for_log("Docker API not reachable", AGENT_WAIT);
    let docker = Docker::start(&lab, DockerdOptions::default());
    docker.run(&web("web", &project));
    for (name, app) in [("client1", "client"), ("client2", "other")] {
        docker.run(
            &Container::new(name)
                .label(COMPOSE_PROJECT, &project)
                .label("app", app),
        );
    }
    let [client1, client2] = ["client1", "client2"].map(|c| docker.netns(c));
    let targets = both(docker.addr("web").into(), docker.addr6("web").into(), 80);
    let denied = Prober::start(&client2, &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    let allowed = Prober::start(&client1, &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    assert!(
        allowed.wait_connected(&targets, allowed.now(), 25),
        "client1 never reached web:\n{}",
        agent.log()
    );
    denied.wait_attempts(&targets, denied.now(), 25);
    // Docker's rules are there, above tollgate's filter jump in IPv6.
    let v6_forward = lab.node().ok("ip6tables -w -S FORWARD");
    let docker_at = v6_forward
        .find(" -j ACCEPT")
        .expect("Docker's IPv6 ACCEPTs");
    let tollgate_at = v6_forward
        .find("-j TOLLGATE-FORWARD")
        .expect("tollgate's filter jump");
    assert!(docker_at < tollgate_at, "{v6_forward}");
    assert!(!lab.node().ok("ip6tables -w -S").contains("-N DOCKER-USER"));
    let (denied, allowed) = (denied.finish(), allowed.finish());
    for ((target, attempts), (_, good)) in denied.iter().zip(&allowed) {
        assert_eq!(
            connected(attempts),
            0,
            "client2 -> {target}: {} of {} denied attempts connected",
            connected(attempts),
            attempts.len()
        );
        println!(
            "DOCKERD-FIRST {target}: client2 0 of {} attempts connected, client1 {} of {}",
            attempts.len(),
            connected(good),
            good.len()
        );
    }
    assert_eq!(
        first_rules(&lab, "mangle", "FORWARD"),
        ["-A FORWARD -j TOLLGATE-FORWARD"; 2],
        "tollgate decides first, in the mangle table"
    );
    agent.stop();
    let pid = docker.daemon_pid().expect("the daemon runs");
    let parent = format!("tollgate-{}", lab.node().name().trim_end_matches("-node"));
    drop((client1, client2));
    drop(docker);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "dockerd {pid} still runs"
    );
    assert!(
        !std::path::Path::new("/sys/fs/cgroup/pids")
            .join(&parent)
            .exists(),
        "cgroup {parent} left behind"
    );
    assert_eq!(key.exists(), key_before, "/etc/docker/key.json written");
    assert!(lab.dir().join("d/key.json").exists(), "the lab's key file");
}

/// Restarts dockerd `rounds` times while two peers outside the node probe every
/// container address of the test network (IPv4 and IPv6) every 20 ms on
/// port 80, where only web listens: the denied peer must never connect,
/// whatever address web comes back at; the allowed peer's longest gap is
/// the closed window for allowed traffic (printed as `FIGURE`). The
/// containers have `--restart=always`.
fn restart_opens_nothing(test: &'static str, live_restore: bool, rounds: usize) {
    let Some(lab) = Lab::builder(test)
        .peer("allowed")
        .peer("denied")
        .ipv6()
        .require(DOCKER_TOOLS)
        .build()
    else {
        return;
    };
    let docker = Docker::start(
        &lab,
        DockerdOptions {
            live_restore,
            ..DockerdOptions::default()
        },
    );
    let project = docker.name("shop");
    // Others first: web's address is one they could take on a restart.
    for name in ["other1", "other2"] {
        docker.run(
            &Container::new(name)
                .label(COMPOSE_PROJECT, &project)
                .label("app", "other")
                .option("--restart=always"),
        );
    }
    docker.run(&web("web", &project).option("--restart=always"));
    lab.write_policy(
        "web.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: web-ingress}}
spec:
  priority: 5
  tier: application
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: allow-peer
    action: Allow
    from: [{{ipBlock: {{cidr: {}/32}}}}, {{ipBlock: {{cidr: '{}/128'}}}}]
  - name: drop-rest
    action: Drop
",
            lab.addr("allowed"),
            lab.addr6("allowed")
        ),
    );
    let mut agent = agent(&lab, &docker);
    agent.wait_generation(1);
    let i = lab.index();
    let targets: Vec<SocketAddr> = (2..=4)
        .flat_map(|host| {
            both(
                format!("10.{i}.250.{host}").parse().unwrap(),
                format!("fd00:{i}:250::{host}").parse().unwrap(),
                80,
            )
        })
        .collect();
    let allowed = Prober::start(lab.ns("allowed"), &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    let denied = Prober::start(lab.ns("denied"), &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    let reached = |since: Duration| {
        poll_until(AGENT_WAIT, || {
            targets
                .iter()
                .any(|t| allowed.connected_since(*t, since) > 0)
                .then_some(())
        })
        .is_some()
    };
    assert!(
        reached(Duration::ZERO),
        "web never reached:\n{}",
        agent.log()
    );
    let mut addresses = vec![docker.addr("web")];
    let mut downtimes = Vec::new();
    // From the daemon's API answering again to the allowed peer's first
    // connection: the part of the closed window that is tollgate's (the
    // relist and the reload), beside the daemon's own.
    let mut after_api = Vec::new();
    for round in 0..rounds {
        denied.wait_attempts(&targets, denied.now(), 10);
        let before = allowed.now();
        let restarting = Instant::now();
        docker.restart_daemon();
        downtimes.push(restarting.elapsed().as_millis());
        let answered = allowed.now();
        assert!(
            reached(answered),
            "round {round}: web not reached after the restart:\n{}",
            agent.log()
        );
        // The end of this round's longest gap between the allowed peer's
        // connections: when it got through again. Negative: before the
        // harness saw the API answer.
        let mut connects: Vec<Duration> = targets
            .iter()
            .flat_map(|t| allowed.attempts(*t))
            .filter(|a| a.at >= before && a.outcome == TcpOutcome::Connected)
            .map(|a| a.at)
            .collect();
        connects.sort();
        let reopened = connects
            .windows(2)
            .max_by_key(|w| w[1] - w[0])
            .map_or(answered, |w| w[1]);
        after_api.push(reopened.as_millis() as i128 - answered.as_millis() as i128);
        wait_until("web listed again", AGENT_WAIT, || {
            docker
                .docker(&["inspect", "-f", "{{.State.Running}}", &docker.name("web")])
                .stdout
                .trim()
                == "true"
        });
        addresses.push(docker.addr("web"));
    }
    denied.wait_attempts(&targets, denied.now(), 10);
    let (allowed, denied) = (allowed.finish(), denied.finish());
    for (target, attempts) in &denied {
        assert_eq!(
            connected(attempts),
            0,
            "denied peer -> {target}: {} of {} attempts connected\n{}",
            connected(attempts),
            attempts.len(),
            agent.log()
        );
    }
    let mut merged: Vec<Attempt> = allowed.iter().flat_map(|(_, a)| a.clone()).collect();
    merged.sort_by_key(|a| a.at);
    let window = longest_gap(&merged);
    let total: usize = denied.iter().map(|(_, a)| a.len()).sum();
    println!(
        "DOCKERD-RESTART live-restore={live_restore}: web at {addresses:?}; denied peer 0 of {total} attempts connected; longest closed window for the allowed peer {} ms (the daemon's API was away {downtimes:?} ms: stop, then start until it answered; the allowed peer's first connection {after_api:?} ms after the harness saw it answer)",
        window.as_millis()
    );
    figure(
        &format!("dockerd_restart_closed_window_ms_live_restore_{live_restore}"),
        window,
    );
}

/// The longest time between two connected attempts (any target).
fn longest_gap(attempts: &[Attempt]) -> Duration {
    attempts
        .iter()
        .filter(|a| a.outcome == TcpOutcome::Connected)
        .map(|a| a.at)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// Without live-restore (Debian's default), dockerd stops the containers
/// and starts them again (`--restart=always`), possibly at other
/// addresses, before its API answers: their addresses are unknown to
/// tollgate meanwhile, and closed.
///
/// Mutation (tried): the Docker source keeping its last inventory while
/// the API is away and a died container until the next relist (the
/// behaviour before this change) lets the denied peer reach web at an
/// address the last inventory gave another container (29 of 1,050
/// attempts to that address connected).
#[test]
fn dockerd_restart_without_live_restore_lets_no_denied_connection_through() {
    restart_opens_nothing(
        "dockerd_restart_without_live_restore_lets_no_denied_connection_through",
        false,
        3,
    );
}

/// With live-restore the containers keep running and their addresses;
/// while the API is away they are unknown and closed all the same.
///
/// Mutation (tried): the Docker source forgetting the networks' subnets
/// with the containers when the API is lost (`Inventory::default()` in
/// `Follower::run`) leaves web neither enforced nor unknown while the
/// daemon restarts: 140 of 360 denied attempts connected. (Keeping the
/// last inventory cannot fail this one: with live-restore the addresses
/// do not move.)
#[test]
fn dockerd_restart_with_live_restore_lets_no_denied_connection_through() {
    restart_opens_nothing(
        "dockerd_restart_with_live_restore_lets_no_denied_connection_through",
        true,
        2,
    );
}

/// A new container is closed from its first moment until the inventory
/// knows it, both ways, IPv4 and IPv6: client2 (denied by web's policy)
/// probes the new web's fixed addresses every 20 ms from before `docker
/// run`, and never connects, while client1's first connection times the
/// enforcement of its ingress; the new container itself probes an outside
/// peer from its first instant every 20 ms (its egress policy allows
/// port 81 only) and never reaches port 80, while its first connection to
/// port 81 times the enforcement of its egress. Printed as `FIGURE`.
///
/// Mutation (tried): not dropping unknown addresses
/// (`plan::local::unknown_addresses` always `None`) lets client2 in during
/// the gap (17 of 118 attempts over IPv4 connected).
#[test]
fn a_new_container_is_closed_from_its_first_moment_both_ways() {
    let test = "a_new_container_is_closed_from_its_first_moment_both_ways";
    let Some(lab) = Lab::builder(test)
        .peer("outside")
        .ipv6()
        .require(DOCKER_TOOLS)
        .build()
    else {
        return;
    };
    for port in [80, 81] {
        lab.serve_tcp("outside", port, crate::harness::Service::Echo);
    }
    let docker = Docker::start(&lab, DockerdOptions::default());
    let project = docker.name("shop");
    for (name, app) in [("client1", "client"), ("client2", "other")] {
        docker.run(
            &Container::new(name)
                .label(COMPOSE_PROJECT, &project)
                .label("app", app),
        );
    }
    let (out4, out6) = (lab.addr("outside"), lab.addr6("outside"));
    lab.write_policy("web.yaml", &web_policy(&project));
    lab.write_policy(
        "egress.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: fresh-egress}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{role: fresh}}}}}}]
  egress:
  - name: allow-81
    action: Allow
    to: [{{ipBlock: {{cidr: {out4}/32}}}}, {{ipBlock: {{cidr: '{out6}/128'}}}}]
    ports: [{{protocol: TCP, port: 81}}]
  - name: drop-rest
    action: Drop
"
        ),
    );
    let mut agent = agent(&lab, &docker);
    agent.wait_generation(1);
    let [client1, client2] = ["client1", "client2"].map(|c| docker.netns(c));
    let i = lab.index();
    let (fresh4, fresh6): (IpAddr, IpAddr) = (
        format!("10.{i}.250.200").parse().unwrap(),
        format!("fd00:{i}:250::200").parse().unwrap(),
    );
    let targets = both(fresh4, fresh6, 80);
    let denied = Prober::start(&client2, &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    let allowed = Prober::start(&client1, &targets, EVERY, ATTEMPT, PROBE_LIMIT);
    denied.wait_attempts(&targets, Duration::ZERO, 5);
    // From its first instant the new container tries the outside peer,
    // each attempt in the background, every 20 ms.
    let probe = format!(
        "echo start $(date +%s.%N); nginx -g 'daemon off;' & n=0; \
         while [ $n -lt 200 ]; do \
           for t in '{out4} 80 forbidden4' '{out6} 80 forbidden6' '{out4} 81 allowed4' '{out6} 81 allowed6'; do \
             set -- $t; (nc -z -w 1 $1 $2 && echo $3 $(date +%s.%N)) & \
           done; n=$((n+1)); sleep 0.02; \
         done; wait"
    );
    let run_at = allowed.now();
    let run_started = Instant::now();
    docker.run(
        &web("fresh", &project)
            .label("role", "fresh")
            .option(&format!("--ip={fresh4}"))
            .option(&format!("--ip6={fresh6}"))
            .command(&["sh", "-c", &probe]),
    );
    let run_took = run_started.elapsed();
    assert!(
        allowed.wait_connected(&targets, run_at, 5),
        "client1 never reached the new container:\n{}",
        agent.log()
    );
    denied.wait_attempts(&targets, allowed.now(), 10);
    let logs = poll_until(AGENT_WAIT, || {
        let out = docker.docker(&["logs", &docker.name("fresh")]).stdout;
        (out.contains("allowed4") && out.contains("allowed6")).then_some(out)
    })
    .unwrap_or_else(|| panic!("the new container never reached port 81:\n{}", agent.log()));
    let (denied, allowed) = (denied.finish(), allowed.finish());
    for (target, attempts) in &denied {
        assert_eq!(
            connected(attempts),
            0,
            "client2 -> {target}: {} of {} attempts connected\n{}",
            connected(attempts),
            attempts.len(),
            agent.log()
        );
    }
    assert!(
        !logs.contains("forbidden"),
        "the new container reached port 80:\n{logs}"
    );
    let stamp = |word: &str| -> f64 {
        logs.lines()
            .find_map(|l| l.strip_prefix(word)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {word} in\n{logs}"))
    };
    let started = stamp("start ");
    for family in ["allowed4", "allowed6"] {
        let took = Duration::from_secs_f64(stamp(&format!("{family} ")) - started);
        println!("DOCKERD-NEW egress {family}: first allowed connection {} ms after the container started", took.as_millis());
        figure(&format!("new_container_egress_{family}_ms"), took);
    }
    for (target, attempts) in &allowed {
        let first = attempts
            .iter()
            .find(|a| a.at >= run_at && a.outcome == TcpOutcome::Connected)
            .expect("client1 connected");
        let took = first.at - run_at;
        println!(
            "DOCKERD-NEW ingress {target}: client1 first connected {} ms after `docker run` was called (it took {} ms); client2 0 of {} attempts",
            took.as_millis(),
            run_took.as_millis(),
            denied.iter().find(|(t, _)| t == target).map_or(0, |(_, a)| a.len())
        );
        figure("new_container_ingress_ms", took);
    }
    drop((client1, client2));
}

/// Published ports under Docker's default IPv6 setup (no `--ip6tables`):
/// IPv4 reaches web by DNAT through FORWARD, IPv6 through `docker-proxy`,
/// which connects to web from the node. Both are judged as the client:
/// the denied peer gets nothing over either family, the allowed peer HTTP
/// 200 over both, although a Node may always reach its own endpoints.
///
/// Mutation (tried): deciding a connection to a published port as one to
/// the Node (`Ruleset::relayed` returning the flow as it is) lets the
/// denied peer through `docker-proxy` over IPv6 (HTTP 200).
#[test]
fn published_ports_through_docker_proxy_are_judged_as_their_client() {
    let test = "published_ports_through_docker_proxy_are_judged_as_their_client";
    let Some(lab) = Lab::builder(test)
        .peer("allowed")
        .peer("denied")
        .ipv6()
        .require(DOCKER_TOOLS)
        .build()
    else {
        return;
    };
    let docker = Docker::start(
        &lab,
        DockerdOptions {
            ip6tables: false,
            ..DockerdOptions::default()
        },
    );
    let project = docker.name("shop");
    docker.run(&web("web", &project).option("--publish=8080:80"));
    lab.write_policy(
        "web.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: web-ingress}}
spec:
  priority: 5
  tier: application
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: allow-peer
    action: Allow
    from: [{{ipBlock: {{cidr: {}/32}}}}, {{ipBlock: {{cidr: '{}/128'}}}}]
    ports: [{{protocol: TCP, port: 80}}]
  - name: drop-rest
    action: Drop
",
            lab.addr("allowed"),
            lab.addr6("allowed")
        ),
    );
    let mut agent = agent(&lab, &docker);
    agent.wait_generation(1);
    let listening = lab.node().ok("ss -Hltnp 'sport = :8080'");
    assert!(
        listening.contains("[::]:8080") && listening.contains("docker-proxy"),
        "docker-proxy relays IPv6: {listening}"
    );
    for peer in ["allowed", "denied"] {
        let urls = [
            format!("http://{}:8080/", lab.node_addr(peer)),
            format!("http://[{}]:8080/", lab.node_addr6(peer)),
        ];
        for url in urls {
            if peer == "allowed" {
                wait_until(&format!("{peer} gets {url}"), ALLOW_WAIT, || {
                    lab.curl(peer, &url, Duration::from_secs(2)) == Ok(200)
                });
            } else {
                assert_eq!(
                    lab.curl(peer, &url, Duration::from_secs(2)),
                    Err(28),
                    "{peer} -> {url}\n{}",
                    agent.log()
                );
            }
        }
        // Fresh source ports, IPv4 and IPv6, at the TCP level too.
        for node in [
            IpAddr::from(lab.node_addr(peer)),
            IpAddr::from(lab.node_addr6(peer)),
        ] {
            let to = SocketAddr::new(node, 8080);
            let expected = if peer == "allowed" {
                TcpOutcome::Connected
            } else {
                TcpOutcome::TimedOut
            };
            assert_eq!(
                tcp_connect(lab.ns(peer), to, Duration::from_secs(2)),
                expected,
                "{peer} -> {to}"
            );
        }
    }
    println!("DOCKERD-PROXY: the denied peer got nothing on :8080 over IPv4 (DNAT) and IPv6 (docker-proxy), the allowed peer HTTP 200 on both");
}

/// Debian 12's `docker-compose` (1.29) names containers
/// `<project>_<service>_1`, not Compose v2's `<project>-<service>-1`: a
/// project brought up with it is the namespace `<project>` with Pods
/// `<project>/<project>_web_1`…, selected by the Compose labels, and its
/// policy holds on the wire.
///
/// Mutation (tried): naming the Pod after the Compose service label
/// instead of the container name (in `mapping::endpoint`) makes `get
/// endpoints` list `<project>/web`, and the test fails.
#[test]
fn docker_compose_v1_underscore_names_are_the_pods() {
    let test = "docker_compose_v1_underscore_names_are_the_pods";
    let Some(lab) = Lab::builder(test)
        .require(DOCKER_TOOLS)
        .require(&["/usr/bin/docker-compose"])
        .build()
    else {
        return;
    };
    let docker = Docker::start(&lab, DockerdOptions::default());
    // Compose v1 keeps `-` and `_` in project names.
    let project = docker.name("shop");
    let compose = lab.dir().join("compose.yaml");
    let service = |name: &str, extra: &str| {
        format!(
            "  {name}:\n    image: {image}\n    init: true\n    labels: {{app: {name}{extra}}}\n",
            image = docker.image()
        )
    };
    std::fs::write(
        &compose,
        format!(
            "version: '2.4'\nservices:\n{}    command: [nginx, -g, 'daemon off;']\n{}{}",
            service("web", ", tollgate.io/ports: 'http=80/TCP'"),
            service("client", ""),
            service("other", "")
        ),
    )
    .expect("write compose.yaml");
    let mut up = docker.client("/usr/bin/docker-compose");
    up.args(["--no-ansi", "-p", &project, "-f"])
        .arg(&compose)
        .args(["up", "-d"]);
    let out = crate::harness::netns::run_with_timeout(up, Duration::from_secs(120));
    let out = out.expect_success("docker-compose up");
    let name = |service: &str| format!("{project}_{service}_1");
    for service in ["web", "client", "other"] {
        docker.track(&name(service));
    }
    assert!(
        out.stderr.contains(&name("web")),
        "compose 1.29 names containers with underscores: {}",
        out.stderr
    );
    lab.write_policy("web.yaml", &web_policy(&project));
    let mut agent = agent(&lab, &docker);
    agent.wait_generation(1);
    let listed = lab.node().ok(&format!(
        "{} get endpoints -o json --socket {}",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.agent_options().status_socket.display()
    ));
    for service in ["web", "client", "other"] {
        let pod = format!("\"{project}/{}\"", name(service));
        assert!(listed.contains(&pod), "{pod} not in {listed}");
    }
    let network = format!("{project}_default");
    let web = docker
        .docker(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
            &name("web"),
        ])
        .expect_success("docker inspect web")
        .stdout
        .trim()
        .to_string();
    let url = format!("http://{web}/");
    let curl = |service: &str| {
        let out = docker.docker(&[
            "exec",
            &name(service),
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
            &url,
        ]);
        crate::harness::engine::curl_outcome(&out)
    };
    wait_until("client reaches web", ALLOW_WAIT, || {
        curl("client") == Ok(200)
    });
    assert_eq!(curl("other"), Err(28), "{}", agent.log());
    let traced = lab.node().ok(&format!(
        "{} trace -o json --socket {} --src {project}/{} --dst {project}/{} --protocol tcp --dst-port http",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.agent_options().status_socket.display(),
        name("other"),
        name("web"),
    ));
    assert!(traced.contains("\"verdict\": \"Drop\""), "{traced}");
}
