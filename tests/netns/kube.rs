//! Kubernetes mode end to end: `tollgate run --kubernetes` reads from the
//! fake API server (`tests/fake_api`, in the node namespace; no real
//! apiserver, TLS, token or RBAC) and enforces on the wire a policy added
//! through it, following a Pod's label changes out of and back into it; a
//! cluster without the ExternalEntity CRD is enforced at once, and an
//! ExternalEntity created once the CRD appears is selected, until the CRD
//! goes away. An invalid object is listed live by `tollgate get skipped`
//! over the status socket, counted in `tollgate status`, and reported as a
//! Kubernetes Event from the node.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{Lab, TcpOutcome, AGENT_WAIT};
use tollgate_fake_api::{collection, FakeApi};

fn pod(name: &str, app: &str, ip: IpAddr) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "prod", "labels": {"app": app}},
           "spec": {"nodeName": "node",
                    "containers": [{"name": "main", "ports": [{"name": "http", "containerPort": 8080}]}]},
           "status": {"podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}]}})
}

fn drop_from(name: &str, app: &str, cidr: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": name},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": app}}}],
                    "ingress": [{"name": "drop-clients", "action": "Drop",
                                 "from": [{"ipBlock": {"cidr": cidr}}]}]}})
}

#[test]
fn kubernetes_policy_and_label_change_via_fake_api_server() {
    let Some(lab) = Lab::builder("kubernetes_policy_and_label_change_via_fake_api_server")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, crate::harness::Service::Echo);
    // The API server listens on the node namespace's loopback, where the
    // agent runs.
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(pod("web", "web", lab.addr("server").into()));
    api.apply(pod("client", "client", lab.addr("client").into()));
    // Invalid: a custom Tier's priority is at most 250.
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
                     "metadata": {"name": "bad"}, "spec": {"priority": 400}}),
    );
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();

    let mut options = lab.agent_options();
    options.kubeconfig = Some(kubeconfig);
    let socket = options.status_socket.clone();
    let node_name = options.node_name.clone();
    let mut agent = lab.start_agent(options);
    // Generation 1: the first complete snapshot from the API server
    // (nothing is decided before it).
    agent.wait_generation(1);
    skipped_tier_is_listed_and_reported(&api, &socket, &node_name);
    let web = SocketAddr::new(lab.addr("server").into(), 8080);
    lab.assert_tcp("client", web, TcpOutcome::Connected);

    api.apply(drop_from("drop-clients", "web", &lab.subnet("client")));
    agent.wait_generation(2);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);

    // Relabelled, the Pod leaves the policy...
    api.apply(pod("web", "other", lab.addr("server").into()));
    agent.wait_generation(3);
    lab.assert_tcp("client", web, TcpOutcome::Connected);

    // ...and comes back under it.
    api.apply(pod("web", "web", lab.addr("server").into()));
    agent.wait_generation(4);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);

    // Deleting the policy through the API server lifts it.
    api.delete(&drop_from("drop-clients", "web", &lab.subnet("client")));
    agent.wait_generation(5);
    lab.assert_tcp("client", web, TcpOutcome::Connected);
    assert!(agent.log().contains("kubernetes snapshot"));
    agent.stop();
}

fn tollgate(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .unwrap()
}

