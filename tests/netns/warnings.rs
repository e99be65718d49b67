//! Validation warnings in file mode: a policy naming a ClusterGroup that is
//! not defined is admitted (as Antrea admits it), enforced, and warned
//! about once per reload with its file, object and field; once the group
//! is defined the warning stops and the group selects. The same for what
//! is valid but probably not meant (`validate::intent`): a label-key typo
//! in a peer, an empty policy directory; these are listed by `status` too.

use std::net::SocketAddr;

use crate::harness::{Lab, Service, TcpOutcome};

/// The node lets the ClusterGroup `partners` reach TCP 8001 and rejects
/// everyone else there.
const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: partners-only
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: partners
      action: Allow
      from:
        - group: partners
      ports:
        - protocol: TCP
          port: 8001
    - name: others
      action: Reject
      ports:
        - protocol: TCP
          port: 8001
";

/// The dangling-group warning (the agent also warns that this lab has no
/// inventory to check selectors against; that one is not counted here).
const WARNING: &str = "does not exist (yet)";

#[test]
fn dangling_group_reference_warns_once_per_reload_and_applies() {
    let Some(lab) = Lab::builder("dangling_group_reference_warns_once_per_reload_and_applies")
        .peer("client")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8001, Service::Echo);
    let to = SocketAddr::new(lab.node_addr("client").into(), 8001);
    lab.write_policy("policy.yaml", POLICY);

    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    // Enforced although `partners` is missing: it selects nothing.
    lab.assert_tcp("client", to, TcpOutcome::Refused);
    let expected = format!(
        "{}: ClusterNetworkPolicy partners-only: spec.ingress[0].from[0].group: ClusterGroup `partners` does not exist (yet): selects nothing until it is defined",
        lab.policy_dir().join("policy.yaml").display()
    );
    assert_eq!(agent.count_log(WARNING), 1, "{}", agent.log());
    assert_eq!(agent.count_log(&expected), 1, "{}", agent.log());
    assert!(agent
        .log()
        .lines()
        .any(|l| l.contains(WARNING) && l.contains("WARN")));

    // Every reload says it again, once.
    agent.reload();
    agent.wait_generation(2);
    assert_eq!(agent.count_log(&expected), 2, "{}", agent.log());

    // Defined, the group selects the client and the warning stops.
    lab.write_policy(
        "partners.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata:\n  name: partners\nspec:\n  ipBlocks:\n    - cidr: {}\n",
            lab.subnet("client")
        ),
    );
    agent.wait_generation(3);
    lab.assert_tcp("client", to, TcpOutcome::Connected);
    assert_eq!(agent.count_log(WARNING), 2, "{}", agent.log());
    agent.stop();
}

/// The client's Pod (`lab/client`, `app: client`) and a node policy that
/// lets `apps: client` — a typo of the key — reach TCP 8001 and rejects
/// the rest there.
fn typo_policy(lab: &Lab, key: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: lab, labels: {{app: client}}}}
status: {{podIP: {client}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: clients-only
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: clients
      action: Allow
      from:
        - podSelector:
            matchLabels:
              {key}: client
      ports:
        - protocol: TCP
          port: 8001
    - name: others
      action: Reject
      ports:
        - protocol: TCP
          port: 8001
",
        client = lab.addr("client")
    )
}

fn status_warnings(lab: &Lab) -> Vec<String> {
    let socket = lab.dir().join("tollgate.sock");
    match tollgate::status::request(&socket, &tollgate::status::Request::Status) {
        Ok(tollgate::status::Response::Status(report)) => report.policy_warnings,
        other => panic!("status: {other:?}"),
    }
}

/// A label-key typo in a peer selector: the rule selects nobody (the
/// client is refused, which is what the warning explains), and the agent
/// says so on every reload, with file, object, field and the nearest key,
/// and lists it in `status`; fixed, the warning goes and the client
/// connects.
///
/// Mutation: the run loop's reload no longer calls `Warnings::reloaded`
/// (src/agent/serve.rs) — the second warning line never comes and the
/// status keeps the stale list.
#[test]
fn a_label_key_typo_in_a_peer_warns_on_each_reload_and_in_status() {
    let Some(lab) = Lab::builder("a_label_key_typo_in_a_peer_warns_on_each_reload_and_in_status")
        .peer("client")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8001, Service::Echo);
    let to = SocketAddr::new(lab.node_addr("client").into(), 8001);
    lab.write_policy("policy.yaml", &typo_policy(&lab, "apps"));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    lab.assert_tcp("client", to, TcpOutcome::Refused);
    let expected = format!(
        "{}: ClusterNetworkPolicy clients-only: spec.ingress[0].from[0].podSelector.matchLabels.apps: label key `apps` is on no Pod of the inventory: the selector selects no Pod (did you mean `app`?)",
        lab.policy_dir().join("policy.yaml").display()
    );
    assert_eq!(agent.count_log(&expected), 1, "{}", agent.log());
    assert_eq!(status_warnings(&lab), std::slice::from_ref(&expected));

    agent.reload();
    agent.wait_generation(2);
    assert_eq!(agent.count_log(&expected), 2, "{}", agent.log());

    lab.write_policy("policy.yaml", &typo_policy(&lab, "app"));
    agent.wait_generation(3);
    lab.assert_tcp("client", to, TcpOutcome::Connected);
    assert_eq!(agent.count_log(&expected), 2, "{}", agent.log());
    assert_eq!(status_warnings(&lab), Vec::<String>::new());
    agent.stop();
}

/// `run` on an empty policy directory allows everything (the positive
/// control: the client connects) — and says so at the start, on each
/// reload, and in `status`.
///
/// Mutation: `intent` no longer warns about a source without objects
/// (core/src/validate/intent.rs) — no warning line, an empty status list.
#[test]
fn an_empty_policy_directory_says_everything_is_allowed() {
    let Some(lab) = Lab::builder("an_empty_policy_directory_says_everything_is_allowed")
        .peer("client")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8001, Service::Echo);
    let to = SocketAddr::new(lab.node_addr("client").into(), 8001);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    lab.assert_tcp("client", to, TcpOutcome::Connected);
    let expected = format!(
        "{}: no objects found: no policy applies, every connection is allowed",
        lab.policy_dir().display()
    );
    assert_eq!(agent.count_log(&expected), 1, "{}", agent.log());
    assert_eq!(status_warnings(&lab), std::slice::from_ref(&expected));
    agent.reload();
    agent.wait_generation(2);
    assert_eq!(agent.count_log(&expected), 2, "{}", agent.log());
    agent.stop();
}
