//! The CustomResourceDefinitions of `docker/crds.yaml`, written once here
//! from shared parts (a selector, a peer, a port are the same schema in
//! every place they appear) and rendered to that file:
//! `UPDATE_CRDS=1 cargo test --test manifests` rewrites it, and the test
//! fails while the file differs. The schemas follow Antrea's own CRDs
//! (`build/charts/antrea/crds/`) field by field, with the ranges, enums and
//! patterns of the Antrea API's validation that a structural OpenAPI
//! schema can state; what needs more (a group that exists, `except`
//! inside `cidr`) stays with tollgate's validator.
//!
//! It owns only the schema text; it must never read the cluster or the
//! policy examples (the tests beside it do).

use serde_json::{json, Value};

/// The label value syntax of Kubernetes (63 characters at most, as
/// `matchLabels` values and `matchExpressions` values).
const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// An IANA service name, as a named port: lower case, 15 characters.
const PORT_NAME: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// What Antrea's `fqdn` accepts: letters, digits, `-`, `.` and `*`.
const FQDN: &str = "^[-A-Za-z0-9.*]+$";
/// A `logLabel` (Antrea: a label value of at most 63 characters).
const LOG_LABEL: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";

fn string() -> Value {
    json!({"type": "string"})
}

fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

fn object(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

fn with(mut schema: Value, extra: Value) -> Value {
    let map = schema.as_object_mut().unwrap();
    for (k, v) in extra.as_object().unwrap() {
        map.insert(k.clone(), v.clone());
    }
    schema
}

fn port_number() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535})
}

