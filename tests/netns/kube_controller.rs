//! The controller and the agents together on the wire (issue 32): a real
//! `tollgate controller` publishes the AddressGroups and agents in
//! `kubernetes.peers: controller` enforce them. Two Nodes are two labs
//! (two node namespaces, an agent in each) watching one fake API server
//! (`tests/fake_api`), served on a listener in each node namespace; the
//! controller runs as a process in the first node's namespace (never in
//! the root namespace). `Controller::spawn` in the test process could
//! have run there too (from a thread entered into the namespace: the
//! threads it starts inherit it), but a process is what a Deployment
//! runs — the command line, its `/readyz` — and its `kill -9` is a crash:
//! no code of it runs, no Lease is released. Also: an
//! agent moved from watch mode to controller mode and back by restarts
//! (a DaemonSet's rolling update) while a denied client probes.
//!
//! Every probe is a new connection from a new source port with the
//! verdict cache off: the agent's queues decide each one.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::probe::{connected_from, Prober};
use crate::harness::AGENT_WAIT;
use crate::harness::{metrics, wait_until, Agent, AgentOptions, Lab, Service, TcpOutcome};
use tollgate_fake_api::{kubeconfig_at, FakeApi};

const GROUPS: &str = "/apis/tollgate.io/v1alpha1/addressgroups";
const PORT: u16 = 8080;
/// The agents' metrics, each on its own node namespace's loopback.
const AGENT_METRICS: &str = "127.0.0.1:9534";
/// The controller's `/livez`, `/readyz` and `/metrics`.
const CONTROLLER_LISTEN: &str = "127.0.0.1:9535";
/// The controller's name in the Lease: one replica, whose container is
/// restarted in its Pod (the same name) after it is killed.
const IDENTITY: &str = "tollgate-controller-0";
/// The agents read the Lease every 30 s ± 20 % and the controller's
/// Lease lasts 15 s: a kill is seen as stale within 51 s.
const STALE_WAIT: Duration = Duration::from_secs(90);

fn ips(lab: &Lab, role: &str) -> [IpAddr; 2] {
    [lab.addr(role).into(), lab.addr6(role).into()]
}

/// A Pod in `prod` labelled `app`, on Node `node`, with `ips`.
fn pod(name: &str, app: &str, node: &str, ips: [IpAddr; 2]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "prod", "labels": {"app": app}},
           "spec": {"nodeName": node, "containers": [{"name": "main"}]},
           "status": {"phase": "Running", "podIP": ips[0].to_string(),
                      "podIPs": [{"ip": ips[0].to_string()}, {"ip": ips[1].to_string()}]}})
}

/// A lab with a client, a server (echo on [`PORT`]) and a stranger,
/// IPv4 and IPv6.
fn node_lab(test: &'static str, extra: &str) -> Option<Lab> {
    let lab = Lab::builder(test)
        .peer("client")
        .peer(extra)
        .peer("server")
        .ipv6()
        .build()?;
    lab.serve_tcp("server", PORT, Service::Echo);
    Some(lab)
}

/// The fake API server's listener in `lab`'s node namespace.
fn listener(lab: &Lab) -> TcpListener {
    lab.node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"))
}

fn write_kubeconfig(lab: &Lab, text: &str) -> PathBuf {
    let path = lab.dir().join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// Agent options with `kubeconfig`, the verdict cache off and metrics.
fn kube_options(lab: &Lab, kubeconfig: &Path, node: &str, extra: &[&str]) -> AgentOptions {
    let mut options = lab
        .agent_options()
        .node_name(node)
        .args(&["--verdict-cache", "off", "--metrics-address", AGENT_METRICS])
        .args(extra);
    options.kubeconfig = Some(kubeconfig.to_path_buf());
    options
}

/// `tollgate controller` in a lab's node namespace; killed when dropped.
struct ControllerProcess {
    child: Child,
    log: PathBuf,
}

impl ControllerProcess {
    fn start(lab: &Lab, kubeconfig: &Path) -> ControllerProcess {
        let n = (0..100)
            .find(|n| !lab.dir().join(format!("controller-{n}.log")).exists())
            .expect("fewer than 100 controllers per lab");
        let log = lab.dir().join(format!("controller-{n}.log"));
        let out = std::fs::File::create(&log).expect("create controller log");
        let err = out.try_clone().expect("clone log handle");
        let argv = [
            env!("CARGO_BIN_EXE_tollgate"),
            "controller",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--identity",
            IDENTITY,
            "--listen",
            CONTROLLER_LISTEN,
        ];
        // `ip netns exec` execs the binary: the child is the controller.
        let child = lab
            .node()
            .command(&argv)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn tollgate controller");
        ControllerProcess { child, log }
    }

    /// Whether `/readyz` answers 200 (the leader adopted the groups and
    /// made its last batch of writes).
    fn ready(lab: &Lab) -> bool {
        let url = format!("http://{CONTROLLER_LISTEN}/readyz");
        let out = lab.node().exec(
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                &url,
            ],
            Duration::from_secs(10),
        );
        out.stdout.trim() == "200"
    }

    /// SIGKILL: the Lease is neither renewed nor released.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("---- controller log {} ----\n{log}", self.log.display());
        }
    }
}