/// The invalid Tier `bad` is in `get skipped` (table and JSON, and with
/// `-p bad`; not with `-n`, being cluster-scoped), counted in `status`,
/// and has its Event from this node.
fn skipped_tier_is_listed_and_reported(api: &FakeApi, socket: &std::path::Path, node: &str) {
    let socket = socket.to_str().unwrap();
    let out = tollgate(&["get", "skipped", "--socket", socket, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");
    assert_eq!(listed[0]["kind"], "Tier");
    assert_eq!(listed[0]["name"], "bad");
    assert_eq!(listed[0]["reason"], "PolicySkipped");
    assert_eq!(listed[0]["uid"], "uid--bad");
    assert!(
        listed[0]["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("spec.priority"),
        "{listed:#}"
    );
    let out = tollgate(&["get", "skipped", "--socket", socket, "-p", "bad"]);
    let table = String::from_utf8_lossy(&out.stdout);
    eprintln!("tollgate get skipped -p bad:\n{table}");
    assert!(table.starts_with("KIND"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Tier") && l.contains("bad") && l.contains("PolicySkipped")),
        "{table}"
    );
    // -p names the object (a Tier is cluster-scoped); -n a Namespace.
    let count = |filter: &[&str]| {
        let args = [
            &["get", "skipped", "--socket", socket, "-o", "json"][..],
            filter,
        ]
        .concat();
        let v: Value = serde_json::from_slice(&tollgate(&args).stdout).unwrap();
        v.as_array().unwrap().len()
    };
    assert_eq!(count(&["-p", "bad"]), 1);
    assert_eq!(count(&["-p", "good"]), 0);
    assert_eq!(count(&["-n", "default"]), 0);
    assert_eq!(count(&["-n", "default", "-p", "bad"]), 0);
    let out = tollgate(&["status", "--socket", socket]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("kubernetes:         synced, 1 skipped, 0 partly enforced"),
        "{text}"
    );
    let event = crate::harness::poll_until(Duration::from_secs(10), || {
        api.events()
            .into_values()
            .find(|e| e["regarding"]["name"] == "bad")
    })
    .expect("an Event on the Tier");
    assert_eq!(event["reason"], "PolicySkipped");
    assert_eq!(event["reportingInstance"], node);
}

/// `web` Pods take TCP only from ExternalEntities labelled role=client and
/// from the ClusterGroup `partners`, which is never defined (a warning).
fn web_from_entities() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web-from-entities"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ingress": [{"name": "from-entities", "action": "Allow",
                                 "from": [{"externalEntitySelector": {"matchLabels": {"role": "client"}}}]},
                                {"name": "from-partners", "action": "Allow", "from": [{"group": "partners"}]},
                                {"name": "others", "action": "Drop"}]}})
}

fn external_entity(ips: [IpAddr; 2]) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
           "metadata": {"name": "client-vm", "namespace": "prod", "labels": {"role": "client"}},
           "spec": {"endpoints": [{"ip": ips[0].to_string(), "name": "eth0"}, {"ip": ips[1].to_string()}],
                    "externalNode": "vm-host"}})
}

/// The `web` Pod with an address of each family.
fn dual_stack_pod(ips: [IpAddr; 2]) -> Value {
    let mut pod = pod("web", "web", ips[0]);
    pod["status"]["podIPs"] = json!([{"ip": ips[0].to_string()}, {"ip": ips[1].to_string()}]);
    pod
}

#[test]
fn kubernetes_external_entity_crd_missing_then_installed_then_removed() {
    let Some(lab) =
        Lab::builder("kubernetes_external_entity_crd_missing_then_installed_then_removed")
            .peer("client")
            .peer("server")
            .ipv6()
            .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, crate::harness::Service::Echo);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    let entities = collection("crd.antrea.io/v1alpha2", "ExternalEntity");
    api.uninstall(&entities);
    let server: [IpAddr; 2] = [lab.addr("server").into(), lab.addr6("server").into()];
    let client: [IpAddr; 2] = [lab.addr("client").into(), lab.addr6("client").into()];
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(dual_stack_pod(server));
    api.apply(web_from_entities());
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let assert_web = |outcome: TcpOutcome| {
        for ip in server {
            lab.assert_tcp("client", SocketAddr::new(ip, 8080), outcome);
        }
    };

    let mut options = lab.agent_options();
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    // Without the CRD the first snapshot comes all the same and is
    // enforced: no ExternalEntity, so the client is dropped.
    agent.wait_generation(1);
    let missing =
        "CRD externalentities.crd.antrea.io not installed: ExternalEntity skipped until it appears";
    assert_eq!(agent.count_log(missing), 1, "{}", agent.log());
    assert_web(TcpOutcome::TimedOut);

    // The CRD is installed and the client's ExternalEntity created before
    // the next look: one more snapshot, and the client is let in.
    api.install(&entities);
    api.apply(external_entity(client));
    agent.wait_generation(2);
    assert_web(TcpOutcome::Connected);
    let installed = "CRD externalentities.crd.antrea.io installed: ExternalEntity watched";
    assert_eq!(agent.count_log(installed), 1, "{}", agent.log());

    // The CRD is removed: its ExternalEntity goes with it.
    api.uninstall(&entities);
    agent.wait_generation(3);
    assert_web(TcpOutcome::TimedOut);
    assert_eq!(agent.count_log(missing), 2, "{}", agent.log());

    // The dangling group is warned about once, not once per snapshot, with
    // the object and field; the policy applied all along.
    let warnings = agent.log_lines("policy warning:");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(
            "kubernetes: ClusterNetworkPolicy web-from-entities: spec.ingress[1].from[0].group: ClusterGroup `partners` does not exist (yet)"
        ),
        "{}",
        warnings[0]
    );
    agent.stop();
}

