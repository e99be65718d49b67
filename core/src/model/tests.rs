//! Null handling across every kind: a full example of each kind (every
//! field tollgate reads set), and for every field in it, `null` decodes
//! exactly as the field left out — accepted for optional fields, refused
//! for required ones — as the Kubernetes API server reads it. And what an
//! object does not keep: the API server's bookkeeping, other controllers'
//! status, the size of kinds it is not.

use serde_json::{json, Value};

use super::*;

fn meta(namespaced: bool) -> Value {
    let mut meta = json!({
        "name": "n",
        "labels": {"app": "web"},
        "annotations": {"a": "b"},
        "uid": "u",
        "resourceVersion": "1",
        "generation": 1,
        "generateName": "n-",
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "deletionTimestamp": "2024-01-01T00:00:00Z",
        "deletionGracePeriodSeconds": 30,
        "managedFields": [],
        "ownerReferences": [],
        "finalizers": [],
        "selfLink": "/x"
    });
    if namespaced {
        meta["namespace"] = json!("shop");
    }
    meta
}

fn selector() -> Value {
    json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]
    })
}

fn antrea_rule(peers: &str) -> Value {
    json!({
        "action": "Allow",
        "name": "r",
        "appliedTo": [{
            "podSelector": selector(), "namespaceSelector": selector(),
            "group": "g", "serviceAccount": {"name": "sa", "namespace": "shop"},
            "service": {"name": "svc", "namespace": "shop"},
            "externalEntitySelector": selector()
        }],
        peers: [{
            "podSelector": selector(), "namespaceSelector": selector(),
            "namespaces": {"match": "Self", "sameLabels": ["org"]},
            "nodeSelector": selector(), "group": "g",
            "serviceAccount": {"name": "sa", "namespace": "shop"},
            "ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]},
            "fqdn": "a.com",
            "externalEntitySelector": selector()
        }],
        "toServices": [{"name": "svc", "namespace": "shop"}],
        "ports": [{"protocol": "TCP", "port": 80, "endPort": 90, "sourcePort": 1024, "sourceEndPort": 2048}],
        "protocols": [
            {"icmp": {"icmpType": 8, "icmpCode": 0}},
            {"igmp": {"igmpType": 17, "groupAddress": "224.0.0.1"}}
        ],
        "l7Protocols": [
            {"http": {"host": "h", "method": "GET", "path": "/"}},
            {"tls": {"sni": "s"}}
        ],
        "enableLogging": true,
        "logLabel": "l"
    })
}

fn antrea_policy(kind: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": kind,
        "metadata": meta(namespaced),
        "spec": {
            "tier": "securityops",
            "priority": 5,
            "appliedTo": [{"podSelector": selector(), "nodeSelector": selector()}],
            "ingress": [antrea_rule("from")],
            "egress": [antrea_rule("to")]
        },
        "status": {"phase": "Realized"}
    })
}

fn antrea_group(kind: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "crd.antrea.io/v1beta1",
        "kind": kind,
        "metadata": meta(namespaced),
        "spec": {
            "podSelector": selector(),
            "namespaceSelector": selector(),
            "ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]},
            "ipBlocks": [{"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}],
            "serviceReference": {"name": "svc", "namespace": "shop"},
            "childGroups": ["a"],
            "nodeSelector": selector(),
            "externalEntitySelector": selector()
        },
        "status": {}
    })
}

fn k8s_peer() -> Value {
    json!({
        "podSelector": selector(),
        "namespaceSelector": selector(),
        "ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}
    })
}

/// One full example of every kind tollgate reads.
fn full_examples() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": meta(false),
            "spec": {"priority": 10, "description": "d"}
        }),
        antrea_policy("ClusterNetworkPolicy", false),
        antrea_policy("NetworkPolicy", true),
        antrea_group("ClusterGroup", false),
        antrea_group("Group", true),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(true),
            "spec": {
                "podSelector": selector(),
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [k8s_peer()], "ports": [{"protocol": "UDP", "port": "dns", "endPort": 60}]}],
                "egress": [{"to": [k8s_peer()], "ports": [{"protocol": "TCP", "port": 80, "endPort": 90}]}]
            },
            "status": {}
        }),
        json!({
            "apiVersion": "v1", "kind": "Node", "metadata": meta(false),
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        }),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(false)}),
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta(true),
            "spec": {
                "nodeName": "n", "serviceAccountName": "sa",
                "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}]}]
            },
            "status": {"podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}]}
        }),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": meta(true),
            "spec": {
                "type": "NodePort", "selector": {"app": "web"},
                "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080}]
            }
        }),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(true)}),
        json!({
            "apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity", "metadata": meta(true),
            "spec": {"endpoints": [{"ip": "10.0.0.3", "name": "e"}], "externalNode": "n"}
        }),
    ]
}