/// Every AddressGroup slice the API server holds, by name.
fn slices(api: &FakeApi) -> std::collections::BTreeMap<String, Value> {
    api.objects(GROUPS)
}

/// Whether some published slice holds every address of `ips`.
fn published(api: &FakeApi, ips: [IpAddr; 2]) -> bool {
    slices(api).values().any(|slice| {
        let held: Vec<&str> = slice["spec"]["members"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["ips"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        ips.iter().all(|ip| held.contains(&ip.to_string().as_str()))
    })
}

/// AddressGroup writes the API server received (create, update, delete).
fn writes(api: &FakeApi) -> usize {
    ["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|m| api.writes(m, GROUPS))
        .sum()
}

/// Pod events the API server sent to the controller's watch (the only
/// Pod watch without a field selector).
fn controller_pod_events(api: &FakeApi) -> u64 {
    api.watches()
        .iter()
        .filter(|w| w.path == "/api/v1/pods" && w.fields.is_empty())
        .map(|w| w.events)
        .sum()
}

/// AddressGroup events the API server sent to the watches that select
/// the group `key` (an agent's subscription).
fn group_events(api: &FakeApi, key: &str) -> u64 {
    api.watches()
        .iter()
        .filter(|w| w.path == GROUPS && w.labels.contains(key))
        .map(|w| w.events)
        .sum()
}

/// The selection key of the group whose slice holds `ip`.
fn key_of(api: &FakeApi, ip: IpAddr) -> String {
    slices(api)
        .values()
        .find(|s| s["spec"].to_string().contains(&format!("\"{ip}\"")))
        .and_then(|s| s["metadata"]["labels"]["tollgate.io/selection"].as_str())
        .unwrap_or_else(|| panic!("no group holds {ip}"))
        .to_string()
}

/// The agent's `peers` status: AddressGroups needed, waiting, and whether
/// the controller is stale; `None` in watch mode or while it does not
/// answer.
fn peers(options: &AgentOptions) -> Option<tollgate::status::PeersReport> {
    use tollgate::status::{Request, Response};
    match tollgate::status::request(&options.status_socket, &Request::Status) {
        Ok(Response::Status(report)) => report.kubernetes.and_then(|k| k.peers),
        _ => None,
    }
}

fn stale_metric(lab: &Lab) -> f64 {
    metrics::scrape(lab.node(), AGENT_METRICS)
        .get("tollgate_controller_stale")
        .copied()
        .expect("tollgate_controller_stale exported")
}

/// The web server of `lab`, both families.
fn web(lab: &Lab) -> [SocketAddr; 2] {
    ips(lab, "server").map(|ip| SocketAddr::new(ip, PORT))
}

/// New connections to `lab`'s web server: from the client as `client`
/// says, from `denied` always refused (dropped: timed out).
fn check(lab: &Lab, client: TcpOutcome, denied: &str) {
    for to in web(lab) {
        lab.assert_tcp("client", to, client);
        lab.assert_tcp(denied, to, TcpOutcome::TimedOut);
    }
}

/// [`check`] of both labs at once.
fn check_both(a: (&Lab, TcpOutcome), b: (&Lab, TcpOutcome)) {
    std::thread::scope(|scope| {
        let other = scope.spawn(|| check(b.0, b.1, "stranger"));
        check(a.0, a.1, "stranger");
        other.join().expect("the second lab's check");
    });
}

/// Waits until `lab`'s client gets `outcome` (the agent applied a change).
fn wait_client(lab: &Lab, outcome: TcpOutcome, what: &str) {
    wait_until(what, AGENT_WAIT, || {
        web(lab)
            .iter()
            .all(|to| lab.tcp("client", *to, Duration::from_millis(500)) == outcome)
    });
}

/// `web-<me>` Pods take ingress from `client-<me>` Pods only.
fn web_from_its_client(me: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": format!("web-{me}")},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": format!("web-{me}")}}}],
                    "ingress": [{"name": "client", "action": "Allow",
                                 "from": [{"podSelector": {"matchLabels": {"app": format!("client-{me}")}}}]},
                                {"name": "rest", "action": "Drop"}]}})
}

