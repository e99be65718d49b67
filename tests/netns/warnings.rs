//! Validation warnings in file mode: a policy naming a ClusterGroup that is
//! not defined is admitted (as Antrea admits it), enforced, and warned
//! about once per reload with its file, object and field; once the group
//! is defined the warning stops and the group selects.

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

const WARNING: &str = "policy warning: ";

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