/// The Node's `podCIDRs` in Kubernetes mode: an address in them that no
/// known Pod holds is closed until the Pod is known. The `pod` peer stands
/// for a Pod the CNI has wired (its address is in the Node's range) whose
/// Pod object the fake API server has not sent yet: connections to it and
/// from it, IPv4 and IPv6, tried every 20 ms, all fail; once the Pod
/// arrives (no policy applies to it) both directions connect. The gap
/// between the Pod event and the first connection is printed as `FIGURE`.
///
/// Mutation (tried): not dropping unknown addresses
/// (`plan::local::unknown_addresses` always `None`) lets the connections
/// through before the Pod is known (every attempt connected).
#[test]
fn kubernetes_pod_addresses_are_closed_until_the_pod_is_known() {
    use crate::harness::probe::Prober;
    let Some(lab) = Lab::builder("kubernetes_pod_addresses_are_closed_until_the_pod_is_known")
        .peer("pod")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    for role in ["pod", "client"] {
        lab.serve_tcp(role, 8080, crate::harness::Service::Echo);
    }
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    let options = lab.agent_options();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(json!({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": options.node_name},
                     "spec": {"podCIDR": lab.subnet("pod"),
                              "podCIDRs": [lab.subnet("pod"), format!("{}/64", lab.addr6("pod"))]}}));
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = options;
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let (pod4, pod6) = (
        IpAddr::from(lab.addr("pod")),
        IpAddr::from(lab.addr6("pod")),
    );
    let (client4, client6) = (
        IpAddr::from(lab.addr("client")),
        IpAddr::from(lab.addr6("client")),
    );
    let to_pod = [SocketAddr::new(pod4, 8080), SocketAddr::new(pod6, 8080)];
    let from_pod = [
        SocketAddr::new(client4, 8080),
        SocketAddr::new(client6, 8080),
    ];
    let every = Duration::from_millis(20);
    let attempt = Duration::from_millis(300);
    let limit = Duration::from_secs(120);
    let inbound = Prober::start(lab.ns("client"), &to_pod, every, attempt, limit);
    let outbound = Prober::start(lab.ns("pod"), &from_pod, every, attempt, limit);
    inbound.wait_attempts(&to_pod, Duration::ZERO, 25);
    outbound.wait_attempts(&from_pod, Duration::ZERO, 25);
    let known_at = inbound.now();
    let known_out = outbound.now();
    api.apply(dual_stack_pod([pod4, pod6]));
    assert!(
        inbound.wait_connected(&to_pod, known_at, 5)
            && outbound.wait_connected(&from_pod, known_out, 5),
        "the known Pod is not reachable:\n{}",
        agent.log()
    );
    for (prober, known) in [(inbound, known_at), (outbound, known_out)] {
        for (target, attempts) in prober.finish() {
            let early: Vec<_> = attempts
                .iter()
                .filter(|a| a.at < known && a.outcome == TcpOutcome::Connected)
                .collect();
            assert!(
                early.is_empty(),
                "{target}: connected before the Pod was known: {early:?}\n{}",
                agent.log()
            );
            let first = attempts
                .iter()
                .find(|a| a.at >= known && a.outcome == TcpOutcome::Connected)
                .expect("connected once known");
            let closed = attempts.iter().filter(|a| a.at < known).count();
            println!(
                "KUBE-UNKNOWN {target}: 0 of {closed} attempts before the Pod event connected; first connection {} ms after it",
                (first.at - known).as_millis()
            );
            crate::docker::figure("kubernetes_pod_known_to_open_ms", first.at - known);
        }
    }
    agent.stop();
}