/// The server Pod (`app: web`) drops TCP from `app: intruder` Pods and
/// takes the rest.
fn drop_intruders() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "drop-intruders"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ingress": [{"name": "intruders", "action": "Drop",
                                 "from": [{"podSelector": {"matchLabels": {"app": "intruder"}}}]}]}})
}

/// A fake API server in `lab`'s node namespace holding Namespace `prod`
/// and the Pod `web` (the lab's server) on Node `node`.
fn api_with_web(lab: &Lab) -> FakeApi {
    let api = FakeApi::serve(listener(lab));
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(pod("web", "web", "node", ips(lab, "server")));
    api
}

/// Options of an agent on Node `node` in controller mode, reading `api`.
fn controller_mode(lab: &Lab, api: &FakeApi) -> AgentOptions {
    let kubeconfig = write_kubeconfig(lab, &api.kubeconfig());
    kube_options(
        lab,
        &kubeconfig,
        "node",
        &["--set", "kubernetes.peers=controller"],
    )
}

/// The second Node's lab of
/// [`kubernetes_controller_and_two_node_agents_enforce_each_others_peers_and_outlive_the_controller`].
const SECOND_NODE: &str = "kubernetes_controller_and_two_node_agents_second_node";

/// A controller and two node agents: Nodes `node-a` and `node-b`, one lab
/// each. On each, the Pod `web-<x>` (the lab's server) takes TCP only from
/// `client-<x>` — the lab's client, which the API server says runs on the
/// OTHER Node, so the agent (watching its own Node's Pods) learns it only
/// from the group the controller publishes; `stranger-<x>` (app
/// `stranger`, also on the other Node) is a non-member and is refused.
/// (a) Both clients connect, both strangers are refused. (c) A status
/// write of `client-a` (phase, conditions, an annotation) reaches the
/// controller and writes nothing: (b) relabelling `client-b` then writes
/// exactly its group's slice (one write; `client-a`'s slice untouched),
/// which the API server sends to node-b's agent and not to node-a's (their
/// group watches' events); node-b closes it while node-a's client still
/// connects. (d) The
/// controller killed (`kill -9`): both agents keep enforcing as before
/// (allowed, closed, refused), and both say the controller is stale in
/// status and `tollgate_controller_stale` (0 before the kill); the
/// controller restarted (same Pod name) adopts the groups and writes
/// nothing, and a later change (`client-b` labelled back) is published
/// and opens node-b again. IPv4 and IPv6.
///
/// Mutations (tried): the publisher writing on a status write (the three
/// no-change guards of `core/src/selection/publish.rs` removed) fails the
/// write count of (c); `Publisher::adopt` not called on taking the lead
/// fails (d)'s "writes nothing".
#[test]
fn kubernetes_controller_and_two_node_agents_enforce_each_others_peers_and_outlive_the_controller()
{
    let Some(a) = node_lab(
        "kubernetes_controller_and_two_node_agents_enforce_each_others_peers_and_outlive_the_controller",
        "stranger",
    ) else {
        return;
    };
    let Some(b) = node_lab(SECOND_NODE, "stranger") else {
        return;
    };
    // One API server, reachable in both node namespaces.
    let api = FakeApi::serve(listener(&a));
    let at_b = api.listen(listener(&b));
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    for (lab, me, other) in [(&a, "a", "b"), (&b, "b", "a")] {
        let (here, there) = (format!("node-{me}"), format!("node-{other}"));
        api.apply(pod(
            &format!("web-{me}"),
            &format!("web-{me}"),
            &here,
            ips(lab, "server"),
        ));
        api.apply(pod(
            &format!("client-{me}"),
            &format!("client-{me}"),
            &there,
            ips(lab, "client"),
        ));
        api.apply(pod(
            &format!("stranger-{me}"),
            "stranger",
            &there,
            ips(lab, "stranger"),
        ));
        api.apply(web_from_its_client(me));
    }
    let kubeconfig_a = write_kubeconfig(&a, &api.kubeconfig());
    let kubeconfig_b = write_kubeconfig(&b, &kubeconfig_at(at_b));

    // The controller first, as deployed: it takes the Lease and publishes
    // the two groups.
    let mut controller = ControllerProcess::start(&a, &kubeconfig_a);
    wait_until("the controller publishes both clients", AGENT_WAIT, || {
        published(&api, ips(&a, "client"))
            && published(&api, ips(&b, "client"))
            && ControllerProcess::ready(&a)
    });
    assert!(!published(&api, ips(&a, "stranger")));
    let controller_mode = ["--set", "kubernetes.peers=controller"];
    let options_a = kube_options(&a, &kubeconfig_a, "node-a", &controller_mode);
    let options_b = kube_options(&b, &kubeconfig_b, "node-b", &controller_mode);
    let mut agent_a = a.start_agent(options_a.clone());
    let mut agent_b = b.start_agent(options_b.clone());
    agent_a.wait_generation(1);
    agent_b.wait_generation(1);
    // Each agent subscribes to one group, and its controller is alive.
    for (lab, options) in [(&a, &options_a), (&b, &options_b)] {
        wait_until("the agent reads the Lease as renewed", AGENT_WAIT, || {
            peers(options).is_some_and(|p| !p.controller_stale && p.needed == 1 && p.waiting == 0)
        });
        assert_eq!(stale_metric(lab), 0.0);
    }

    // (a) Positive control.
    check_both((&a, TcpOutcome::Connected), (&b, TcpOutcome::Connected));

    // (c) A status write of client-a: the controller receives it...
    let slice_a = |api: &FakeApi| {
        slices(api)
            .into_iter()
            .find(|(_, s)| s.to_string().contains(&a.addr("client").to_string()))
            .expect("client-a's slice")
    };
    let before_a = slice_a(&api);
    let (key_a, key_b) = (
        key_of(&api, a.addr("client").into()),
        key_of(&api, b.addr("client").into()),
    );
    let heard = (group_events(&api, &key_a), group_events(&api, &key_b));
    let sent = controller_pod_events(&api);
    let mut status = pod("client-a", "client-a", "node-b", ips(&a, "client"));
    status["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/restartedAt": "now"});
    status["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    api.apply(status);
    wait_until(
        "the controller receives the status write",
        AGENT_WAIT,
        || controller_pod_events(&api) > sent,
    );
    // ...(b) then client-b relabelled: its group's slice, and only it, is
    // written.
    let written = writes(&api);
    api.apply(pod("client-b", "stranger", "node-a", ips(&b, "client")));
    wait_until("client-b unpublished", AGENT_WAIT, || {
        !published(&api, ips(&b, "client"))
    });
    wait_client(&b, TcpOutcome::TimedOut, "node-b closes client-b");
    assert_eq!(writes(&api) - written, 1, "{:#?}", api.log());
    assert_eq!(slice_a(&api), before_a, "client-a's slice was written");
    // The slice went to node-b's agent, the one subscribed, and nothing to
    // node-a's.
    assert!(group_events(&api, &key_b) > heard.1, "{:#?}", api.watches());
    assert_eq!(group_events(&api, &key_a), heard.0, "{:#?}", api.watches());
    check_both((&a, TcpOutcome::Connected), (&b, TcpOutcome::TimedOut));

    // (d) The controller killed: nothing changes on the wire, and both
    // agents say it is stale once its Lease expires.
    let written = writes(&api);
    let lists = api.lists(GROUPS);
    controller.kill9();
    check_both((&a, TcpOutcome::Connected), (&b, TcpOutcome::TimedOut));
    for options in [&options_a, &options_b] {
        wait_until("the agent says the controller is stale", STALE_WAIT, || {
            peers(options).is_some_and(|p| p.controller_stale && p.waiting == 0)
        });
    }
    for lab in [&a, &b] {
        assert_eq!(stale_metric(lab), 1.0);
    }
    check_both((&a, TcpOutcome::Connected), (&b, TcpOutcome::TimedOut));

    // Restarted, it adopts the groups and rewrites nothing...
    let mut controller = ControllerProcess::start(&a, &kubeconfig_a);
    wait_until(
        "the restarted controller adopts and is ready",
        AGENT_WAIT,
        || api.lists(GROUPS) > lists && ControllerProcess::ready(&a),
    );
    assert_eq!(writes(&api), written, "{:#?}", api.log());
    // ...and publishes the next change.
    api.apply(pod("client-b", "client-b", "node-a", ips(&b, "client")));
    wait_until("client-b published again", AGENT_WAIT, || {
        published(&api, ips(&b, "client"))
    });
    assert_eq!(writes(&api) - written, 1, "{:#?}", api.log());
    wait_client(&b, TcpOutcome::Connected, "node-b opens client-b again");
    check_both((&a, TcpOutcome::Connected), (&b, TcpOutcome::Connected));
    controller.kill9();
    agent_a.stop();
    agent_b.stop();
}

