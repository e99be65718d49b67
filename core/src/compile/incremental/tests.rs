//! The incremental compiler against the full one: for random sequences of
//! Pod, label, Namespace, Node and policy changes, the ruleset the
//! incremental compiler holds equals `compile` of the same objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::compile::compile;
use crate::model::Snapshot;
use crate::selection::Delta;

const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const LOCAL: &str = "n1";

/// One Pod of the world.
#[derive(Clone, Debug)]
struct PodSpec {
    namespace: usize,
    app: usize,
    tier: Option<usize>,
    /// Index into a small pool: Pods share addresses now and then.
    ip: u8,
    v6: bool,
    account: bool,
    /// 0: local, 1: another Node, 2: unscheduled.
    node: u8,
    port: Option<u16>,
}

/// A change of the world.
#[derive(Clone, Debug)]
enum Change {
    Pod(usize, PodSpec),
    DeletePod(usize),
    /// Namespace, env label (None: the Namespace object is deleted).
    Namespace(usize, Option<bool>),
    /// Node, its role label.
    NodeRole(usize, bool),
    TogglePolicy(usize),
    /// A status write: the same Pod written again.
    Rewrite(usize),
}

const APPS: [&str; 3] = ["web", "db", "api"];

fn pod_yaml(index: usize, pod: &PodSpec) -> String {
    let ns = NAMESPACES[pod.namespace];
    let tier = pod
        .tier
        .map(|t| format!(", tier: t{t}"))
        .unwrap_or_default();
    let node = match pod.node {
        0 => format!("nodeName: {LOCAL}\n  "),
        1 => "nodeName: n2\n  ".to_string(),
        _ => String::new(),
    };
    let account = if pod.account { "sa1" } else { "default" };
    let ports = pod
        .port
        .map(|p| format!("\n    ports: [{{name: http, containerPort: {p}}}]"))
        .unwrap_or_default();
    let ips = if pod.v6 {
        format!(
            "podIPs: [{{ip: 10.0.0.{}}}, {{ip: 'fd00::{}'}}]",
            pod.ip + 1,
            pod.ip + 1
        )
    } else {
        format!("podIP: 10.0.0.{}", pod.ip + 1)
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{index}\n  namespace: {ns}\n  labels: {{app: {}{tier}}}\nspec:\n  {node}serviceAccountName: {account}\n  containers:\n  - name: main{ports}\nstatus:\n  {ips}\n---\n",
        APPS[pod.app]
    )
}

const POLICIES: [&str; 8] = [
    // Pods by label anywhere, and by Namespace label.
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: web}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - action: Allow
    from: [{podSelector: {matchLabels: {app: db}}}]
  - action: Drop
    from: [{namespaceSelector: {matchLabels: {env: prod}}}]
---
",
    // Self, with a named port.
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: self}
spec:
  priority: 2
  appliedTo: [{namespaceSelector: {matchLabels: {env: prod}}}]
  egress:
  - action: Allow
    to: [{namespaces: {match: Self}, podSelector: {matchLabels: {app: api}}}]
    ports: [{port: http}]
  - action: Drop
---
",
    // sameLabels.
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: same}
spec:
  priority: 3
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {sameLabels: [env]}}]
---
",
    // A ServiceAccount, in a namespaced policy.
    "apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: sa, namespace: a}
spec:
  priority: 4
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Allow
    from: [{serviceAccount: {name: sa1, namespace: b}}]
  - action: Drop
---
",
    // Nodes.
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: nodes}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: db}}}]
  ingress:
  - action: Allow
    from: [{nodeSelector: {matchLabels: {role: a}}}]
---
",
    // A ClusterGroup with a child (a Service's backends and a block).
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: child}
spec:
  serviceReference: {name: svc, namespace: a}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: parent}
spec:
  childGroups: [child]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: dev-db}
spec:
  podSelector: {matchLabels: {app: db}}
  namespaceSelector: {matchLabels: {env: dev}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: groups}
spec:
  priority: 6
  appliedTo: [{group: dev-db}]
  ingress:
  - action: Allow
    from: [{group: parent}, {group: dev-db}, {ipBlock: {cidr: 192.0.2.0/24}}]
---
",
    // A Kubernetes NetworkPolicy.
    "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: k8s, namespace: b}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - podSelector: {matchExpressions: [{key: tier, operator: Exists}]}
    - namespaceSelector: {matchLabels: {team: x}}