/// Where a map key sits in a document.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// The path of every map key of `value`, at any depth.
fn key_paths(value: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(Step::Key(key.clone()));
                out.push(prefix.clone());
                key_paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                prefix.push(Step::Index(i));
                key_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// `doc` with the key at `path` removed (`None`) or set to `replacement`.
fn edited(doc: &Value, path: &[Step], replacement: Option<Value>) -> Value {
    let mut doc = doc.clone();
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut doc;
    for step in parents {
        at = match step {
            Step::Key(k) => &mut at[k.as_str()],
            Step::Index(i) => &mut at[*i],
        };
    }
    let Step::Key(key) = last else {
        unreachable!("paths end at a key")
    };
    let map = at.as_object_mut().unwrap();
    match replacement {
        Some(value) => map.insert(key.clone(), value),
        None => map.remove(key),
    };
    doc
}

fn render(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => format!(".{k}"),
            Step::Index(i) => format!("[{i}]"),
        })
        .collect()
}

#[test]
fn every_full_example_decodes() {
    for doc in full_examples() {
        Object::from_value(doc.clone()).unwrap_or_else(|e| panic!("{e}: {doc}"));
    }
}

#[test]
fn null_reads_as_absent_for_every_field_of_every_kind() {
    let mut optional = 0;
    let mut required = 0;
    for doc in full_examples() {
        let kind = doc["kind"].as_str().unwrap().to_string();
        let mut paths = Vec::new();
        key_paths(&doc, &mut Vec::new(), &mut paths);
        for path in paths {
            let absent = Object::from_value(edited(&doc, &path, None));
            let null = Object::from_value(edited(&doc, &path, Some(Value::Null)));
            match absent {
                Ok(absent) => {
                    optional += 1;
                    let null = null.unwrap_or_else(|e| {
                        panic!("{kind}{}: null is refused: {e}", render(&path))
                    });
                    assert_eq!(null, absent, "{kind}{}", render(&path));
                }
                Err(_) => {
                    required += 1;
                    assert!(null.is_err(), "{kind}{}: null accepted", render(&path));
                }
            }
        }
    }
    // Most fields are optional; the required ones are refused null or not.
    assert!(optional > 300, "{optional} optional fields checked");
    assert!(required > 20, "{required} required fields checked");
}

#[test]
fn null_pod_selector_selects_all_pods() {
    // As the upstream conformance manifests write it: `podSelector:`.
    let doc = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-all", "namespace": "x"},
        "spec": {"podSelector": null, "ingress": null}
    });
    let Object::K8sNetworkPolicy(policy) = Object::from_value(doc).unwrap() else {
        panic!("not a NetworkPolicy")
    };
    assert_eq!(policy.spec.pod_selector, LabelSelector::default());
    assert!(policy.spec.pod_selector.matches(&Default::default()));
    assert!(policy.spec.ingress.is_empty());
}

#[test]
fn null_list_items_are_refused() {
    let mut doc = antrea_policy("ClusterNetworkPolicy", false);
    doc["spec"]["ingress"] = json!([null]);
    let error = Object::from_value(doc).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("spec.ingress[0]: invalid type: null"),
        "{error}"
    );
}

/// Every kind, every field set: the document an object is written as
/// (what the status API hands `tollgate diff live`) decodes to an object
/// of the same kind and the same serialized form (what decisions are made
/// from; the API server's bookkeeping is not part of it).
/// Mutation: writing an Antrea NetworkPolicy as `networking.k8s.io/v1`
/// (`Kind::type_meta`) makes it decode as another kind, or not at all.
#[test]
fn every_object_written_as_a_document_reads_back_equal() {
    for example in full_examples() {
        let text = serde_json::to_string(&example).unwrap();
        let (objects, problems) = crate::decode::parse_documents(std::path::Path::new("a"), &text);
        assert!(problems.is_empty(), "{problems:?}");
        let object = &objects[0].object;
        let written = serde_json::to_string(&object.to_document()).unwrap();
        let (again, problems) = crate::decode::parse_documents(std::path::Path::new("b"), &written);
        assert!(problems.is_empty(), "{written}: {problems:?}");
        assert_eq!(again[0].object.kind(), object.kind(), "{written}");
        assert_eq!(
            serde_json::to_value(&again[0].object).unwrap(),
            serde_json::to_value(object).unwrap(),
            "{written}"
        );
    }
}