/// `role` connecting to `targets` without pause: a new connection every
/// 20 ms, each given 300 ms, for at most 120 s.
fn probe(lab: &Lab, role: &str, targets: &[SocketAddr]) -> Prober {
    Prober::start(
        lab.ns(role),
        targets,
        Duration::from_millis(20),
        Duration::from_millis(300),
        Duration::from_secs(120),
    )
}

/// An agent's restart into another mode (see
/// [`kubernetes_moving_between_watch_and_controller_mode_never_lets_a_denied_client_through`]):
/// the intruder probes the server (both families, a new connection every
/// 20 ms) from before `old` stops until the new agent has decided for a
/// while; none connects. With `groups_fail`, the AddressGroups' lists
/// answer 500 while the new agent starts: it must hold (no ruleset) until
/// they are served.
fn switch(
    lab: &Lab,
    api: &FakeApi,
    mut old: Agent,
    options: AgentOptions,
    groups_fail: bool,
    label: &str,
) -> Agent {
    let targets = web(lab);
    let (prober, client) = (
        probe(lab, "intruder", &targets),
        probe(lab, "client", &targets),
    );
    prober.wait_attempts(&targets, Duration::ZERO, 5);
    assert!(client.wait_connected(&targets, Duration::ZERO, 3));
    if groups_fail {
        api.fail(GROUPS);
    }
    old.stop();
    let gone = client.now();
    let mut new = lab.start_agent(options);
    // It takes over the rules the other mode's agent left in the kernel.
    new.wait_for_log("adopting the kernel state", AGENT_WAIT);
    if groups_fail {
        new.wait_for_log("peers: waiting for groups", AGENT_WAIT);
        prober.wait_attempts(&targets, prober.now(), 10);
        assert_eq!(new.count_log("ruleset applied"), 0, "{}", new.log());
        api.heal(GROUPS);
    }
    new.wait_generation(1);
    let ready = client.now();
    prober.wait_attempts(&targets, prober.now(), 10);
    assert!(
        client.wait_connected(&targets, ready, 3),
        "{label}: the client does not connect again\n{}",
        new.log()
    );
    for (target, attempts) in prober.finish() {
        let through = connected_from(&attempts, Duration::ZERO);
        assert!(
            through.is_empty(),
            "{label}: the intruder reached {target}: {through:?}\n{}",
            new.log()
        );
        println!(
            "MODE-SWITCH {label} intruder -> {}: 0 of {} attempts connected",
            target.to,
            attempts.len()
        );
    }
    for (target, attempts) in client.finish() {
        let again = attempts
            .iter()
            .find(|a| a.at >= gone && a.outcome == TcpOutcome::Connected)
            .expect("connected again");
        println!(
            "MODE-SWITCH {label} client -> {}: first connection {} ms after the old agent exited",
            target.to,
            (again.at - gone).as_millis()
        );
    }
    new
}