const COMPILE_METRICS: &str = "127.0.0.1:9532";

/// A remote Pod (another Node's) labelled `app`, with an address of each
/// family.
fn remote_pod(app: &str, ips: [IpAddr; 2]) -> Value {
    let mut pod = pod("client", app, ips[0]);
    pod["spec"]["nodeName"] = json!("other-node");
    pod["status"]["podIPs"] = json!([{"ip": ips[0].to_string()}, {"ip": ips[1].to_string()}]);
    pod
}

/// `web` Pods drop TCP from Pods labelled `app: bad`.
fn drop_from_bad() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "drop-bad"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ingress": [{"name": "drop-bad", "action": "Drop",
                                 "from": [{"podSelector": {"matchLabels": {"app": "bad"}}}]}]}})
}

/// Incremental compilation on the wire: a label change of a remote Pod
/// flips its connections to a local Pod (allowed, dropped, allowed) by a
/// patch of the address sets alone (`tollgate_compiles_total{how="patched"}`,
/// the rules not assembled again), a status-only write of it (an
/// annotation) reaches no compile at all (the source counts it in
/// `tollgate_kubernetes_writes_unread_total` and makes no snapshot), and
/// a new local Pod
/// changes the kernel's endpoint set member by member: the set keeps its
/// hash seed (`initval`, drawn anew for every set the kernel creates), so
/// it was never refilled through a swap, and never lost its first member.
/// IPv4 and IPv6; the verdict cache is off, so every probe is the agent's.
///
/// Mutation: `Incremental::apply` calling a remote member's change
/// `Update::Rules` (every change assembled again) fails the `patched`
/// wait (tried); the datapath changing an existing set by `swap` from a
/// refilled `<set>-next` (main's way before) fails the `initval` check
/// (tried).
#[test]
fn kubernetes_remote_label_change_is_patched_and_the_endpoint_set_changed_in_place() {
    let Some(lab) = Lab::builder(
        "kubernetes_remote_label_change_is_patched_and_the_endpoint_set_changed_in_place",
    )
    .peer("client")
    .peer("server")
    .ipv6()
    .build() else {
        return;
    };
    lab.serve_tcp("server", 8080, crate::harness::Service::Echo);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    let server: [IpAddr; 2] = [lab.addr("server").into(), lab.addr6("server").into()];
    let client: [IpAddr; 2] = [lab.addr("client").into(), lab.addr6("client").into()];
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(dual_stack_pod(server));
    api.apply(remote_pod("client", client));
    api.apply(drop_from_bad());
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = lab.agent_options().args(&[
        "--verdict-cache",
        "off",
        "--metrics-address",
        COMPILE_METRICS,
    ]);
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let assert_web = |outcome: TcpOutcome| {
        for ip in server {
            lab.assert_tcp("client", SocketAddr::new(ip, 8080), outcome);
        }
    };
    let metric = |name: &str| {
        crate::harness::metrics::scrape(lab.node(), COMPILE_METRICS)
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("{name} not exported"))
    };
    let compiles = |how: &str| metric(&format!("tollgate_compiles_total{{how=\"{how}\"}}"));
    // Each change is waited for by its count, then by the ruleset it made
    // being applied (the source may hand a snapshot more than once).
    let applied = || agent.count_log("ruleset applied");
    let wait = |what: &str, how: &str, count: f64, before: usize| {
        crate::harness::wait_until(what, AGENT_WAIT, || {
            compiles(how) >= count && applied() > before
        });
    };
    // Positive control: not labelled bad, the client connects.
    assert_web(TcpOutcome::Connected);
    let assembled = compiles("assembled");
    let patched = compiles("patched");

    let before = applied();
    api.apply(remote_pod("bad", client));
    wait("the relabel patched", "patched", patched + 1.0, before);
    assert_web(TcpOutcome::TimedOut);
    assert_eq!(compiles("patched"), patched + 1.0, "{}", agent.log());
    assert_eq!(
        compiles("assembled"),
        assembled,
        "the rules were not assembled again"
    );

    // A status-only write: the same addresses and labels. The source
    // keeps nothing of it, so no snapshot and no compile follow.
    let unread = || metric("tollgate_kubernetes_writes_unread_total");
    let (unchanged, written) = (compiles("unchanged"), unread());
    let mut status = remote_pod("bad", client);
    status["metadata"]["annotations"] = json!({"ready": "true"});
    api.apply(status);
    crate::harness::wait_until("the status write counted unread", AGENT_WAIT, || {
        unread() > written
    });
    assert_eq!(compiles("unchanged"), unchanged);
    assert_eq!(compiles("patched"), patched + 1.0);
    assert_eq!(compiles("assembled"), assembled);
    assert_web(TcpOutcome::TimedOut);

    let before = applied();
    api.apply(remote_pod("client", client));
    wait("the relabel back patched", "patched", patched + 2.0, before);
    assert_web(TcpOutcome::Connected);
    assert_eq!(compiles("assembled"), assembled);

    // A second local web Pod (an address of the server's link no
    // interface holds) joins the endpoint sets in place.
    let list = |set: &str| lab.node().ok(&format!("ipset list {set}"));
    let sets = ["tollgate-endpoints-v4", "tollgate-endpoints-v6"];
    let seed = |listing: &str| {
        listing
            .split_whitespace()
            .skip_while(|w| *w != "initval")
            .nth(1)
            .unwrap_or_else(|| panic!("no initval in {listing}"))
            .to_string()
    };
    let before: Vec<String> = sets.iter().map(|set| list(set)).collect();
    let mut second: [IpAddr; 2] = server;
    if let (IpAddr::V4(v4), IpAddr::V6(v6)) = (server[0], server[1]) {
        let (mut a, mut b) = (v4.octets(), v6.segments());
        a[3] = 3;
        b[7] = 3;
        second = [a.into(), std::net::Ipv6Addr::from(b).into()];
    }
    let mut web2 = dual_stack_pod(second);
    web2["metadata"]["name"] = json!("web2");
    api.apply(web2);
    crate::harness::wait_until("the second web Pod enforced", AGENT_WAIT, || {
        sets.iter()
            .zip(second)
            .all(|(set, ip)| list(set).contains(&ip.to_string()))
    });
    for (family, set) in sets.iter().enumerate() {
        let after = list(set);
        assert_eq!(
            seed(&before[family]),
            seed(&after),
            "{set} created anew:\n{}\n{after}",
            before[family]
        );
        assert!(after.contains(&server[family].to_string()), "{after}");
    }
    assert_web(TcpOutcome::Connected);
    agent.stop();
}