/// The API server's bookkeeping in metadata (uid, resourceVersion,
/// timestamps, managedFields, …) is accepted and dropped as it is read:
/// every kind decodes to the object its example makes without it, so a
/// write that changes only bookkeeping is no change, and no object carries
/// its bytes.
///
/// Mutation: `uid` kept as `Option<String>` → the objects differ (tried:
/// it fails).
#[test]
fn metadata_bookkeeping_is_dropped_as_it_is_read() {
    const BOOKKEEPING: [&str; 11] = [
        "uid",
        "resourceVersion",
        "generation",
        "generateName",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "ownerReferences",
        "finalizers",
        "selfLink",
    ];
    for full in full_examples() {
        let mut bare = full.clone();
        let meta = bare["metadata"].as_object_mut().unwrap();
        for key in BOOKKEEPING {
            assert!(meta.remove(key).is_some(), "the example sets {key}");
        }
        let full = Object::from_value(full).unwrap();
        assert_eq!(full, Object::from_value(bare).unwrap());
        let document = full.to_document();
        for key in BOOKKEEPING {
            assert!(document["metadata"].get(key).is_none(), "{key} written");
        }
    }
}

/// The `status` other controllers write on policies and groups (Antrea's
/// realization: phase, realized Nodes, conditions) is accepted and dropped
/// as it is read, as the API server's bookkeeping is: a policy with one
/// decodes to the policy without, and no object carries its bytes.
///
/// Mutation: the Kubernetes NetworkPolicy's `status` kept as
/// `Option<serde_json::Value>` → the objects differ (tried: it fails).
#[test]
fn a_status_written_by_another_controller_is_dropped_as_it_is_read() {
    let status = json!({
        "phase": "Realized",
        "observedGeneration": 3,
        "currentNodesRealized": 4999,
        "desiredNodesRealized": 5000,
        "conditions": [{"type": "Realizable", "status": "True",
                        "lastTransitionTime": "2026-11-30T00:00:00Z"}],
    });
    let subject = json!({"namespaces": {"matchLabels": {"team": "a"}}});
    let npapi = |version: &str, kind: &str, spec: Value| {
        json!({"apiVersion": format!("policy.networking.k8s.io/{version}"), "kind": kind,
               "metadata": meta(false), "spec": spec})
    };
    let examples = full_examples().into_iter().chain([
        npapi(
            "v1alpha1",
            "AdminNetworkPolicy",
            json!({"priority": 10, "subject": subject}),
        ),
        npapi(
            "v1alpha1",
            "BaselineAdminNetworkPolicy",
            json!({"subject": subject}),
        ),
        npapi(
            "v1alpha2",
            "ClusterNetworkPolicy",
            json!({"tier": "Admin", "priority": 10, "subject": subject}),
        ),
    ]);
    let mut checked = 0;
    for bare in examples {
        let kind = Object::from_value(bare.clone()).unwrap().kind();
        let read_with_status = matches!(
            kind,
            Kind::ClusterNetworkPolicy
                | Kind::AntreaNetworkPolicy
                | Kind::ClusterGroup
                | Kind::Group
                | Kind::K8sNetworkPolicy
                | Kind::AdminNetworkPolicy
                | Kind::BaselineAdminNetworkPolicy
                | Kind::NpClusterNetworkPolicy
        );
        if !read_with_status {
            continue;
        }
        let mut with_status = bare.clone();
        with_status["status"] = status.clone();
        assert_eq!(
            Object::from_value(with_status).unwrap(),
            Object::from_value(bare).unwrap(),
            "{kind}"
        );
        checked += 1;
    }
    assert_eq!(checked, 8, "policy and group kinds checked");
}