/// Moving between the modes without an open window. The server Pod
/// drops TCP from `app: intruder` Pods (on another Node) and takes the
/// rest; the client (`app: client`, on another Node too) is its positive
/// control. An agent in watch mode (the default) enforces it; the
/// controller is deployed; the agent is restarted in controller mode (as
/// a DaemonSet's rolling update: SIGTERM, then the new process, which
/// adopts the kernel state), the AddressGroups' lists failing (500) as it
/// starts, so that it must wait for the group; then restarted in watch
/// mode again. During each switch the intruder and the client probe
/// continuously (a new connection every 20 ms each); the intruder never
/// connects, the client connects again once the new agent's ruleset is in
/// force (its window printed as `MODE-SWITCH`; the first switch's holds
/// the time the groups' lists are made to fail); after each, the client
/// connects and the intruder is refused; status reports the
/// controller's groups in controller mode only. IPv4 and IPv6.
///
/// Mutation (tried): the agent building its ruleset while a group is
/// missing (the waiting checks of `Incremental::ruleset` and
/// `agent::compiler::Compiler::compile` disabled): the missing group reads
/// as empty and the intruder connects during the switch to controller
/// mode.
#[test]
fn kubernetes_moving_between_watch_and_controller_mode_never_lets_a_denied_client_through() {
    let Some(lab) = node_lab(
        "kubernetes_moving_between_watch_and_controller_mode_never_lets_a_denied_client_through",
        "intruder",
    ) else {
        return;
    };
    let api = api_with_web(&lab);
    api.apply(pod("client", "client", "other-node", ips(&lab, "client")));
    api.apply(pod(
        "intruder",
        "intruder",
        "other-node",
        ips(&lab, "intruder"),
    ));
    api.apply(drop_intruders());
    let kubeconfig = write_kubeconfig(&lab, &api.kubeconfig());
    let watch = kube_options(&lab, &kubeconfig, "node", &[]);
    let controller_mode = controller_mode(&lab, &api);
    let mut agent = lab.start_agent(watch.clone());
    agent.wait_generation(1);
    check(&lab, TcpOutcome::Connected, "intruder");
    assert!(peers(&watch).is_none());

    let _controller = ControllerProcess::start(&lab, &kubeconfig);
    wait_until("the controller publishes the intruder", AGENT_WAIT, || {
        published(&api, ips(&lab, "intruder")) && ControllerProcess::ready(&lab)
    });

    let agent = switch(
        &lab,
        &api,
        agent,
        controller_mode.clone(),
        true,
        "watch-to-controller",
    );
    check(&lab, TcpOutcome::Connected, "intruder");
    assert!(
        peers(&controller_mode).is_some_and(|p| p.needed == 1 && p.waiting == 0),
        "{:?}",
        peers(&controller_mode)
    );

    let mut agent = switch(
        &lab,
        &api,
        agent,
        watch.clone(),
        false,
        "controller-to-watch",
    );
    check(&lab, TcpOutcome::Connected, "intruder");
    assert!(peers(&watch).is_none());
    agent.stop();
}