/// `web` Pods take ingress from Pods labelled `app: client` only.
fn allow_only_clients() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web-from-clients"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ingress": [{"name": "clients", "action": "Allow",
                                 "from": [{"podSelector": {"matchLabels": {"app": "client"}}}]},
                                {"name": "rest", "action": "Drop"}]}})
}

/// Slice 0 of the AddressGroup of `app: client` Pods, as a `tollgate
/// controller` publishes it (`core/src/selection/group.rs`).
fn client_group(ips: &[IpAddr]) -> Value {
    use tollgate::model::LabelSelector;
    use tollgate::selection::group::{
        self, canonical, key, slice_name, AddressGroupSpec, GroupMember,
    };
    use tollgate::selection::{NamespaceScope, Selection};
    let selection = Selection::Pods {
        namespaces: NamespaceScope::All,
        pods: Some(LabelSelector {
            match_labels: [("app".to_string(), "client".to_string())]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        }),
    };
    let k = key(&selection);
    let members = match ips.is_empty() {
        true => Vec::new(),
        false => vec![GroupMember {
            ips: ips.into(),
            named_ports: Box::default(),
        }],
    };
    let spec = AddressGroupSpec {
        selection: canonical(&selection),
        slice: 0,
        slices: Vec::new(),
        members,
    };
    group::object(&slice_name(&k, 0), &k, &spec)
}