/// Every object of a snapshot is at least as large as the enum's largest
/// variant. The many objects are the inventory's (150,000 Pods in the
/// controller or a watch-mode agent at 5,000 Nodes), so the larger policy
/// and group kinds are boxed and an object is no larger than the largest
/// kind kept inline.
///
/// Mutation: `K8sNetworkPolicy` unboxed → 296 bytes against 224 (tried:
/// it fails; unboxed, the Antrea groups made it 520).
#[test]
fn an_object_is_no_larger_than_the_kinds_kept_inline() {
    use std::mem::size_of;
    let inline = [
        size_of::<Tier>(),
        size_of::<Node>(),
        size_of::<Namespace>(),
        size_of::<Pod>(),
        size_of::<Service>(),
        size_of::<ServiceAccount>(),
        size_of::<ExternalEntity>(),
    ];
    let largest = inline.into_iter().max().unwrap();
    assert!(
        size_of::<Object>() <= largest + size_of::<usize>(),
        "Object is {} bytes; the largest kind kept inline {largest}",
        size_of::<Object>()
    );
}

/// A policy's `appliedTo` entries and peers are most of what an agent holds
/// per policy (4,500 at the scale `docs/design/scale.md` aims for, each
/// with a few), and most use a Pod and a Namespace selector alone: the
/// rarer fields (Node and ExternalEntity selectors, ServiceAccounts,
/// Services, ipBlocks, `namespaces`) are boxed, a word each when absent.
/// Unboxed they were 312 and 368 bytes.
///
/// Mutation: `Peer::ip_block` unboxed → 224 bytes (tried: it fails).
#[test]
fn applied_to_and_peers_keep_their_rare_fields_boxed() {
    use std::mem::size_of;
    let (selector, name, boxed) = (
        size_of::<Option<LabelSelector>>(),
        size_of::<Option<String>>(),
        size_of::<usize>(),
    );
    // Pod and Namespace selectors, `group`, and four boxed fields.
    let applied_to = 2 * selector + name + 4 * boxed;
    assert!(
        size_of::<AppliedTo>() <= applied_to,
        "{}",
        size_of::<AppliedTo>()
    );
    // Pod and Namespace selectors, `group` and `fqdn`, and five boxed fields.
    let peer = 2 * selector + 2 * name + 5 * boxed;
    assert!(size_of::<Peer>() <= peer, "{}", size_of::<Peer>());
}

/// Labels are kept as a sorted vector ([`Labels`]): written in any order,
/// they read to the same object and match the same selectors, and are
/// written back sorted (what the verdict cache's digest and the rule names
/// hash), as a tree kept them. Documents reach the model through
/// `serde_json::Value`, whose maps are sorted today (it would keep the
/// written order if any crate turned on `serde_json/preserve_order`), so
/// the metadata is also read straight from YAML, in the written order.
///
/// Mutation: the labels kept in the order they are read
/// (`LiteMap::from_sorted_store_unchecked`) → the metadata read from YAML
/// holds them unsorted, where a lookup by key misses (tried: it fails).
#[test]
fn labels_written_in_any_order_read_the_same() {
    let pod = |labels: &str| {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: a, labels: {{{labels}}}}}\nspec: {{nodeName: n}}\n"
        );
        let (objects, problems) =
            crate::decode::parse_documents(std::path::Path::new("p.yaml"), &yaml);
        assert!(problems.is_empty(), "{problems:?}");
        objects[0].object.clone()
    };
    let unsorted = pod("zone: z1, app: web, tier: fe");
    let sorted = pod("app: web, tier: fe, zone: z1");
    assert_eq!(unsorted, sorted);
    let Object::Pod(p) = &*unsorted else {
        panic!("{unsorted:?}")
    };
    let keys: Vec<&str> = p.metadata.labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["app", "tier", "zone"]);
    let selector: LabelSelector =
        serde_json::from_value(json!({"matchLabels": {"zone": "z1", "app": "web"}})).unwrap();
    assert!(selector.matches(&p.metadata.labels));
    let meta: ObjectMeta =
        serde_saphyr::from_str("name: p\nlabels: {zone: z1, app: web, tier: fe}\n").unwrap();
    assert_eq!(meta.labels, p.metadata.labels);
    assert!(selector.matches(&meta.labels));
    let document = serde_json::to_string(&unsorted.to_document()).unwrap();
    assert!(
        document.contains(r#""labels":{"app":"web","tier":"fe","zone":"z1"}"#),
        "{document}"
    );
}