/// The members of a group published in two slices: slice 0 holds 100
/// addresses that are nowhere on the wire (TEST-NET-2 and the IPv6
/// documentation prefix) and lists slice 1, which holds the intruder.
fn intruder_slices(lab: &Lab) -> (String, [Value; 2]) {
    use tollgate_core::model::LabelSelector;
    use tollgate_core::selection::group::{self, AddressGroupSpec, GroupMember};
    use tollgate_core::selection::{NamespaceScope, Selection};
    let selection = Selection::Pods {
        namespaces: NamespaceScope::All,
        pods: Some(LabelSelector {
            match_labels: [("app".to_string(), "intruder".to_string())]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        }),
    };
    let key = group::key(&selection);
    let decoys = (1..=100u8)
        .map(|n| GroupMember {
            ips: [
                IpAddr::from([198, 51, 100, n]),
                format!("2001:db8::{n:x}").parse().unwrap(),
            ]
            .as_slice()
            .into(),
            named_ports: Box::default(),
        })
        .collect();
    let slice = |number: u32, slices: Vec<u32>, members: Vec<GroupMember>| {
        let spec = AddressGroupSpec {
            selection: group::canonical(&selection),
            slice: number,
            slices,
            members,
        };
        group::object(&group::slice_name(&key, number), &key, &spec)
    };
    let intruder = GroupMember {
        ips: ips(lab, "intruder").as_slice().into(),
        named_ports: Box::default(),
    };
    (
        key.clone(),
        [
            slice(0, vec![1], decoys),
            slice(1, Vec::new(), vec![intruder]),
        ],
    )
}

/// A group published in more than one slice is enforced only once every
/// slice its slice 0 lists is held. The server Pod drops TCP from
/// `app: intruder` Pods and takes the rest ([`drop_intruders`]);
/// the group of intruders is written here as a controller in the middle
/// of a publication leaves it: slice 0 (100 members, none on the wire,
/// listing slice 1) is in the API server, slice 1 (the intruder) not yet.
/// An agent started in controller mode subscribes to the group's key,
/// receives slice 0, says in status that it waits for one group, and
/// applies no ruleset: the startup policy (`closed`) holds and the
/// intruder does not connect. Slice 1 written: the ruleset is applied,
/// the client connects (the positive control, which also proves the key
/// the agent watches is this one) and the intruder is still refused.
/// IPv4 and IPv6.
///
/// Mutation (tried): the completeness check reading slice 0 alone (the
/// listed slices not required in `Published::waiting`,
/// `core/src/selection/index/published.rs`): the agent applies a ruleset whose
/// group lacks the intruder, and the intruder connects while slice 1 is
/// missing.
#[test]
fn kubernetes_a_group_missing_a_listed_slice_is_waited_for_on_the_wire() {
    let Some(lab) = node_lab(
        "kubernetes_a_group_missing_a_listed_slice_is_waited_for_on_the_wire",
        "intruder",
    ) else {
        return;
    };
    let api = api_with_web(&lab);
    api.apply(drop_intruders());
    let (key, [slice0, slice1]) = intruder_slices(&lab);
    api.apply(slice0);
    let options = controller_mode(&lab, &api);
    let mut agent = lab.start_agent(options.clone());

    // Slice 0 received (and acted on: the agent waits, or, were it to read
    // the group as whole, applies a ruleset), slice 1 awaited: no ruleset,
    // the intruder refused.
    wait_until("the agent receives slice 0", AGENT_WAIT, || {
        api.watches()
            .iter()
            .any(|w| w.path == GROUPS && w.labels.contains(&key))
            && peers(&options).is_some_and(|p| {
                p.needed == 1
                    && p.slices == 1
                    && (p.waiting == 1 || agent.count_log("ruleset applied") > 0)
            })
    });
    for to in web(&lab) {
        lab.assert_tcp("intruder", to, TcpOutcome::TimedOut);
    }
    assert!(
        peers(&options).is_some_and(|p| p.waiting == 1 && p.slices == 1),
        "{:?}",
        peers(&options)
    );
    assert_eq!(agent.count_log("ruleset applied"), 0, "{}", agent.log());

    // Slice 1 written: the group is whole and enforced.
    api.apply(slice1);
    agent.wait_generation(1);
    wait_client(&lab, TcpOutcome::Connected, "the client connects");
    check(&lab, TcpOutcome::Connected, "intruder");
    assert!(
        peers(&options).is_some_and(|p| p.needed == 1 && p.waiting == 0 && p.slices == 2),
        "{:?}",
        peers(&options)
    );
    agent.stop();
}