const PEERS_METRICS: &str = "127.0.0.1:9533";

/// Controller mode on the wire (`kubernetes.peers: controller`): the peer
/// Pod is on another Node, so the agent (watching its own Pods only)
/// learns its addresses from a hand-applied AddressGroup alone. The group
/// allows it (positive control); its address removed from the group, new
/// connections are dropped; back, allowed. Then slice 0 deleted: the agent
/// says it waits for the group, and the ruleset in force stays — the
/// client still connects, nothing drops everything. No controller renews
/// a Lease all along: status and `tollgate_controller_stale` say stale,
/// and enforcement holds both ways meanwhile. IPv4 and IPv6; the verdict
/// cache is off, so every probe is the agent's.
///
/// Mutation: the agent building a ruleset while a group is missing (the
/// waiting checks of `Incremental::ruleset`'s patch path and of
/// `agent::compiler::Compiler::compile` disabled): slice 0 deleted reads
/// as an empty group (tried: fails — the agent never says it keeps the
/// ruleset; before that wait was in the test, the probe after the
/// deletion failed instead: the client dropped).
#[test]
fn kubernetes_controller_mode_enforces_remote_peers_from_an_address_group() {
    let Some(lab) =
        Lab::builder("kubernetes_controller_mode_enforces_remote_peers_from_an_address_group")
            .peer("client")
            .peer("server")
            .ipv6()
            .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, crate::harness::Service::Echo);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    let server: [IpAddr; 2] = [lab.addr("server").into(), lab.addr6("server").into()];
    let client: [IpAddr; 2] = [lab.addr("client").into(), lab.addr6("client").into()];
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(dual_stack_pod(server));
    api.apply(remote_pod("client", client));
    api.apply(allow_only_clients());
    api.apply(client_group(&client));
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = lab.agent_options().args(&[
        "--verdict-cache",
        "off",
        "--set",
        "kubernetes.peers=controller",
        "--metrics-address",
        PEERS_METRICS,
    ]);
    options.kubeconfig = Some(kubeconfig);
    let socket = options.status_socket.clone();
    let mut agent = lab.start_agent(options);
    let assert_web = |outcome: TcpOutcome| {
        for ip in server {
            lab.assert_tcp("client", SocketAddr::new(ip, 8080), outcome);
        }
    };
    let status = || {
        let out = tollgate(&["status", "--socket", socket.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let metric = |name: &str| {
        crate::harness::metrics::scrape(lab.node(), PEERS_METRICS)
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("{name} not exported"))
    };

    agent.wait_generation(1);
    assert_web(TcpOutcome::Connected);

    api.apply(client_group(&[]));
    agent.wait_generation(2);
    assert_web(TcpOutcome::TimedOut);

    api.apply(client_group(&client));
    agent.wait_generation(3);
    assert_web(TcpOutcome::Connected);

    // Slice 0 gone: waiting, the last ruleset in force. The agent logs
    // that it keeps it (once at the start too: its first compile learns
    // which groups to watch) as its reload ends.
    let applied = agent.count_log("ruleset applied");
    let waited = agent.count_log("peers: waiting for groups");
    api.delete(&client_group(&[]));
    crate::harness::wait_until("the agent waits for the group", AGENT_WAIT, || {
        agent.count_log("peers: waiting for groups") > waited
    });
    assert!(status().contains("waiting for 1 groups"), "{}", status());
    assert_eq!(metric("tollgate_controller_groups_waiting"), 1.0);
    assert_web(TcpOutcome::Connected);
    assert_eq!(
        agent.count_log("ruleset applied"),
        applied,
        "{}",
        agent.log()
    );

    // No Lease all along: stale, and enforced both ways meanwhile.
    let text = status();
    assert!(text.contains("controller STALE"), "{text}");
    assert_eq!(metric("tollgate_controller_stale"), 1.0);
    agent.stop();
}