---
",
    // Node policy peers by Namespace.
    "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: node}
spec:
  priority: 8
  appliedTo: [{nodeSelector: {matchLabels: {role: a}}}]
  ingress:
  - action: Allow
    from: [{namespaceSelector: {matchLabels: {team: x}}, podSelector: {matchLabels: {app: api}}}]
  - action: Drop
---
",
];

/// The world: Pods, Namespace labels, Node roles, policies on.
#[derive(Clone, Debug)]
struct World {
    pods: BTreeMap<usize, PodSpec>,
    namespaces: [Option<bool>; 3],
    roles: [bool; 2],
    policies: [bool; POLICIES.len()],
    /// Snapshots share each object equal to one of the last snapshot's
    /// (as a Kubernetes source hands what did not change), so that what
    /// is kept by object ([`super::Placements`]) is found again; without,
    /// every object is new (as a policy directory reads them).
    shared: Option<std::rc::Rc<std::cell::RefCell<Vec<Arc<crate::model::Object>>>>>,
}

impl World {
    fn pod_object(&self, index: usize) -> crate::model::Object {
        parse(&pod_yaml(index, &self.pods[&index]))
            .objects
            .remove(0)
            .object
            .as_ref()
            .clone()
    }

    fn yaml(&self) -> String {
        let mut out = String::new();
        for (n, env) in self.namespaces.iter().enumerate() {
            if let Some(prod) = env {
                let env = if *prod { "prod" } else { "dev" };
                let team = if n == 0 { "x" } else { "y" };
                out.push_str(&format!(
                    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {}\n  labels: {{env: {env}, team: {team}}}\n---\n",
                    NAMESPACES[n]
                ));
            }
        }
        for (n, role) in self.roles.iter().enumerate() {
            out.push_str(&format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: n{}\n  labels: {{role: {}}}\nstatus:\n  addresses: [{{type: InternalIP, address: 10.9.0.{}}}]\n---\n",
                n + 1,
                if *role { "a" } else { "b" },
                n + 1
            ));
        }
        out.push_str("apiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: a}\nspec:\n  clusterIP: 10.96.0.1\n  selector: {app: api}\n  ports: [{port: 80}]\n---\n");
        for (index, pod) in &self.pods {
            out.push_str(&pod_yaml(*index, pod));
        }
        for (policy, on) in POLICIES.iter().zip(self.policies) {
            if on {
                out.push_str(policy);
            }
        }
        out
    }

    fn snapshot(&self) -> Snapshot {
        let snapshot = parse(&self.yaml());
        match &self.shared {
            Some(last) => share(&mut last.borrow_mut(), snapshot),
            None => snapshot,
        }
    }
}

/// `snapshot` with each object equal to one of `last` replaced by that
/// one, as a Kubernetes source shares what did not change; `last`
/// becomes its objects.
fn share(last: &mut Vec<Arc<crate::model::Object>>, mut snapshot: Snapshot) -> Snapshot {
    for sourced in &mut snapshot.objects {
        if let Some(same) = last.iter().find(|o| **o == sourced.object) {
            sourced.object = Arc::clone(same);
        }
    }
    *last = snapshot
        .objects
        .iter()
        .map(|s| Arc::clone(&s.object))
        .collect();
    snapshot
}

fn parse(yaml: &str) -> Snapshot {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Snapshot { objects }
}

fn local() -> LocalNode {
    LocalNode {
        name: LOCAL.into(),
        labels: Labels::from_iter([("zone".into(), "z1".into())]),
        addresses: vec!["10.9.9.9".parse().unwrap()],
    }
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        0..3usize,
        0..3usize,
        proptest::option::of(0..2usize),
        0..6u8,
        any::<bool>(),
        any::<bool>(),
        0..3u8,
        proptest::option::of(prop_oneof![Just(80u16), Just(8080u16)]),
    )
        .prop_map(
            |(namespace, app, tier, ip, v6, account, node, port)| PodSpec {
                namespace,
                app,
                tier,
                ip,
                v6,
                account,
                node,
                port,
            },
        )
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (0..8usize, pod_spec()).prop_map(|(i, p)| Change::Pod(i, p)),
        2 => (0..8usize).prop_map(Change::DeletePod),
        2 => (0..3usize, proptest::option::of(any::<bool>())).prop_map(|(n, e)| Change::Namespace(n, e)),
        1 => (0..2usize, any::<bool>()).prop_map(|(n, r)| Change::NodeRole(n, r)),
        2 => (0..POLICIES.len()).prop_map(Change::TogglePolicy),
        1 => (0..8usize).prop_map(Change::Rewrite),
    ]
}