/// An agent in controller mode holds only its own Pods and Node, so what
/// it cannot see is not a mistake: a policy for Pods of other Nodes
/// (`web-elsewhere`, applied to `app: far`, none here) with a peer label
/// key no local Pod carries (`tier`) is not warned about (neither "selects
/// no endpoint" nor "label key `tier` is on no Pod"). The positive
/// control: a Namespace label key typo (`enviroment`: every Namespace is
/// held) is warned about, once.
///
/// Mutation (tried): the agent's warnings judging its snapshot as the
/// whole inventory (`Inventory::Whole` in controller mode,
/// `src/agent/mod.rs`) logs both warnings about `web-elsewhere`.
#[test]
fn kubernetes_controller_mode_warns_about_nothing_it_cannot_see() {
    let Some(lab) = node_lab(
        "kubernetes_controller_mode_warns_about_nothing_it_cannot_see",
        "stranger",
    ) else {
        return;
    };
    let api = api_with_web(&lab);
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "web-elsewhere"},
               "spec": {"priority": 5, "tier": "application",
                        "appliedTo": [{"podSelector": {"matchLabels": {"app": "far"}}}],
                        "ingress": [{"name": "db", "action": "Drop",
                                     "from": [{"podSelector": {"matchLabels": {"tier": "db"}}}]}]}}),
    );
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "typo"},
               "spec": {"priority": 6, "tier": "application",
                        "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}},
                                       "namespaceSelector": {"matchLabels": {"enviroment": "prod"}}}],
                        "ingress": [{"name": "rest", "action": "Drop"}]}}),
    );
    let mut agent = lab.start_agent(controller_mode(&lab, &api));
    agent.wait_generation(1);
    // Neither policy applies here: everyone connects.
    for to in web(&lab) {
        lab.assert_tcp("client", to, TcpOutcome::Connected);
        lab.assert_tcp("stranger", to, TcpOutcome::Connected);
    }
    let warnings = agent.log_lines("policy warning:");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(
            "kubernetes: ClusterNetworkPolicy typo: spec.appliedTo[0].namespaceSelector.matchLabels.enviroment: label key `enviroment` is on no Namespace"
        ),
        "{}",
        warnings[0]
    );
    agent.stop();
}

/// A Node named `name`, labelled `role`, at `ips` (two InternalIPs).
fn node(name: &str, role: &str, ips: [IpAddr; 2]) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"role": role}},
           "status": {"addresses": [{"type": "InternalIP", "address": ips[0].to_string()},
                                    {"type": "InternalIP", "address": ips[1].to_string()}]}})
}