/// A Kubernetes LabelSelector.
fn selector() -> Value {
    object(json!({
        "matchLabels": {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        },
        "matchExpressions": array(with(
            object(json!({
                "key": string(),
                "operator": {"type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                "values": array(json!({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE})),
            })),
            json!({"required": ["key", "operator"]}),
        )),
    }))
}

/// `{name, namespace}`: a ServiceAccount or a Service.
fn named_ref() -> Value {
    with(
        object(json!({"name": string(), "namespace": string()})),
        json!({"required": ["name", "namespace"]}),
    )
}

fn cidr() -> Value {
    json!({"type": "string", "format": "cidr"})
}

fn ip_block() -> Value {
    with(
        object(json!({"cidr": cidr(), "except": array(cidr())})),
        json!({"required": ["cidr"]}),
    )
}

fn ip_address() -> Value {
    json!({"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]})
}

/// A policy's or a rule's `appliedTo` entry (no `ipBlock`: Antrea refuses
/// it there). `node`: the policy-level list of a ClusterNetworkPolicy,
/// which may select Nodes.
fn applied_to(node: bool) -> Value {
    let mut fields = json!({
        "podSelector": selector(),
        "namespaceSelector": selector(),
        "externalEntitySelector": selector(),
        "group": string(),
        "serviceAccount": named_ref(),
        "service": named_ref(),
    });
    if node {
        fields["nodeSelector"] = selector();
    }
    array(object(fields))
}

/// A rule's `from` (ingress) or `to` (egress) entry.
fn peer(egress: bool) -> Value {
    let mut fields = json!({
        "podSelector": selector(),
        "namespaceSelector": selector(),
        "externalEntitySelector": selector(),
        "nodeSelector": selector(),
        "namespaces": with(
            object(json!({
                "match": {"type": "string", "enum": ["Self"]},
                "sameLabels": array(string()),
            })),
            json!({"minProperties": 1, "maxProperties": 1}),
        ),
        "ipBlock": ip_block(),
        "group": string(),
        "serviceAccount": named_ref(),
        "scope": {"type": "string", "enum": ["Cluster", "ClusterSet"]},
    });
    if egress {
        fields["fqdn"] = json!({"type": "string", "maxLength": 253, "pattern": FQDN});
    }
    array(object(fields))
}

fn ports() -> Value {
    array(object(json!({
        "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
        // A number or a named port; a structural schema says so with the
        // int-or-string extension and this exact anyOf.
        "port": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "minimum": 1,
            "maximum": 65535,
            "maxLength": 15,
            "pattern": PORT_NAME,
        },
        "endPort": port_number(),
        "sourcePort": port_number(),
        "sourceEndPort": port_number(),
    })))
}

/// ICMP and IGMP matches; IGMP types are the query in ingress rules and
/// the reports (v1, v2, v3) in egress rules, as Antrea has them.
fn protocols(egress: bool) -> Value {
    let igmp_types = if egress {
        json!([0x12, 0x16, 0x22])
    } else {
        json!([0x11])
    };
    let byte = json!({"type": "integer", "minimum": 0, "maximum": 255});
    array(with(
        object(json!({
            "icmp": object(json!({"icmpType": byte, "icmpCode": byte})),
            "igmp": object(json!({
                "igmpType": {"type": "integer", "enum": igmp_types},
                "groupAddress": ip_address(),
            })),
        })),
        json!({"oneOf": [{"required": ["icmp"]}, {"required": ["igmp"]}]}),
    ))
}

fn l7_protocols() -> Value {
    array(with(
        object(json!({
            "http": object(json!({
                "host": string(),
                "method": {
                    "type": "string",
                    "enum": ["GET", "POST", "PUT", "HEAD", "DELETE", "TRACE", "OPTIONS", "CONNECT", "PATCH"],
                },
                "path": string(),
            })),
            "tls": object(json!({"sni": string()})),
        })),
        json!({"oneOf": [{"required": ["http"]}, {"required": ["tls"]}]}),
    ))
}

/// A `toServices` entry (Antrea's PeerService): in a cluster-scoped
/// policy `namespace` required and `scope` Cluster or ClusterSet, in a
/// namespaced one neither (as Antrea's CRDs have them).
fn peer_service(cluster: bool) -> Value {
    if cluster {
        with(
            object(json!({
                "name": string(),
                "namespace": string(),
                "scope": {"type": "string", "enum": ["Cluster", "ClusterSet"]},
            })),
            json!({"required": ["name", "namespace"]}),
        )
    } else {
        with(
            object(json!({"name": string(), "namespace": string(), "scope": string()})),
            json!({"required": ["name"]}),
        )
    }
}

fn rules(egress: bool, cluster: bool) -> Value {
    let mut fields = json!({
        "name": string(),
        "action": {"type": "string", "enum": ["Allow", "Drop", "Reject", "Pass"]},
        "appliedTo": applied_to(false),
        "ports": ports(),
        "protocols": protocols(egress),
        "l7Protocols": l7_protocols(),
        "enableLogging": {"type": "boolean"},
        "logLabel": {"type": "string", "pattern": LOG_LABEL},
    });
    if egress {
        fields["to"] = peer(true);
        fields["toServices"] = array(peer_service(cluster));
    } else {
        fields["from"] = peer(false);
    }
    array(with(object(fields), json!({"required": ["action"]})))
}

/// The `status` Antrea's controller writes on a policy; tollgate neither
/// writes nor reads it, the schema only keeps it when Antrea shares the
/// definitions.
fn policy_status() -> Value {
    object(json!({
        "phase": string(),
        "observedGeneration": {"type": "integer", "format": "int64"},
        "currentNodesRealized": {"type": "integer", "format": "int32"},
        "desiredNodesRealized": {"type": "integer", "format": "int32"},
        "conditions": array(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
    }))
}

fn policy_spec(cluster: bool) -> Value {
    with(
        object(json!({
            "tier": string(),
            "priority": {"type": "number", "format": "float", "minimum": 1.0, "maximum": 10000.0},
            "appliedTo": applied_to(cluster),
            "ingress": rules(false, cluster),
            "egress": rules(true, cluster),
        })),
        json!({"required": ["priority"]}),
    )
}

fn group_spec(cluster: bool) -> Value {
    let mut fields = json!({
        "childGroups": array(string()),
        "podSelector": selector(),
        "namespaceSelector": selector(),
        "externalEntitySelector": selector(),
        "ipBlocks": array(ip_block()),
        "serviceReference": named_ref(),
    });
    if cluster {
        fields["nodeSelector"] = selector();
    }
    object(fields)
}

fn group_status() -> Value {
    object(json!({
        "conditions": array(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
    }))
}

fn external_entity_spec() -> Value {
    object(json!({
        "endpoints": with(
            array(object(json!({"ip": ip_address(), "name": string()}))),
            json!({"description": "The interfaces of the entity; ip is matched like a Pod's IP."}),
        ),
        "ports": with(
            array(object(json!({
                "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
                "port": {
                    "x-kubernetes-int-or-string": true,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "minimum": 1,
                    "maximum": 65535,
                },
                "name": {"type": "string", "maxLength": 15, "pattern": PORT_NAME},
            }))),
            json!({"description": "Named ports the entity exposes."}),
        ),
        "externalNode": with(
            string(),
            json!({"description": "The ExternalNode whose interfaces these are."}),
        ),
    }))
}

fn column(name: &str, kind: &str, path: &str, description: &str) -> Value {
    let mut c = json!({"name": name, "type": kind, "jsonPath": path});
    if kind == "number" {
        c["format"] = json!("float");
    }
    if !description.is_empty() {
        c["description"] = json!(description);
    }
    c
}

fn age() -> Value {
    column("Age", "date", ".metadata.creationTimestamp", "")
}

fn policy_columns(kind: &str) -> Value {
    json!([
        column(
            "Tier",
            "string",
            ".spec.tier",
            &format!("The Tier this {kind} belongs to.")
        ),
        column(
            "Priority",
            "number",
            ".spec.priority",
            &format!("The priority of this {kind} within its Tier (lower first)."),
        ),
        age(),
    ])
}

struct Kind {
    kind: &'static str,
    plural: &'static str,
    short: &'static str,
    namespaced: bool,
    version: &'static str,
    spec: Value,
    status: Option<Value>,
    columns: Value,
}

fn definition(k: Kind) -> Value {
    let mut root = json!({"type": "object", "properties": {"spec": k.spec}});
    if let Some(status) = k.status {
        root["properties"]["status"] = status;
    }
    let mut version = json!({
        "name": k.version,
        "served": true,
        "storage": true,
        "additionalPrinterColumns": k.columns,
        "schema": {"openAPIV3Schema": root},
    });
    if root_has_status(&version) {
        version["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{}.crd.antrea.io", k.plural),
            "labels": {"app.kubernetes.io/name": "tollgate"},
        },
        "spec": {
            "group": "crd.antrea.io",
            "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "kind": k.kind,
                "listKind": format!("{}List", k.kind),
                "plural": k.plural,
                "singular": k.kind.to_lowercase(),
                "shortNames": [k.short],
            },
            "versions": [version],
        },
    })
}

fn root_has_status(version: &Value) -> bool {
    version["schema"]["openAPIV3Schema"]["properties"]
        .get("status")
        .is_some()
}

/// Every definition, in the order of the file.
pub fn definitions() -> Vec<Value> {
    let tier_spec = with(
        object(json!({
            "priority": {"type": "integer", "minimum": 0, "maximum": 255},
            "description": string(),
        })),
        json!({"required": ["priority"]}),
    );
    [
        Kind {
            kind: "Tier",
            plural: "tiers",
            short: "tr",
            namespaced: false,
            version: "v1beta1",
            spec: tier_spec,
            status: None,
            columns: json!([
                column(
                    "Priority",
                    "integer",
                    ".spec.priority",
                    "The priority of this Tier relative to other Tiers (lower first)."
                ),
                age(),
            ]),
        },
        Kind {
            kind: "ClusterNetworkPolicy",
            plural: "clusternetworkpolicies",
            short: "acnp",
            namespaced: false,
            version: "v1beta1",
            spec: policy_spec(true),
            status: Some(policy_status()),
            columns: policy_columns("ClusterNetworkPolicy"),
        },
        Kind {
            kind: "NetworkPolicy",
            plural: "networkpolicies",
            short: "annp",
            namespaced: true,
            version: "v1beta1",
            spec: policy_spec(false),
            status: Some(policy_status()),
            columns: policy_columns("Antrea NetworkPolicy"),
        },
        Kind {
            kind: "ClusterGroup",
            plural: "clustergroups",
            short: "cg",
            namespaced: false,
            version: "v1beta1",
            spec: group_spec(true),
            status: Some(group_status()),
            columns: json!([age()]),
        },
        Kind {
            kind: "Group",
            plural: "groups",
            short: "grp",
            namespaced: true,
            version: "v1beta1",
            spec: group_spec(false),
            status: Some(group_status()),
            columns: json!([age()]),
        },
        Kind {
            kind: "ExternalEntity",
            plural: "externalentities",
            short: "ee",
            namespaced: true,
            version: "v1alpha2",
            spec: external_entity_spec(),
            status: None,
            columns: json!([age()]),
        },
    ]
    .into_iter()
    .map(definition)
    .collect()
}

/// The comment that opens `docker/crds.yaml`.
pub const HEADER: &str = "\
# CustomResourceDefinitions of the Antrea kinds tollgate reads, for clusters
# without Antrea. On a cluster that runs Antrea, do not apply this file:
# Antrea's own definitions are already installed.
#
# GENERATED from tests/manifests/crds.rs: edit the schemas there, then
# `UPDATE_CRDS=1 cargo test --test manifests` rewrites this file (the test
# fails while the two differ).
#
# The schemas give the API server what Antrea's give it: enums (action,
# protocol, operator, HTTP method, IGMP type), ranges (priority 1-10000 as
# a float, Tier priority 0-255, ports 1-65535, ICMP type and code 0-255),
# patterns (label values, named ports, fqdn, logLabel), `format: cidr`,
# required fields. Checks that need other objects (the Tier exists, except
# inside cidr) are tollgate's: an object the API server admits but tollgate
# refuses is skipped, with an error in the agent's log. ExternalEntity is
# optional for tollgate: without its definition the kind is skipped until
# the definition appears. `status` is Antrea's controller's; tollgate
# writes none, so no Desired/Current Nodes columns are printed.
";

/// The whole file.
pub fn render() -> String {
    let mut out = String::from(HEADER);
    for doc in definitions() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&doc).unwrap());
    }
    out
}