fn world() -> impl Strategy<Value = World> {
    (
        proptest::collection::btree_map(0..8usize, pod_spec(), 0..8),
        proptest::array::uniform3(proptest::option::of(any::<bool>())),
        proptest::array::uniform2(any::<bool>()),
        proptest::array::uniform8(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(pods, namespaces, roles, policies, shared)| World {
            pods,
            namespaces,
            roles,
            policies,
            shared: shared.then(Default::default),
        })
}

/// Feeds `change` to the incremental compiler the way a source would: a
/// delta for a Pod or Node, the policy side again for the rest.
fn feed(incremental: &mut Incremental, world: &mut World, change: &Change) -> Update {
    match change {
        Change::Pod(index, pod) => {
            // A Pod never changes Namespace: that is another Pod.
            let mut update = Update::Unchanged;
            if world
                .pods
                .get(index)
                .is_some_and(|old| old.namespace != pod.namespace)
            {
                let object = world.pod_object(*index);
                update = incremental.apply(Delta::delete(&object).unwrap());
            }
            world.pods.insert(*index, pod.clone());
            update.max(incremental.apply(Delta::apply(&world.pod_object(*index)).unwrap()))
        }
        Change::DeletePod(index) => {
            if !world.pods.contains_key(index) {
                return Update::Unchanged;
            }
            let object = world.pod_object(*index);
            world.pods.remove(index);
            incremental.apply(Delta::delete(&object).unwrap())
        }
        Change::Rewrite(index) => {
            if !world.pods.contains_key(index) {
                return Update::Unchanged;
            }
            // What a status write changes and policy never reads.
            let mut object = world.pod_object(*index);
            if let crate::model::Object::Pod(pod) = &mut object {
                pod.metadata
                    .annotations
                    .insert("ready".into(), "true".into());
            }
            incremental.apply(Delta::apply(&object).unwrap())
        }
        Change::NodeRole(node, role) => {
            world.roles[*node] = *role;
            let snapshot = world.snapshot();
            let object = snapshot
                .iter()
                .find(|o| {
                    matches!(o, crate::model::Object::Node(n) if n.metadata.name == format!("n{}", node + 1))
                })
                .unwrap();
            incremental.apply(Delta::apply(object).unwrap())
        }
        Change::Namespace(n, env) => {
            world.namespaces[*n] = *env;
            incremental.set_policies(policy_side(&world.snapshot()))
        }
        Change::TogglePolicy(p) => {
            world.policies[*p] = !world.policies[*p];
            incremental.set_policies(policy_side(&world.snapshot()))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The heart of incremental compilation: whatever the sequence of
    /// Pod (label, address, Namespace, Node, status-only rewrite),
    /// Namespace label, Node label and policy changes, the ruleset the
    /// incremental compiler holds equals `compile` of the same objects,
    /// and a change it calls `Unchanged` builds no ruleset — fed deltas,
    /// or fed the whole snapshot after each change
    /// ([`Incremental::update`]).
    ///
    /// Mutation: `Selections::pod_selections_for` without the selections
    /// that look in several Namespaces (`.chain(&self.pod_unscoped)`
    /// dropped) — a relabelled Pod no longer moves in a
    /// namespaceSelector set; fails within a few cases (tried). So does
    /// a change of a local Pod not telling the [`super::Placements`]
    /// (a policy placed nowhere stays so when a Pod it applies to
    /// arrives), or placements kept whatever the context (tried).
    #[test]
    fn incremental_result_is_the_full_compile(
        start in world(),
        changes in proptest::collection::vec(change(), 1..24),
    ) {
        let mut world = start;
        let mut incremental = Incremental::new(&world.snapshot(), &local());
        let mut current = incremental.ruleset().expect("the first ruleset");
        // The same changes, handed as whole snapshots (as the agent's
        // sources do).
        let mut whole = Incremental::new(&world.snapshot(), &local());
        let mut whole_current = whole.ruleset().expect("the first ruleset");
        prop_assert_eq!(
            current.fingerprint(),
            compile(&world.snapshot(), &local()).fingerprint()
        );
        for change in &changes {
            let update = feed(&mut incremental, &mut world, change);
            let next = incremental.ruleset();
            if update == Update::Unchanged {
                prop_assert!(next.is_none(), "{:?} built a ruleset", change);
            }
            if let Some(next) = next {
                current = next;
            }
            let full = compile(&world.snapshot(), &local()).fingerprint();
            prop_assert_eq!(current.fingerprint(), full.clone(), "after {:?}", change);
            let whole_update = whole.update(&Arc::new(world.snapshot()), &local());
            let next = whole.ruleset();
            if whole_update == Update::Unchanged {
                prop_assert!(next.is_none(), "{:?} built a ruleset", change);
            }
            if let Some(next) = next {
                whole_current = next;
            }
            prop_assert_eq!(whole_current.fingerprint(), full, "snapshot after {:?}", change);
        }
    }
}

/// Namespaces `a` (prod) and `b` (dev), no `c`, no Pods, every policy.
fn bare_world() -> World {
    World {
        pods: BTreeMap::new(),
        namespaces: [Some(true), Some(false), None],
        roles: [true, false],
        policies: [true; POLICIES.len()],
        shared: None,
    }
}

/// An `app: db` Pod of Namespace `namespace` on `node` (0: local, 1:
/// another Node), at pool address `ip`: IPv4, no tier, port or
/// ServiceAccount of its own.
fn db_pod(namespace: usize, node: u8, ip: u8) -> PodSpec {
    PodSpec {
        namespace,
        app: 1,
        tier: None,
        ip,
        v6: false,
        account: false,
        node,
        port: None,
    }
}

#[test]
fn a_status_write_of_a_remote_pod_costs_nothing_and_an_address_change_patches() {
    let mut world = bare_world();
    let spec = |node, ip| db_pod(1, node, ip);
    world.pods.insert(0, spec(0, 0));
    world.pods.insert(1, spec(1, 1));
    let mut incremental = Incremental::new(&world.snapshot(), &local());
    incremental.ruleset().unwrap();
    assert_eq!(
        feed(&mut incremental, &mut world, &Change::Rewrite(1)),
        Update::Unchanged
    );
    assert!(incremental.ruleset().is_none());
    // A remote db Pod moves: peers only.
    assert_eq!(
        feed(&mut incremental, &mut world, &Change::Pod(1, spec(1, 3))),
        Update::Peers
    );
    let patched = incremental.ruleset().unwrap();
    assert_eq!(
        patched.fingerprint(),
        compile(&world.snapshot(), &local()).fingerprint()
    );
    // A local one: the rules again.
    assert_eq!(
        feed(&mut incremental, &mut world, &Change::Pod(0, spec(0, 4))),
        Update::Rules
    );
    assert!(incremental.ruleset().is_some());
}

/// A Namespace's labels assemble the rules again only where a local
/// endpoint lives: elsewhere they move peers (or nothing). Mutation:
/// `holds_local` always true → the remote Namespaces' changes assemble
/// (tried: fails).
#[test]
fn a_namespace_without_local_endpoints_moves_peers_only() {
    let mut world = bare_world();
    // A remote Pod in `a`, the local one in `b`; `c` holds none.
    world.pods.insert(0, db_pod(0, 1, 0));
    world.pods.insert(1, db_pod(1, 0, 1));
    let mut incremental = Incremental::new(&world.snapshot(), &local());
    incremental.ruleset().unwrap();
    let full = |world: &World| compile(&world.snapshot(), &local()).fingerprint();

    // `c` appears, then changes: no Pod of it is a peer, none local.
    for env in [Some(true), Some(false)] {
        let update = feed(&mut incremental, &mut world, &Change::Namespace(2, env));
        assert_eq!(update, Update::Unchanged, "c {env:?}");
        assert!(incremental.ruleset().is_none());
    }
    // `a` leaves `env: prod`: its remote Pod leaves the peers that
    // select by it.
    let update = feed(
        &mut incremental,
        &mut world,
        &Change::Namespace(0, Some(false)),
    );
    assert_eq!(update, Update::Peers);
    assert_eq!(incremental.ruleset().unwrap().fingerprint(), full(&world));
    // `b` holds the local Pod: appliedTo by Namespace reads it.
    let update = feed(
        &mut incremental,
        &mut world,
        &Change::Namespace(1, Some(true)),
    );
    assert_eq!(update, Update::Rules);
    assert_eq!(incremental.ruleset().unwrap().fingerprint(), full(&world));
}

/// A local `web` Pod and a remote `db` Pod in Namespace `a`, ClusterGroup
/// `g` of the Pods `app: {group}`, and ClusterNetworkPolicies `on-group`
/// (applied to `g`) and `on-db` (applied to `app: db`, allowing from
/// `app: {peer}`).
fn placed_yaml(group: &str, peer: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: a}}
---
apiVersion: v1
kind: Node
metadata: {{name: {LOCAL}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: a, labels: {{app: web}}}}
spec: {{nodeName: {LOCAL}}}
status: {{podIPs: [{{ip: 10.0.0.1}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: db, namespace: a, labels: {{app: db}}}}
spec: {{nodeName: n2}}
status: {{podIPs: [{{ip: 10.0.0.2}}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {{name: g}}
spec:
  podSelector: {{matchLabels: {{app: {group}}}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: on-group}}
spec:
  priority: 1
  appliedTo: [{{group: g}}]
  ingress: [{{action: Drop, from: [{{podSelector: {{}}}}]}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: on-db}}
spec:
  priority: 2
  appliedTo: [{{podSelector: {{matchLabels: {{app: db}}}}}}]
  ingress: [{{action: Allow, from: [{{podSelector: {{matchLabels: {{app: {peer}}}}}}}]}}]
---
"
    )
}

/// The summary of policy `name` in `ruleset`.
fn summary<'r>(ruleset: &'r Ruleset, name: &str) -> &'r Arc<crate::ruleset::PolicySummary> {
    ruleset
        .policies()
        .iter()
        .find(|p| p.policy.name == name)
        .expect("the policy")
}

/// An edit of an Antrea policy assembles again, and a policy placed on
/// no local endpoint that the edit left alone is only ranked: its
/// summary is the last ruleset's. Mutation: `Placements::placed_nowhere`
/// remembering nothing → the summary is made again → fails.
#[test]
fn an_edit_of_one_policy_leaves_the_others_placed_nowhere_as_they_were() {
    let mut last = Vec::new();
    let mut snapshot =
        |group: &str, peer: &str| Arc::new(share(&mut last, parse(&placed_yaml(group, peer))));
    let mut incremental = Incremental::new(&snapshot("db", "web"), &local());
    let first = incremental.ruleset().unwrap();
    assert!(summary(&first, "on-db").applied_to.is_empty());
    assert!(summary(&first, "on-group").applied_to.is_empty());

    let edited = snapshot("db", "api");
    assert_eq!(incremental.update(&edited, &local()), Update::Rules);
    let next = incremental.ruleset().unwrap();
    assert_eq!(next.fingerprint(), compile(&edited, &local()).fingerprint());
    assert!(Arc::ptr_eq(
        summary(&first, "on-group"),
        summary(&next, "on-group")
    ));
    assert!(!Arc::ptr_eq(
        summary(&first, "on-db"),
        summary(&next, "on-db")
    ));
}

/// A change of what placement reads but the policy itself (here the
/// group it is applied to) places the policy again. Mutation: only a
/// change of Namespaces holding local endpoints (or of the audited
/// Namespaces) counting as a change of context in `set_policies` → the
/// policy stays placed nowhere → fails.
#[test]
fn an_edit_of_a_group_places_its_policies_again() {
    let mut last = Vec::new();
    let mut snapshot = |group: &str| Arc::new(share(&mut last, parse(&placed_yaml(group, "web"))));
    let mut incremental = Incremental::new(&snapshot("db"), &local());
    let first = incremental.ruleset().unwrap();
    assert!(summary(&first, "on-group").applied_to.is_empty());

    let regrouped = snapshot("web");
    assert_eq!(incremental.update(&regrouped, &local()), Update::Rules);
    let next = incremental.ruleset().unwrap();
    assert_eq!(summary(&next, "on-group").applied_to, ["a/web"]);
    assert_eq!(
        next.fingerprint(),
        compile(&regrouped, &local()).fingerprint()
    );
}

mod controller;