/// Other Nodes reach an agent in controller mode only as the members of
/// the controller's Node groups. The server Pod takes TCP from the Nodes
/// labelled `role: db` and drops the rest; Node `node-b`, so labelled,
/// has the client's addresses, and the stranger is no Node. The agent
/// lists and watches its own Node alone (every Node watch but the
/// controller's carries `metadata.name=node`), so it learns node-b's
/// addresses from the group: (a) the client connects, the stranger is
/// refused; (b) node-b relabelled `role: web` leaves the group, and the
/// client is refused. IPv4 and IPv6.
///
/// Mutation (tried): Node selections read from the agent's own inventory
/// in controller mode (`Published::start` not called for them in
/// `Selections::start`, `core/src/selection/index.rs`): the group is
/// never subscribed to, and the client is refused in (a).
#[test]
fn kubernetes_controller_mode_takes_other_nodes_from_a_node_group() {
    let Some(lab) = node_lab(
        "kubernetes_controller_mode_takes_other_nodes_from_a_node_group",
        "stranger",
    ) else {
        return;
    };
    let api = api_with_web(&lab);
    api.apply(node("node", "web", ips(&lab, "server")));
    api.apply(node("node-b", "db", ips(&lab, "client")));
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "web-from-db-nodes"},
               "spec": {"priority": 5, "tier": "application",
                        "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                        "ingress": [{"name": "db-nodes", "action": "Allow",
                                     "from": [{"nodeSelector": {"matchLabels": {"role": "db"}}}]},
                                    {"name": "rest", "action": "Drop"}]}}),
    );
    let kubeconfig = write_kubeconfig(&lab, &api.kubeconfig());
    let _controller = ControllerProcess::start(&lab, &kubeconfig);
    wait_until("the controller publishes node-b", AGENT_WAIT, || {
        published(&api, ips(&lab, "client")) && ControllerProcess::ready(&lab)
    });
    let options = controller_mode(&lab, &api);
    let mut agent = lab.start_agent(options.clone());
    agent.wait_generation(1);

    // (a) node-b from the group; the stranger refused.
    wait_client(&lab, TcpOutcome::Connected, "the client connects");
    check(&lab, TcpOutcome::Connected, "stranger");
    let node_watches: Vec<String> = api
        .watches()
        .iter()
        .filter(|w| w.path == "/api/v1/nodes")
        .map(|w| w.fields.clone())
        .collect();
    assert!(
        node_watches.iter().filter(|f| f.is_empty()).count() == 1
            && node_watches.iter().any(|f| f == "metadata.name=node"),
        "one watch of every Node (the controller's), the agent's of its own: {node_watches:?}"
    );

    // (b) node-b leaves the group: the client is refused.
    api.apply(node("node-b", "web", ips(&lab, "client")));
    wait_client(&lab, TcpOutcome::TimedOut, "the client is refused");
    check(&lab, TcpOutcome::TimedOut, "stranger");
    agent.stop();
}

/// The first local Pod of a Namespace is enforced with that Namespace's
/// policies from its first ruleset. An agent in controller mode leaves
/// out the namespaced policies of a Namespace none of its Pods lives in;
/// here Namespace `shop` holds an Antrea NetworkPolicy dropping TCP from
/// the intruder's addresses to every Pod of it, and no Pod. The lab's
/// `shop` peer serves the same port as the server, as a Pod the API server
/// does not know yet (its address is no endpoint: not enforced, both
/// clients connect). Then that Pod is written, in `shop`, on this Node,
/// while the intruder and the client probe it without pause (a new
/// connection every 20 ms each): from the ruleset that first holds the
/// Pod on, the intruder never connects, and the client keeps connecting
/// (the positive control). IPv4 and IPv6.
///
/// Mutation (tried): `Store::reaches` answering false for every policy
/// (the left-out policy never admitted): the intruder connects after the
/// Pod's ruleset is applied.
#[test]
fn kubernetes_controller_mode_enforces_a_namespaces_policies_from_its_first_local_pod() {
    let Some(lab) = Lab::builder(
        "kubernetes_controller_mode_enforces_a_namespaces_policies_from_its_first_local_pod",
    )
    .peer("client")
    .peer("intruder")
    .peer("server")
    .peer("shop")
    .ipv6()
    .build() else {
        return;
    };
    lab.serve_tcp("server", PORT, Service::Echo);
    lab.serve_tcp("shop", PORT, Service::Echo);
    let api = api_with_web(&lab);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    let intruder = ips(&lab, "intruder");
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
               "metadata": {"name": "no-intruder", "namespace": "shop"},
               "spec": {"priority": 1, "tier": "application",
                        "appliedTo": [{"podSelector": {}}],
                        "ingress": [{"name": "intruder", "action": "Drop",
                                     "from": [{"ipBlock": {"cidr": format!("{}/32", intruder[0])}},
                                              {"ipBlock": {"cidr": format!("{}/128", intruder[1])}}]}]}}),
    );
    let options = controller_mode(&lab, &api);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let targets = ips(&lab, "shop").map(|ip| SocketAddr::new(ip, PORT));
    for to in targets {
        lab.assert_tcp("intruder", to, TcpOutcome::Connected);
    }

    let (prober, client) = (
        probe(&lab, "intruder", &targets),
        probe(&lab, "client", &targets),
    );
    assert!(prober.wait_connected(&targets, Duration::ZERO, 3));
    let mut pod = pod("shop", "shop", "node", ips(&lab, "shop"));
    pod["metadata"]["namespace"] = json!("shop");
    api.apply(pod);
    agent.wait_generation(2);
    let applied = prober.now();
    prober.wait_attempts(&targets, applied, 10);
    assert!(
        client.wait_connected(&targets, applied, 3),
        "the client does not connect to the new Pod\n{}",
        agent.log()
    );
    for (target, attempts) in prober.finish() {
        let through = connected_from(&attempts, applied);
        assert!(
            through.is_empty(),
            "the intruder reached the new Pod {target} after its ruleset: {through:?}\n{}",
            agent.log()
        );
    }
    drop(client);
    agent.stop();
}
